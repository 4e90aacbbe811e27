"""A fused linear cross-entropy (Liger, Cut Cross-Entropy): read from scripts and configs,
counted as one chunk of logits instead of the full tensor, and MEM205 quiet about it."""

import json
from pathlib import Path

import pytest

from memlint.catalog import resolve
from memlint.check import check_plan
from memlint.cli import main
from memlint.estimate import estimate
from memlint.estimate.activations import liger_chunk_tokens
from memlint.estimate.evaluation import eval_estimate
from memlint.estimate.from_plan import setup_from_plan
from memlint.estimate.setup import Setup
from memlint.extract import extract_source
from memlint.extract.configs import read_config

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "configs"
LLAMA = resolve("meta-llama/Llama-3.1-8B")
V, H, SB = 128_256, 4096, 8192

SCRIPT = """\
from transformers import AutoModelForCausalLM, TrainingArguments, Trainer
{pre}model = {loader}.from_pretrained("meta-llama/Llama-3.1-8B", torch_dtype="bfloat16")
args = TrainingArguments("out", per_device_train_batch_size=1, bf16=True{kw})
Trainer(model=model, args=args).train()
"""


def _script(kw: str = "", pre: str = "", loader: str = "AutoModelForCausalLM") -> str:
    return SCRIPT.format(kw=kw, pre=pre, loader=loader)


@pytest.mark.parametrize("src, value, source", [
    (_script(", use_liger_kernel=True"), "liger", "literal"),
    (_script(", use_liger_kernel=False"), False, "literal"),
    (_script(), False, "library-default"),
    (_script(pre="from liger_kernel.transformers import apply_liger_kernel_to_llama\napply_liger_kernel_to_llama()\n"),
     "liger", "library-default"),
    (_script(pre="from liger_kernel.transformers import apply_liger_kernel_to_llama\n"
                 "apply_liger_kernel_to_llama(fused_linear_cross_entropy=False)\n"), False, "literal"),
    (_script(pre="from liger_kernel.transformers import AutoLigerKernelForCausalLM\n", loader="AutoLigerKernelForCausalLM"),
     "liger", "literal"),
])
def test_scripts_say_whether_the_loss_is_fused(src, value, source):
    v = extract_source(src, "train.py").get("fused_loss")
    assert (v.value, v.source) == (value, source)


def test_trl_sft_config_reads_the_older_use_liger_flag():
    src = ("from trl import SFTConfig, SFTTrainer\n"
           "args = SFTConfig('out', use_liger=True, max_seq_length=1024)\n"
           "SFTTrainer(model='meta-llama/Llama-3.1-8B', args=args).train()\n")
    assert extract_source(src, "sft.py").get("fused_loss").value == "liger"


def test_training_arguments_from_a_config_file_leave_the_loss_unknown_without_a_note():
    src = ("from transformers import AutoModelForCausalLM, HfArgumentParser, TrainingArguments, Trainer\n"
           "args, = HfArgumentParser(TrainingArguments).parse_json_file('args.json')\n"
           "model = AutoModelForCausalLM.from_pretrained('meta-llama/Llama-3.1-8B')\n"
           "Trainer(model=model, args=args).train()\n")
    plan = extract_source(src, "hf.py")
    assert not plan.get("fused_loss").known
    assert not [n for n in plan.notes if "fused_loss" in n]


def _axolotl(tmp_path, extra: str) -> object:
    p = tmp_path / "axolotl.yml"
    p.write_text("base_model: meta-llama/Llama-3.1-8B\nsequence_len: 8192\nmicro_batch_size: 1\nbf16: true\n" + extra)
    return read_config(p)


def test_axolotl_liger_flag_counts_only_with_the_liger_plugin(tmp_path):
    plan = _axolotl(tmp_path, "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_fused_linear_cross_entropy: true\n")
    assert plan.get("fused_loss").value == "liger" and plan.get("fused_loss").source == "literal"
    plan = _axolotl(tmp_path, "liger_fused_linear_cross_entropy: true\n")
    assert plan.get("fused_loss").value is False
    assert any("without axolotl.integrations.liger.LigerPlugin" in n for n in plan.notes)
    plan = _axolotl(tmp_path, "plugins:\n  - axolotl.integrations.liger.LigerPlugin\nliger_rms_norm: true\n")
    assert plan.get("fused_loss").value is False


def test_axolotl_cut_cross_entropy_plugin_is_on_unless_turned_off(tmp_path):
    cce = "plugins:\n  - axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin\n"
    plan = _axolotl(tmp_path, cce)
    assert (plan.get("fused_loss").value, plan.get("fused_loss").source) == ("cce", "library-default")
    assert _axolotl(tmp_path, cce + "cut_cross_entropy: true\n").get("fused_loss").value == "cce"
    assert _axolotl(tmp_path, cce + "cut_cross_entropy: false\n").get("fused_loss").value is False


def test_llamafactory_and_trl_recipes_read_their_liger_flags(tmp_path):
    lf = (FIXTURES / "llamafactory_llama3_lora_sft.yaml").read_text()
    assert read_config(FIXTURES / "llamafactory_llama3_lora_sft.yaml").get("fused_loss").value is False
    p = tmp_path / "llamafactory.yaml"
    p.write_text(lf + "\nenable_liger_kernel: true\n")
    plan = read_config(p)
    assert plan.get("fused_loss").value == "liger" and not plan.diagnostics
    trl = (FIXTURES / "trl_smollm_sft_full.yaml").read_text()
    p = tmp_path / "config_sft.yaml"
    p.write_text(trl + "\nuse_liger_kernel: true\n")
    plan = read_config(p)
    assert plan.get("fused_loss").value == "liger" and not plan.diagnostics


def test_liger_chunk_matches_the_kernels_own_example():
    # liger's comment: BT = 4096*4, V = 32000, H = 4096 -> inc_factor = 8, chunk_size = 2048
    llama2 = resolve("meta-llama/Llama-2-7b-hf")
    assert liger_chunk_tokens(Setup(model=llama2, seq=4096, batch=4)) == 2048
    # Llama-3: inc = ceil(128256 / 4096) = 32, 8192 / 32 = 256 tokens per chunk
    assert liger_chunk_tokens(Setup(model=LLAMA, seq=SB)) == 256
    # a short sequence is one chunk no longer than itself
    assert liger_chunk_tokens(Setup(model=LLAMA, seq=20)) == 1


def test_fused_loss_holds_one_chunk_of_logits_not_all_of_them():
    lora = Setup(model=LLAMA, method="lora", seq=SB, recompute=True, attn="flash_attention_2")
    plain = estimate(lora).bytes("logits")
    fused = estimate(lora.with_(fused_loss=True))
    assert plain == SB * V * (2 + 4 + 4)
    assert fused.bytes("logits") == 256 * V * 2 + SB * H * 2 + SB * 4
    assert "one chunk of 256 tokens" in fused.components["logits"].formula
    assert fused.peak < estimate(lora).peak - 9 * 2**30
    # full fine-tuning: lm_head's gradient is allocated in forward, inside the loss
    full = Setup(model=LLAMA, seq=SB, recompute=True)
    assert estimate(full.with_(fused_loss=True)).bytes("logits") == 256 * V * 2 + SB * H * 2 + SB * 4 + V * H * 2


def test_textbook_and_evaluation_still_count_the_full_logits():
    s = Setup(model=LLAMA, method="lora", seq=SB, recompute=True)
    f = s.with_(fused_loss=True)
    assert estimate(f, "textbook").bytes("logits") == estimate(s, "textbook").bytes("logits") == SB * V * 4
    # liger's patched forward materialises the logits outside training
    assert eval_estimate(f, 1).logits == eval_estimate(s, 1).logits


def test_axolotl_liger_fixture_estimates_with_the_fused_loss_and_mem205_stays_silent(tmp_path):
    path = FIXTURES / "axolotl_llama3_lora_liger.yml"
    plan = read_config(path)
    planned = setup_from_plan(plan)
    assert planned.setup.fused_loss is True
    assert "MEM205" not in {f.code for f in check_plan(plan).findings}
    plain = tmp_path / "axolotl.yml"
    plain.write_text("\n".join(l for l in path.read_text().splitlines() if "liger" not in l.lower()) + "\n")
    assert "MEM205" in {f.code for f in check_plan(read_config(plain)).findings}


def test_cli_fused_loss_flag(capsys):
    base = ["estimate", "--model", "meta-llama/Llama-3.1-8B", "--method", "lora", "--seq", "8192", "--format", "json"]
    assert main(base) == 0
    plain = json.loads(capsys.readouterr().out)["components"]["logits"]
    assert main(base + ["--fused-loss"]) == 0
    fused = json.loads(capsys.readouterr().out)["components"]["logits"]
    assert plain == SB * V * 10 and fused == 256 * V * 2 + SB * H * 2 + SB * 4


def test_measure_refuses_a_fused_loss_it_would_not_run(capsys):
    assert main(["measure", "--model", "meta-llama/Llama-3.2-1B", "--fused-loss"]) == 2
    assert "--fused-loss is for `memlint estimate`" in capsys.readouterr().err
