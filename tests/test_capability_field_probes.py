"""A script that probes which fields its installed TRL or transformers has, to pass only the keywords that version
takes: `{f.name for f in dataclasses.fields(GRPOConfig)}` as a filter of its keyword dict, `'max_seq_length' in
inspect.signature(SFTConfig.__init__).parameters` choosing the keyword's name. The fields memlint reads are decided at
the version the checkout pins (trl renamed SFTConfig.max_seq_length max_length in 0.16 and removed the old name in
0.20: trl PR #2895); a name memlint's tables do not list stays unknown in a test, and a filter that drops it changes
nothing memlint reads. Synthetic checkouts written from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_FILTER = """
    from dataclasses import fields
    from trl import GRPOConfig, GRPOTrainer

    def main():
        config_kwargs = dict(output_dir="o", per_device_train_batch_size=4, gradient_accumulation_steps=8,
                             max_completion_length=256, max_prompt_length=128, num_generations=4,
                             vllm_mode="colocate", some_new_field=True, bf16=True)
        supported = {f.name for f in fields(GRPOConfig)}
        dropped = sorted(set(config_kwargs) - supported)
        if dropped:
            print("dropping", dropped)
        config_kwargs = {k: v for k, v in config_kwargs.items() if k in supported}
        args = GRPOConfig(**config_kwargs)
        GRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[], args=args, train_dataset=None).train()

    if __name__ == "__main__":
        main()
"""


def test_a_keyword_dict_filtered_by_the_config_classs_fields_keeps_the_fields_memlint_reads(tmp_path, monkeypatch):
    root = _write(tmp_path, {"train.py": _FILTER, "requirements.txt": "trl==0.16.1\ntransformers==4.51.3\n"})
    plan = _command(root, monkeypatch, "python", "train.py")
    got = {k: plan.value(k) for k in ("per_device_batch", "grad_accum", "precision")}
    assert got == {"per_device_batch": 4, "grad_accum": 8, "precision": "amp-bf16"}


_PROBE = """
    import inspect
    from trl import SFTConfig, SFTTrainer

    kw = dict(output_dir="o", per_device_train_batch_size=2)
    params = set(inspect.signature(SFTConfig.__init__).parameters.keys()) - {"self"}
    if "max_seq_length" in params:
        kw["max_seq_length"] = 512
    else:
        kw["max_length"] = 2048
    SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig(**kw), train_dataset=None).train()
"""


def test_a_probe_of_the_config_classs_signature_is_decided_at_the_pinned_version(tmp_path, monkeypatch):
    old = _command(_write(tmp_path / "old", {"train.py": _PROBE, "requirements.txt": "trl==0.15.2\n"}),
                   monkeypatch, "python", "train.py")
    new = _command(_write(tmp_path / "new", {"train.py": _PROBE, "requirements.txt": "trl==0.21.0\n"}),
                   monkeypatch, "python", "train.py")
    assert (old.value("max_length"), new.value("max_length")) == (512, 2048)
    assert old.value("per_device_batch") == 2


def test_a_probe_of_a_field_memlint_does_not_list_keeps_both_branches(tmp_path, monkeypatch):
    script = """
        import inspect
        from trl import SFTConfig, SFTTrainer

        kw = dict(output_dir="o")
        if "some_future_field" in inspect.signature(SFTConfig).parameters:
            kw["per_device_train_batch_size"] = 8
        else:
            kw["per_device_train_batch_size"] = 2
        SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig(**kw), train_dataset=None).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script, "requirements.txt": "trl==0.21.0\n"}), monkeypatch,
                    "python", "train.py")
    assert set(plan.fields["per_device_batch"].candidates) == {2, 8}


def test_a_key_the_tables_do_not_list_is_kept_by_the_filter(tmp_path, monkeypatch):
    # model_init_kwargs is a field memlint reads that its field tables do not list: `k in names` keeps it (the key was
    # written for the class); `k not in names` stays undecided, as any filter memlint cannot decide
    script = """
        from dataclasses import fields
        from trl import SFTConfig, SFTTrainer
        kw = dict(output_dir="o", per_device_train_batch_size=2, bf16=True,
                  model_init_kwargs={"torch_dtype": "bfloat16"})
        names = {f.name for f in fields(SFTConfig)}
        kw = {k: v for k, v in kw.items() if k in names}
        SFTTrainer(model="Qwen/Qwen2.5-0.5B", args=SFTConfig(**kw), train_dataset=None).train()
    """
    plan = _command(_write(tmp_path, {"train.py": script, "requirements.txt": "trl==0.19.0\n"}), monkeypatch,
                    "python", "train.py")
    assert (plan.value("torch_dtype"), plan.value("per_device_batch")) == ("bf16", 2)
