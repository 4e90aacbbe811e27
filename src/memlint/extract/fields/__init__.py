"""The plan's fields by group, as `Builder` (extract/build.py) reads them from what the interpreter saw:
one mixin per group, composed there.

  model.py        the model that trains: id, dtype, attention, head, labels
  quant.py        its quantization: bitsandbytes, GPTQ / AWQ / HQQ, unsloth, hand-made linears
  adapters.py     method, the LoRA fields, DoRA, the adapters' dtype
  trainer.py      a Hugging Face / TRL trainer and its arguments, the reference model
  length.py       batch and length idioms: padding, packing, chunking, max_length, a loader's batch
  precision.py    bf16 / fp16, autocast, GradScaler, float8
  activations.py  gradient checkpointing, offloaded activations, a fused loss
  optimizer.py    the optimizer: a loop's, GaLore, DeepSpeed's, stepped in backward
  parallel.py     DeepSpeed configs, FSDP, tensor and context parallelism, the GPUs a process spreads over
  loops.py        loops the script drives: plain PyTorch, Lightning, a DeepSpeed engine
  convert.py      abstract values into plan values (`_Unconvertible` says why not)
"""
