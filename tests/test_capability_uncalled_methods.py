"""A script whose training lives in a method of its own wrapper class that nothing calls (`trainer.train()` left
commented out, or called from a notebook): as with a function nothing calls, the method still says how the script
trains, and runs once on the object the script built. Only when the run trained nothing; synthetic checkouts."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_WRAPPER = """
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments


    class FineTuner:
        def __init__(self, model_name, output_dir, batch_size=2):
            self.model = AutoModelForCausalLM.from_pretrained(model_name)
            self.output_dir = output_dir
            self.batch_size = batch_size

        def train(self):
            args = TrainingArguments(output_dir=self.output_dir, per_device_train_batch_size=self.batch_size,
                                     gradient_accumulation_steps=4, bf16=True)
            Trainer(model=self.model, args=args, train_dataset=None).train()

        def _private_eval(self):
            args = TrainingArguments(output_dir="eval", per_device_train_batch_size=64)
            Trainer(model=self.model, args=args).train()
"""

_MAIN = """
    from wrapper import FineTuner


    def main():
        tuner = FineTuner("Qwen/Qwen2.5-0.5B", "out", batch_size=3)
        {CALL}


    if __name__ == "__main__":
        main()
"""


def test_an_uncalled_method_of_the_runs_object_says_how_it_trains(tmp_path, monkeypatch):
    root = _write(tmp_path, {"wrapper.py": _WRAPPER, "main.py": _MAIN.replace("{CALL}", "# tuner.train()")})
    plan = _command(root, monkeypatch, "python", "main.py")
    assert _get(plan, "trainer", "model_id", "per_device_batch", "grad_accum", "precision") == {
        "trainer": "Trainer", "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3, "grad_accum": 4,
        "precision": "amp-bf16"}


def test_a_run_that_trains_walks_no_other_method(tmp_path, monkeypatch):
    """The called train() decides; the private method (batch 64) never runs, called or not."""
    root = _write(tmp_path, {"wrapper.py": _WRAPPER, "main.py": _MAIN.replace("{CALL}", "tuner.train()")})
    assert _command(root, monkeypatch, "python", "main.py").fields["per_device_batch"].value == 3
    root2 = _write(tmp_path / "b", {"wrapper.py": _WRAPPER.replace("    def train(self):", "    def _train(self):"),
                                    "main.py": _MAIN.replace("{CALL}", "pass")})
    assert _command(root2, monkeypatch, "python", "main.py").fields["trainer"].value is None


def test_a_method_the_script_never_calls_nor_comments_out_is_not_walked(tmp_path, monkeypatch):
    """An inference script whose class also has a finetune() it never calls: nothing trains."""
    script = """
        from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

        class Assistant:
            def __init__(self):
                self.model = AutoModelForCausalLM.from_pretrained("Qwen/Qwen2.5-7B-Instruct")

            def chat(self, text):
                return self.model.generate(text)

            def finetune(self, ds):
                Trainer(model=self.model, args=TrainingArguments("o", per_device_train_batch_size=4),
                        train_dataset=ds).train()

        bot = Assistant()
        bot.chat("hello")  # the finetune() above is for another day
    """
    root = _write(tmp_path, {"infer.py": script})
    assert _command(root, monkeypatch, "python", "infer.py").fields["trainer"].value is None
