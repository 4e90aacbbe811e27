"""A script of the checkout built on verl's PPO trainer (a RayPPOTrainer subclass under its own @hydra.main) composes
the checkout's copy of verl's ppo_trainer.yaml as verl's own entry does: the run is that config under the command's
key=value overrides, read by verl's reader."""

from checkouts import plan_of_command, write_checkout

from memlint.extract.configs.frameworks import table
from memlint.extract.configs.overrides import HYDRA_KINDS

_MAIN = '''
import hydra
import ray
from verl.trainer.ppo.ray_trainer import RayPPOTrainer


class MyTrainer(RayPPOTrainer):
    pass


@hydra.main(config_path="config", config_name="ppo_trainer", version_base=None)
def main(config):
    ray.init()
    MyTrainer(config=config).fit()


if __name__ == "__main__":
    main()
'''

_PPO = '''data:
  max_prompt_length: 512
  max_response_length: 512
actor_rollout_ref:
  model:
    path: ~/models/deepseek-llm-7b-chat
    enable_gradient_checkpointing: False
    use_remove_padding: False
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
    ppo_micro_batch_size_per_gpu: 8
    use_dynamic_bsz: False
    ulysses_sequence_parallel_size: 1
  rollout:
    n: 1
trainer:
  n_gpus_per_node: 8
  nnodes: 1
'''


def test_a_checkout_hydra_entry_over_verls_ppo_config(tmp_path, monkeypatch):
    sh = ("python3 main_custom.py data.max_response_length=1024 actor_rollout_ref.model.path=Qwen/Qwen2.5-3B "
          "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=16 trainer.n_gpus_per_node=4 "
          "actor_rollout_ref.rollout.n=8\n")
    write_checkout(tmp_path, {"main_custom.py": _MAIN, "config/ppo_trainer.yaml": _PPO, "train.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "train.sh")
    assert plan.get("model_id").value == "Qwen/Qwen2.5-3B" and plan.get("model_id").source == "command-line"
    assert (plan.get("per_device_batch").value, plan.get("max_length").value, plan.get("num_gpus").value) == (16, 1536, 4)
    assert plan.get("grad_accum").value == 32  # 256 × 8 / 4 ranks / 16
    assert plan.get("trainer").value == "verl"


def test_the_hydra_framework_kinds_are_the_data_ones():
    assert set(HYDRA_KINDS) == {name for name, fw in table().items() if "hydra" in fw}


_SFT_YAML = '''data:
  train_batch_size: 64
  micro_batch_size_per_gpu: 4
  max_length: 1024
model:
  partial_pretrain: /data/models/Qwen2.5-3B
  enable_gradient_checkpointing: False
  lora_rank: 0
optim:
  lr: 1e-5
ulysses_sequence_parallel_size: 1
use_remove_padding: False
'''


def test_a_checkout_vendoring_verl_runs_its_own_copy_of_the_packaged_config(tmp_path, monkeypatch):
    sh = ("torchrun --nproc_per_node=2 -m verl.trainer.fsdp_sft_trainer data.micro_batch_size_per_gpu=2 "
          "data.max_length=4096\n")
    write_checkout(tmp_path, {"verl/__init__.py": "", "verl/trainer/__init__.py": "",
                              "verl/trainer/fsdp_sft_trainer.py": "import hydra\n",
                              "verl/trainer/config/sft_trainer.yaml": _SFT_YAML, "scripts/run.sh": sh})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "scripts/run.sh")
    assert plan.get("model_id").value == "/data/models/Qwen2.5-3B"  # the copy's edit, not verl's packaged default
    assert (plan.get("per_device_batch").value, plan.get("max_length").value) == (2, 4096)
    assert plan.get("grad_accum").value == 16  # 64 / 2 ranks / 2


_PPO_01 = '''data:
  max_prompt_length: 256
  max_response_length: 1024
actor_rollout_ref:
  model:
    path: ~/models/deepseek-llm-7b-chat
  actor:
    strategy: fsdp
    ppo_mini_batch_size: 256
    ppo_micro_batch_size: 64
    ulysses_sequence_parallel_size: 1
  rollout:
    n: 1
trainer:
  n_gpus_per_node: 8
  nnodes: 1
'''


_WORKERS_TIMES_N = """
class ActorRolloutRefWorker:
    def __init__(self, config):
        self.config.actor.ppo_mini_batch_size //= world
        self.config.actor.ppo_micro_batch_size //= world
        self.config.actor.ppo_mini_batch_size *= self.config.rollout.n
        self.config.actor.ppo_micro_batch_size *= self.config.rollout.n
"""


def test_a_vendored_verl_that_multiplies_the_micro_batch_by_n(tmp_path, monkeypatch):
    """A checkout vendoring a verl snapshot whose fsdp_workers.py multiplies the global ppo_micro_batch_size by
    rollout.n (main between PRs #80 and #136, as TinyZero froze it): per GPU 8/4×4; the same config over a verl that
    only divides it (every release) gives 8/4."""
    sh = ("python3 -m verl.trainer.main_ppo actor_rollout_ref.rollout.n=4 actor_rollout_ref.actor.ppo_mini_batch_size=32 "
          "actor_rollout_ref.actor.ppo_micro_batch_size=8 trainer.n_gpus_per_node=4\n")
    files = {"verl/__init__.py": "", "verl/trainer/__init__.py": "", "verl/trainer/main_ppo.py": "",
             "verl/trainer/config/ppo_trainer.yaml": _PPO_01, "run.sh": sh}
    write_checkout(tmp_path / "a", {**files, "verl/workers/fsdp_workers.py": _WORKERS_TIMES_N})
    plan = plan_of_command(tmp_path / "a", monkeypatch, "bash", "run.sh")
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (8, 4)  # 32/4×4 / 8
    released = _WORKERS_TIMES_N.replace("        self.config.actor.ppo_micro_batch_size *= self.config.rollout.n\n", "")
    write_checkout(tmp_path / "b", {**files, "verl/workers/fsdp_workers.py": released})
    plan = plan_of_command(tmp_path / "b", monkeypatch, "bash", "run.sh")
    assert (plan.get("per_device_batch").value, plan.get("grad_accum").value) == (2, 16)


def test_a_vendored_verl_run_naming_its_own_config_composes_that_one(tmp_path, monkeypatch):
    """`--config-path cfg --config-name my_ppo`: the command's config, not the vendored copy of verl's packaged one."""
    mine = _PPO.replace("ppo_micro_batch_size_per_gpu: 8", "ppo_micro_batch_size_per_gpu: 7")
    main = _MAIN.replace('config_path="config", config_name="ppo_trainer"', 'config_path="config", config_name="ppo_trainer"')
    write_checkout(tmp_path, {"verl/__init__.py": "", "verl/trainer/__init__.py": "", "verl/trainer/main_ppo.py": main,
                              "verl/trainer/config/ppo_trainer.yaml": _PPO, "cfg/my_ppo.yaml": mine,
                              "run.sh": "python3 -m verl.trainer.main_ppo --config-path cfg --config-name my_ppo\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "run.sh")
    assert "verl/trainer/config/ppo_trainer.yaml" not in plan.path
