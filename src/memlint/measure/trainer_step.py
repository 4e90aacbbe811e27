"""Ground truth from the libraries' own trainers: one tiny model, two real training steps of
transformers' `Trainer` or a TRL trainer (`SFTTrainer`, `DPOTrainer`, `RewardTrainer`, `KTOTrainer`,
`ORPOTrainer`) at the installed versions, on real CPU tensors under memlint's live-storage tracker.

Nothing here is memlint's idea of the step: the trainer builds the optimizer (`Trainer.create_optimizer`,
with its bitsandbytes overrides), its collator builds the batch, `training_step` runs its own loss code;
this module only cuts the step into phases (forward = up to `accelerator.backward`, backward, optimizer =
clip + step + zero_grad as the Trainer's loop runs them) and counts live tensor bytes.

Where the CPU runs a different kernel than CUDA, the CUDA one is stood in (`cuda_kernels=True`): CUDA
autocast's op lists, its SDPA kernels and its fused dropout as every memlint trace runs them
(measure/cuda_emulation.py), and TRL's own: its fused LM head (trl/kernels/chunked_logprob.py) folds each
logits tile with a Triton kernel that writes in place on CUDA and scores only the valid positions, while its
CPU fallback folds the tile with several fp32 tile-sized temporaries and scores every position; `_addmm_fp32`
accumulates bf16 products into fp32 with `torch.addmm(out_dtype=float32)` on CUDA, with fp32 copies of both
inputs on CPU. The stand-ins keep every allocation the CUDA path makes (the tiles, the hidden-state and weight
chunks, the fp32 accumulators) and drop the CPU-only ones; they compute nothing (memory, not values, is
measured).

    python -m memlint.measure.trainer_step --trainer sft --precision amp-bf16 --batch 2 --seq 256
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import tempfile
import types
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# a tiny Llama whose vocabulary makes the logits matter, as benchmarks/trl_dpo_step.py
LLAMA = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096, tie_word_embeddings=False)
TRAINERS = ("trainer", "sft", "dpo", "reward", "kto", "orpo")
PHASES = ("forward", "backward", "optimizer")


def tokenizer(vocab: int) -> Any:
    """A word-level tokenizer over w0 .. w{vocab-4} plus <unk>, <s>, </s> (no network, no files)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = {f"w{i}": i for i in range(vocab - 3)}
    words.update({"<unk>": vocab - 3, "<s>": vocab - 2, "</s>": vocab - 1})
    tok = Tokenizer(models.WordLevel(words, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="</s>")


@contextlib.contextmanager
def cuda_trl_kernels(compact: bool = True):
    """TRL's chunked log-prob kernel as CUDA runs it (module docstring); a no-op without that module. `compact`:
    score only the valid positions, as on CUDA (False on fake tensors, whose boolean-mask indexing has no shape)."""
    try:
        from trl.kernels import chunked_logprob as cl
        import trl.trainer.utils as tu
    except ImportError:
        yield
        return

    class _Launch:  # kernel[(grid)](tile, ...): in place, no allocation
        def __getitem__(self, grid: Any) -> Any:
            return lambda *args, **kwargs: None

    def addmm_fp32(acc: Any, a: Any, b: Any) -> None:
        if a.dtype == acc.dtype and b.dtype == acc.dtype:
            acc.addmm_(a, b)  # fp32 inputs: the same in-place addmm on both devices
        # half inputs: CUDA's torch.addmm(acc, a, b, out_dtype=float32, out=acc) writes in place

    saved = {m: {k: getattr(m, k, None) for k in names} for m, names in (
        (cl, ("_use_triton", "_forward_kernel", "_backward_kernel", "triton", "_addmm_fp32")),
        (tu, ("_use_triton",)))}
    cl._use_triton = lambda device: True
    tu._use_triton = lambda device: compact
    cl._forward_kernel = cl._backward_kernel = _Launch()
    cl.triton = types.SimpleNamespace(cdiv=lambda a, b: -(-a // b))
    cl._addmm_fp32 = addmm_fp32
    try:
        yield
    finally:
        for m, values in saved.items():
            for k, v in values.items():
                if v is None and hasattr(m, k) and k == "triton":
                    delattr(m, k)
                elif v is not None:
                    setattr(m, k, v)


def _text(rng: random.Random, vocab: int, n: int) -> str:
    return " ".join(f"w{rng.randrange(vocab - 3)}" for _ in range(n))


def _rows(trainer: str, batch: int, seq: int, vocab: int, rng: random.Random) -> list[dict]:
    """Samples whose tokenized length is `seq` (the worst case: every row at max_length, every label trained: a
    one-word prompt, the rest completion)."""
    half = 1
    n = 3 * max(batch, 2)  # enough rows for the steps
    if trainer in ("trainer", "sft"):
        return [{"text": _text(rng, vocab, seq)} for _ in range(n)]
    if trainer == "reward":
        return [{"chosen": _text(rng, vocab, seq - 1), "rejected": _text(rng, vocab, seq - 1)} for _ in range(n)]
    if trainer == "kto":
        return [{"prompt": _text(rng, vocab, half), "completion": _text(rng, vocab, seq - half - 1),
                 "label": i % 2 == 0} for i in range(max(n, 4))]
    return [{"prompt": _text(rng, vocab, half), "chosen": _text(rng, vocab, seq - half - 1),
             "rejected": _text(rng, vocab, seq - half - 1)} for _ in range(n)]


def _config_class(trainer: str) -> tuple[Any, Any]:
    if trainer == "trainer":
        from transformers import Trainer, TrainingArguments

        return TrainingArguments, Trainer
    if trainer == "sft":
        from trl import SFTConfig, SFTTrainer

        return SFTConfig, SFTTrainer
    if trainer == "dpo":
        from trl import DPOConfig, DPOTrainer

        return DPOConfig, DPOTrainer
    if trainer == "reward":
        from trl import RewardConfig, RewardTrainer

        return RewardConfig, RewardTrainer
    if trainer == "kto":
        try:
            from trl import KTOConfig, KTOTrainer
        except ImportError:
            from trl.experimental.kto import KTOConfig, KTOTrainer
        return KTOConfig, KTOTrainer
    try:
        from trl import ORPOConfig, ORPOTrainer
    except ImportError:
        from trl.experimental.orpo import ORPOConfig, ORPOTrainer
    return ORPOConfig, ORPOTrainer


def _args(trainer: str, cls: Any, out: str, batch: int, seq: int, precision: str, optim: str, recompute: bool,
          extra: dict) -> Any:
    import inspect

    kw = dict(output_dir=out, per_device_train_batch_size=batch, bf16=precision in ("amp-bf16", "pure-bf16"),
              fp16=False, use_cpu=True, report_to=[], logging_steps=1,
              dataloader_num_workers=0, optim=optim, max_grad_norm=1.0, save_strategy="no",
              remove_unused_columns=trainer != "trainer")
    names = inspect.signature(cls).parameters
    if "max_length" in names:
        kw["max_length"] = seq
    if trainer == "sft":
        kw["dataset_text_field"] = "text"
    # TRL's configs default to checkpointing (trl/trainer/base_config.py): say it either way
    kw["activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"] = recompute
    kw.update(extra)
    return cls(**{k: v for k, v in kw.items() if k in names or k in extra})


def _batch_for_plain_trainer(tok: Any, rows: list[dict], seq: int):
    from datasets import Dataset

    def enc(r):
        ids = tok(r["text"], truncation=True, max_length=seq)["input_ids"]
        return {"input_ids": ids, "labels": list(ids)}

    return Dataset.from_list(rows).map(enc, remove_columns=["text"])


def _train_setup(tr: Any, args: Any) -> None:
    """What Trainer.train() does to the model before its loop (transformers 5.x trainer.py, `train`): activation
    checkpointing with the arguments' kwargs."""
    on = getattr(args, "activation_checkpointing", None) or getattr(args, "gradient_checkpointing", False)
    if not on:
        return
    kw = dict(getattr(args, "activation_checkpointing_kwargs", None) or getattr(args, "gradient_checkpointing_kwargs",
                                                                                 None) or {})
    every, offload = kw.pop("every_n_layers", 1), kw.pop("offload", False)
    if hasattr(tr.model, "activation_checkpointing_enable"):
        tr.model.activation_checkpointing_enable(activation_checkpointing_kwargs=kw or None, every_n_layers=every,
                                                 offload=offload)
    else:
        tr.model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kw or None)


def _model(trainer: str, cfg_d: dict, model_type: str, dtype: Any, tok: Any, ckpt: str) -> Any:
    """The tiny model from its config, saved and loaded back as a checkpoint (TRL 1.x reloads a reference from it)."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification

    cfg = AutoConfig.for_model(model_type, **cfg_d)
    head_cls = AutoModelForSequenceClassification if trainer == "reward" else AutoModelForCausalLM
    if trainer == "reward":
        cfg.num_labels = 1
        cfg.pad_token_id = tok.pad_token_id
    head_cls.from_config(cfg, dtype=torch.float32).save_pretrained(ckpt)
    return head_cls.from_pretrained(ckpt, dtype=dtype, attn_implementation="sdpa")


def _trainer(trainer: str, model: Any, args: Any, tok: Any, rows: list[dict], seq: int, peft_config: Any) -> Any:
    from datasets import Dataset

    kw: dict[str, Any] = dict(args=args, processing_class=tok)
    if trainer == "trainer":
        from transformers import DataCollatorForLanguageModeling

        if peft_config is not None:
            from peft import get_peft_model

            model = get_peft_model(model, peft_config)
        kw.update(train_dataset=_batch_for_plain_trainer(tok, rows, seq),
                  data_collator=DataCollatorForLanguageModeling(tok, mlm=False))
    else:
        kw.update(train_dataset=Dataset.from_list(rows), peft_config=peft_config)
    return _config_class(trainer)[1](model, **kw)


def _optimizer(tr: Any, cuda_kernels: bool) -> Any:
    """The trainer's own optimizer (create_optimizer), with CUDA's foreach default where torch leaves it None."""
    tr.create_optimizer()
    opt = tr.optimizer
    if cuda_kernels:  # torch's foreach default is CUDA's: None reads as True for CUDA tensors, False on CPU
        for group in getattr(opt, "param_groups", ()):
            if group.get("foreach", False) is None and not group.get("fused"):
                group["foreach"] = True
    return opt


def _run_steps(tr: Any, policy: Any, ref: Any, opt: Any, batches: list, max_grad_norm: float, cuda_kernels: bool,
               result: dict) -> None:
    """Each step's phases as the Trainer's loop runs them: training_step (forward up to accelerator.backward, then
    backward), clip, step, zero_grad; into `result` (step1, step2, weights, optimizer_state, events)."""
    import torch

    from memlint.measure.optim import paged_state_tensors, state_tensors
    from memlint.measure.tracker import LiveBytes

    params = [p for p in policy.parameters() if p.requires_grad]
    tracker = LiveBytes()
    phases: dict[str, int] = {}
    backward = tr.accelerator.backward
    step = 0

    def traced_backward(loss: Any, **kwargs: Any) -> Any:
        phases["forward"] = tracker.max_memory_allocated()
        tracker.begin_phase((step, "backward"))
        tracker.reset_peak_memory_stats()
        return backward(loss, **kwargs)

    tr.accelerator.backward = traced_backward
    try:
        with tracker:
            tensors = list(policy.parameters()) + list(policy.buffers())
            if ref is not None:
                tensors += list(ref.parameters()) + list(ref.buffers())
            tracker.track_all(tensors)
            result["weights"] = tracker.memory_allocated()
            for step, batch in enumerate(batches, 1):
                phases.clear()
                tracker.begin_phase((step, "forward"))
                tracker.reset_peak_memory_stats()
                tr.current_gradient_accumulation_steps = 1  # set by train()'s loop
                tr.training_step(policy, batch)
                phases["backward"] = tracker.max_memory_allocated()
                tracker.begin_phase((step, "optimizer"))
                tracker.reset_peak_memory_stats()
                # accelerate's clip_grad_norm_ is torch's (foreach=None: CUDA's default foreach kernels)
                torch.nn.utils.clip_grad_norm_(params, max_grad_norm, foreach=True if cuda_kernels else None)
                opt.step()
                for t in paged_state_tensors(opt):  # CUDA unified memory: outside the allocator's counters
                    tracker.exclude(t)
                opt.zero_grad(set_to_none=True)
                phases["optimizer"] = tracker.max_memory_allocated()
                result[f"step{step}"] = dict(phases)
            paged = {id(t) for t in paged_state_tensors(opt)}
            result["optimizer_state"] = tracker.storage_bytes(t for t in state_tensors(opt) if id(t) not in paged)
            result["events"] = tracker.events
    finally:
        tr.accelerator.backward = backward


def trainer_step(trainer: str = "sft", *, method: str = "full", precision: str = "fp32", batch: int = 2,
                 seq: int = 256, optim: str = "adamw_torch", recompute: bool = False, lora_r: int = 16,
                 weights: str = "fp32",
                 config: dict | None = None, model_type: str = "llama", extra_args: dict | None = None,
                 cuda_kernels: bool = True, steps: int = 2, seed: int = 0) -> dict:
    """Two training steps of `trainer` (TRAINERS) on a tiny `model_type` built from `config`; the last step's
    peak of live tensor bytes per phase, the weights before it, the optimizer state, the batch shape and the
    allocation sequence (for memlint.measure.allocator.replay)."""
    import torch
    import transformers  # noqa: F401 - imported before tracking (module-level tensors)

    if trainer not in TRAINERS:
        raise ValueError(f"trainer: one of {', '.join(TRAINERS)}")
    import peft  # noqa: F401

    cfg_d = dict(LLAMA if config is None else config)
    torch.manual_seed(seed)
    rng = random.Random(seed)
    tok = tokenizer(cfg_d["vocab_size"])
    dtype = torch.bfloat16 if precision == "pure-bf16" or weights == "bf16" else \
        torch.float16 if precision == "pure-fp16" else torch.float32
    result: dict[str, Any] = {}
    from memlint.measure.cuda_emulation import cuda_kernels as cuda_step_kernels

    with tempfile.TemporaryDirectory() as ckpt, tempfile.TemporaryDirectory() as out, \
            (cuda_trl_kernels() if cuda_kernels else contextlib.nullcontext()), \
            (cuda_step_kernels(fake=False) if cuda_kernels else contextlib.nullcontext()):
        model = _model(trainer, cfg_d, model_type, dtype, tok, ckpt)
        if precision in ("pure-bf16", "pure-fp16"):
            extra_args = {**(extra_args or {}), "bf16": False, "fp16": False}  # half weights, no autocast
        peft_config = None
        if method != "full":
            from peft import LoraConfig

            peft_config = LoraConfig(r=lora_r, lora_alpha=2 * lora_r, target_modules="all-linear", lora_dropout=0.0,
                                     task_type="SEQ_CLS" if trainer == "reward" else "CAUSAL_LM")
        args = _args(trainer, _config_class(trainer)[0], out, batch, seq, precision, optim, recompute,
                     dict(extra_args or {}))
        tr = _trainer(trainer, model, args, tok, _rows(trainer, batch, seq, cfg_d["vocab_size"], rng), seq, peft_config)
        loader = iter(tr.get_train_dataloader())
        _train_setup(tr, args)
        # what Trainer's loop runs: the model prepared by accelerate (under mixed precision its forward runs in
        # autocast and its half outputs come back as fp32: ConvertOutputsToFp32)
        policy = tr.accelerator.prepare_model(tr.model)
        opt = _optimizer(tr, cuda_kernels)
        batches = [next(loader) for _ in range(steps)]
        result["shape"] = list(batches[0]["input_ids"].shape) if "input_ids" in batches[0] else None
        try:
            _run_steps(tr, policy, getattr(tr, "ref_model", None), opt, batches, args.max_grad_norm, cuda_kernels,
                       result)
        finally:
            from memlint.measure.optim import reset_bnb_overrides

            reset_bnb_overrides()
    last = result[f"step{steps}"]
    result["phase"] = max(PHASES, key=lambda k: last[k])
    result["peak"] = last[result["phase"]]
    import trl

    result["versions"] = {"trl": trl.__version__, "transformers": transformers.__version__, "torch": torch.__version__}
    return result


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trainer", choices=TRAINERS, default="sft")
    ap.add_argument("--method", choices=("full", "lora"), default="full")
    ap.add_argument("--precision", choices=("fp32", "amp-bf16", "pure-bf16", "pure-fp16"), default="fp32")
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--optim", default="adamw_torch")
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--dtype", choices=("fp32", "bf16"), default="fp32", help="the weights' dtype (amp-bf16)")
    ap.add_argument("--cpu-kernels", action="store_true", help="run TRL's CPU fallback kernels as they are")
    a = ap.parse_args(argv)
    r = trainer_step(a.trainer, method=a.method, precision=a.precision, batch=a.batch, seq=a.seq, optim=a.optim,
                     recompute=a.recompute, weights=a.dtype, cuda_kernels=not a.cpu_kernels)
    r.pop("events")
    print(json.dumps(r))


if __name__ == "__main__":
    main()
