"""A hand-written loop whose forward and backward live in a helper it calls (a GRPO or RL loop's
`micro_step(...)`): `for i in range(0, n, micro_batch_size)` still cuts micro-batches of that many rows, and
where the loop's own count cannot be read (rows of a shuffled slice), the loss the helper divides by the
accumulation the author named (`loss / gradient_accumulation_steps`) says how many backward passes one optimizer
step takes. Synthetic scripts written from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_LOOP = """
    import argparse
    import torch
    from transformers import AutoModelForCausalLM

    p = argparse.ArgumentParser()
    p.add_argument("--train-batch-size", type=int, default=64)
    p.add_argument("--gradient-accumulation-steps", type=int, default=16)
    args = p.parse_args()


    def micro_step(model, ids, gradient_accumulation_steps):
        logits = model(ids).logits
        loss = logits.float().logsumexp(-1).mean()
        scaled = loss {DIVIDE}
        scaled.backward()
        return loss.detach()


    def train(args):
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B", torch_dtype=torch.bfloat16)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
        micro_train_batch_size = args.train_batch_size // args.gradient_accumulation_steps
        input_ids = torch.randint(0, 1000, (256, 512))
        for start in range(0, 256, args.train_batch_size):
            perm = torch.randperm(256)[start:start + args.train_batch_size]
            optimizer.zero_grad()
            for mb_start in range(0, len(perm), micro_train_batch_size):
                mb = perm[mb_start:mb_start + micro_train_batch_size]
                micro_step(model, input_ids[mb], {ACCUM})
            optimizer.step()


    train(args)
"""


def _plan(tmp_path, monkeypatch, divide="/ gradient_accumulation_steps", accum="args.gradient_accumulation_steps",
          *words):
    _write(tmp_path, {"grpo.py": _LOOP.replace("{DIVIDE}", divide).replace("{ACCUM}", accum)})
    return _command(tmp_path, monkeypatch, "python", "grpo.py", *words)


def test_micro_batches_cut_in_a_loop_whose_backward_is_in_a_helper(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch)
    assert _get(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 4, "grad_accum": 16}
    assert "loss is divided by gradient_accumulation_steps = 16" in " ".join(plan.fields["grad_accum"].chain)


def test_the_command_line_sets_the_micro_batch_and_the_divisor(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "/ gradient_accumulation_steps", "args.gradient_accumulation_steps",
                 "--train-batch-size", "32", "--gradient-accumulation-steps", "8")
    assert _get(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 4, "grad_accum": 8}


def test_a_loss_divided_by_another_name_says_nothing_of_accumulation(tmp_path, monkeypatch):
    plan = _plan(tmp_path, monkeypatch, "/ 2", "2")
    assert _get(plan, "per_device_batch", "grad_accum") == {"per_device_batch": 4, "grad_accum": None}


def test_a_divisor_outside_the_accumulating_loop_is_not_its_count(tmp_path, monkeypatch):
    """A division by the accumulation name before the loop (a learning-rate or log scale) is no loop's count."""
    text = _LOOP.replace("{DIVIDE}", "/ 2").replace("{ACCUM}", "2").replace(
        "        micro_train_batch_size = ", "        warm = 100 / args.gradient_accumulation_steps\n"
                                           "        micro_train_batch_size = ")
    _write(tmp_path, {"grpo.py": text})
    plan = _command(tmp_path, monkeypatch, "python", "grpo.py")
    assert plan.fields["grad_accum"].value is None


_RL_LOOP = """
    import torch
    from torch.utils.data import DataLoader
    from transformers import AutoModelForCausalLM, AutoTokenizer

    G, P, C = 4, 256, 256
    tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B-Instruct")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    for batch in DataLoader(["q1", "q2"], batch_size=1):
        enc = tok({PROMPTS}, padding="max_length", max_length=P, truncation=True, return_tensors="pt")
        seqs = model.generate(**enc, max_new_tokens=C{TIMES})
        {FORWARD}
        opt.step()
        opt.zero_grad()
"""


def test_a_hand_written_rl_loop_trains_on_the_generated_sequences(tmp_path, monkeypatch):
    """`tok([prompt] * G, max_length=P)` then `model.generate(**enc, max_new_tokens=C)` and a forward on the output:
    G rows of P + C tokens (num_return_sequences=G on one prompt: the same)."""
    cases = {
        "repeat": ("[batch[0]] * G", "", "model(seqs).logits.mean().backward()"),
        "returns": ("[batch[0]]", ", num_return_sequences=G", "model(input_ids=seqs).logits.mean().backward()"),
    }
    for name, (prompts, times, forward) in cases.items():
        text = _RL_LOOP.replace("{PROMPTS}", prompts).replace("{TIMES}", times).replace("{FORWARD}", forward)
        root = _write(tmp_path / name, {"rl.py": text})
        plan = _command(root, monkeypatch, "python", "rl.py")
        assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 4, "max_length": 512}, name


def test_generation_nothing_trains_on_leaves_the_batch_and_length_to_the_data(tmp_path, monkeypatch):
    """A sample generated for a look (no forward on it) says nothing of the training batch."""
    text = _RL_LOOP.replace("{PROMPTS}", "batch").replace("{TIMES}", "").replace(
        "{FORWARD}", "print(tok.decode(seqs[0]))\n        model(**enc).logits.mean().backward()").replace(
        "batch_size=1", "batch_size=2")
    root = _write(tmp_path, {"rl.py": text})
    plan = _command(root, monkeypatch, "python", "rl.py")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 2, "max_length": 256}


def test_a_generated_sample_checked_before_a_trainer_run_leaves_the_trainers_batch_and_length(tmp_path, monkeypatch):
    """A sanity check that generates and runs the model on the sample (no backward through it) before a Trainer
    run: the Trainer's data decides the batch and the length."""
    script = """
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments
        tok = AutoTokenizer.from_pretrained("Qwen/Qwen2.5-0.5B")
        model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-0.5B")
        enc = tok(["Hello"], truncation=True, max_length=16, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=16)
            model(out, labels=out)
        ds = load_dataset("x").map(lambda r: tok(r["text"], truncation=True, max_length=2048))
        Trainer(model=model, args=TrainingArguments("o", per_device_train_batch_size=8), train_dataset=ds).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 8, "max_length": 2048}


def test_token_ids_moved_to_the_device_are_the_same_ids(tmp_path, monkeypatch):
    text = _RL_LOOP.replace("{PROMPTS}", "[batch[0]] * G").replace("{TIMES}", "").replace(
        "{FORWARD}", "model(seqs).logits.mean().backward()").replace(
        'return_tensors="pt")', 'return_tensors="pt").to("cuda")')
    root = _write(tmp_path, {"rl.py": text})
    plan = _command(root, monkeypatch, "python", "rl.py")
    assert _get(plan, "per_device_batch", "max_length") == {"per_device_batch": 4, "max_length": 512}

