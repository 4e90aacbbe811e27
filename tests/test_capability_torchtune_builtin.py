"""`tune run RECIPE --config NAME` with one of torchtune's built-in configs on a machine without torchtune: the config's
text at the torchtune version the checkout pins (data/torchtune_configs.json, scripts/gen_torchtune_configs.py)."""

from checkouts import plan_of_command, write_checkout

from memlint.extract.configs.torchtune_builtin import builtin_config

_RUN = "tune run lora_finetune_single_device --config llama3_1/8B_lora_single_device batch_size=4\n"


def test_a_builtin_config_at_the_pinned_version(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"start.sh": _RUN, "requirements.txt": "torchtune==0.2.1\ntorchao==0.3.1\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "start.sh")
    assert "built-in config llama3_1/8B_lora_single_device" in plan.path
    assert (plan.get("method").value, plan.get("lora_r").value) == ("lora", 8)
    assert plan.get("grad_accum").value == 64  # torchtune 0.2.1's config; 0.5 on accumulates 8
    assert plan.get("per_device_batch").value == 4 and plan.get("per_device_batch").source == "command-line"


def test_the_newest_config_when_nothing_is_pinned(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"start.sh": _RUN})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "start.sh")
    assert plan.get("grad_accum").value == 8


def test_a_name_torchtune_never_shipped_is_not_found():
    assert builtin_config("llama9/1T_lora") is None
    assert builtin_config("llama3_1/8B_lora_single_device") is not None


def test_a_config_the_pinned_torchtune_did_not_ship_is_said(tmp_path, monkeypatch):
    """llama3_1 configs arrived after torchtune 0.1.x: a checkout pinning 0.1.1 gets no other version's text."""
    write_checkout(tmp_path, {"start.sh": _RUN, "requirements.txt": "torchtune==0.1.1\n"})
    plan = plan_of_command(tmp_path, monkeypatch, "bash", "start.sh")
    assert not plan.get("model_id").known and any("no such config" in n for n in plan.notes)


def test_a_local_version_suffix_reads_as_its_release(tmp_path, monkeypatch):
    write_checkout(tmp_path, {"start.sh": _RUN, "requirements.txt": "torchtune==0.2.1+cu121\n"})
    assert plan_of_command(tmp_path, monkeypatch, "bash", "start.sh").get("grad_accum").value == 64


def test_a_launcher_whose_script_is_missing_is_skipped_not_a_crash(tmp_path, monkeypatch):
    """Only `tune run` is looked up among the bundled configs: another launch whose file is missing is skipped."""
    from memlint.extract.shell import command_targets

    write_checkout(tmp_path, {"run.sh": "python missing.py --lr 1e-4\n" + _RUN})
    monkeypatch.chdir(tmp_path)
    targets = command_targets(["bash", "run.sh"])
    assert [t.shown for t in targets] == ["torchtune's built-in config llama3_1/8B_lora_single_device"]
