"""What the walk records for the plan (`Facts`): the objects built, and what the training step will do
as the script writes it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Facts:
    """What the analysed code does that the plan needs; filled while walking."""

    objects: list = field(default_factory=list)          # every Obj built, in order (extract/objects.py)
    trained: list = field(default_factory=list)          # Trainers whose .train() was called
    tokenizer_calls: list = field(default_factory=list)  # TokenizerCall
    liger_calls: list = field(default_factory=list)      # LigerPatch: liger_kernel's apply_liger_kernel_to_*()
    float8_calls: list = field(default_factory=list)     # Const: torchao's convert_to_float8_training(model, ...)
    float8_gather: list = field(default_factory=list)    # Const: Float8LinearConfig(enable_fsdp_float8_all_gather=...)
    unknown_steps: list = field(default_factory=list)    # lines of `.step()` on objects memlint does not know
    chunking: list = field(default_factory=list)         # Chunking: t[i : i + n] for i in range(0, _, n)
    windows: list = field(default_factory=list)          # Window: data[i : i + n] for i in <B random offsets>
    length_args: list = field(default_factory=list)      # LengthArg: args.max_seq_length read from the script's arguments
    target_length_args: list = field(default_factory=list)  # LengthArg: args.max_target_length (a seq2seq's labels)
    hand_pads: list = field(default_factory=list)        # HandPad: padding the script writes itself
    batch_yields: list = field(default_factory=list)     # BatchYield: `if len(batch) == n: yield batch` in a dataset
    generated_batches: list = field(default_factory=list)  # (TokenIds, line): the model run on generate()'s output
    loss_divisors: list = field(default_factory=list)    # Const: N of `loss / gradient_accumulation_steps`
    micro_slices: list = field(default_factory=list)     # MicroSlice: `for i in range(0, n, k)`: a backward per k rows
    array_loads: list = field(default_factory=list)      # (file name, line): np.load / torch.load of a named array file
    offloads: list = field(default_factory=list)         # Const offload kinds a wrapper's options set (FSDP CPUOffload)
    autocasts: list = field(default_factory=list)        # AutocastCall
    steps: list = field(default_factory=list)            # OptimizerStep
    backward: list = field(default_factory=list)         # lines of loss.backward()
    train_loaders: list = field(default_factory=list)    # DataLoaders a loop with a backward in its body iterates
    train_datasets: list = field(default_factory=list)   # (dataset, line): a dataset such a loop iterates itself
    handed_calls: list = field(default_factory=list)     # (start, end, target): tokenizer_calls[start:end] ran in a
                                                         # callback (a collate_fn) handed to a library call
    scalers: list = field(default_factory=list)          # GradScaler lines
    grad_hooks: list = field(default_factory=list)       # GradHook: p.register_post_accumulate_grad_hook(fn)
    lora_freezes: list = field(default_factory=list)     # lines of the checkout's only_optimize_lora_parameters(model)
    hand_quant: list = field(default_factory=list)       # HandQuant: bitsandbytes linears the script builds or hands to a helper
    joined_caps: list = field(default_factory=list)  # Const: caps of two truncated token lists joined with `+`, summed
    random_batches: list = field(default_factory=list)  # RandomBatch: torch.randint(vocab_size, (B, T)) as the input
    batch_slices: list = field(default_factory=list)  # Const rows: `rows[j * k : j * k + k]`, k named as a batch size
    iterator_batches: list = field(default_factory=list)  # (Const rows, line, how): a checkout iterable built with a batch size
    saved_models: dict = field(default_factory=dict)    # folder (str) -> (Model, line): model.save_pretrained(folder)
    gpu_counts: list = field(default_factory=list)       # Const GPU counts, or DeviceCount (every visible GPU): mp.spawn, DataParallel
    spawns: list = field(default_factory=list)           # (words, line) of each command the script runs (subprocess, os.system)
    remote_runs: list = field(default_factory=list)      # (GPU count, first object, end object) of each run of a function its decorator runs on GPUs
    default_dtypes: list = field(default_factory=list)   # DefaultDtype: torch.set_default_dtype(dt) / set_default_tensor_type
    notes: list = field(default_factory=list)
    reached: dict = field(default_factory=dict)          # list name -> its length when the script's own run ended

    def first(self, name: str, kind: Any = object) -> list:
        """The entries of list `name` the script's run reached; the ones found only by walking
        functions nothing called (another entry point, a task the configuration does not take) when
        the run reached none of `kind`."""
        entries = getattr(self, name)
        n = self.reached.get(name, len(entries))
        early = [e for e in entries[:n] if isinstance(e, kind)]
        return early if early else [e for e in entries if isinstance(e, kind)]

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)
