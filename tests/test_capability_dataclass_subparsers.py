"""TRL's / transformers' dataclass parsers as argparse subcommands and with arguments of their own:
`add_subparsers(parser_class=TrlParser)` makes each `add_parser("train", dataclass_types=[...])` a TrlParser, whose
`set_defaults(handler=train, parser=p)` the main parse returns; the subcommand's `parse_args_and_config()` reads the
dataclasses' flags from the command and appends a namespace of the arguments added with add_argument, as
HfArgumentParser does. Synthetic checkouts written from the pattern."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_MAIN = """
    import argparse
    from trl import GRPOConfig, GRPOTrainer, ModelConfig, ScriptArguments, TrlParser


    def train(script_args, grpo_cfg, model_cfg, custom):
        reward = [len] if custom.method == "rlvr" else [abs]
        GRPOTrainer(model=model_cfg.model_name_or_path, args=grpo_cfg, reward_funcs=reward,
                    train_dataset=None).train()


    def evaluate(ns):
        print(ns.eval_dataset)


    def build_parser():
        parser = argparse.ArgumentParser()
        subparsers = parser.add_subparsers(dest="command", required=True, parser_class=TrlParser)
        p_train = subparsers.add_parser("train", dataclass_types=[ScriptArguments, GRPOConfig, ModelConfig])
        p_train.add_argument("--method", default="rlvr")
        p_train.set_defaults(handler=train, parser=p_train)
        p_eval = subparsers.add_parser("eval")
        p_eval.add_argument("--eval_dataset", default="")
        p_eval.set_defaults(handler=evaluate, parser=p_eval)
        return parser


    def main():
        ns, _ = build_parser().parse_known_args()
        parsed = ns.parser.parse_args_and_config(return_remaining_strings=True)
        ns.handler(*list(parsed[:-1]))


    if __name__ == "__main__":
        main()
"""


def test_a_trl_parser_subcommand_reads_its_dataclasses_from_the_command(tmp_path, monkeypatch):
    root = _write(tmp_path, {"main.py": _MAIN})
    plan = _command(root, monkeypatch, "accelerate", "launch", "main.py", "train", "--model_name_or_path",
                    "Qwen/Qwen3-8B", "--per_device_train_batch_size", "2", "--gradient_accumulation_steps", "4",
                    "--max_prompt_length", "256", "--max_completion_length", "768", "--method", "rlvr")
    assert _get(plan, "trainer", "model_id", "per_device_batch", "grad_accum", "max_length") == {
        "trainer": "GRPOTrainer", "model_id": "Qwen/Qwen3-8B", "per_device_batch": 2, "grad_accum": 4,
        "max_length": 1024}
    assert plan.fields["per_device_batch"].source == "command-line"


def test_an_hf_parsers_own_argument_comes_back_in_one_more_namespace(tmp_path, monkeypatch):
    script = """
        from dataclasses import dataclass, field
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

        @dataclass
        class ModelArguments:
            model_name: str = field(default="gpt2")

        parser = HfArgumentParser((ModelArguments, TrainingArguments))
        parser.add_argument("--max_len", type=int, default=256)
        model_args, training_args, extra = parser.parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained(model_args.model_name)
        ids = tokenizer("x", truncation=True, max_length=extra.max_len, padding="max_length")
        Trainer(model=model, args=training_args).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py", "--output_dir", "o", "--model_name", "Qwen/Qwen2.5-0.5B",
                    "--max_len", "1024", "--per_device_train_batch_size", "3")
    assert _get(plan, "model_id", "per_device_batch", "max_length") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 3, "max_length": 1024}


def test_set_defaults_of_a_dataclass_field_is_that_fields_default_under_the_command(tmp_path, monkeypatch):
    """HfArgumentParser.set_defaults(per_device_train_batch_size=6): argparse's default of that dataclass option
    (no extra namespace: the script unpacks two), which the command's word still overrides."""
    script = """
        from dataclasses import dataclass, field
        from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments

        @dataclass
        class ModelArguments:
            model_name: str = field(default="Qwen/Qwen2.5-0.5B")

        parser = HfArgumentParser((ModelArguments, TrainingArguments))
        parser.set_defaults(per_device_train_batch_size=6, output_dir="o")
        model_args, training_args = parser.parse_args_into_dataclasses()
        model = AutoModelForCausalLM.from_pretrained(model_args.model_name)
        Trainer(model=model, args=training_args).train()
    """
    root = _write(tmp_path, {"train.py": script})
    plan = _command(root, monkeypatch, "python", "train.py")
    assert _get(plan, "model_id", "per_device_batch") == {"model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 6}
    plan = _command(root, monkeypatch, "python", "train.py", "--per_device_train_batch_size", "3")
    assert plan.fields["per_device_batch"].value == 3


_H4 = """
    import os, sys
    from transformers import HfArgumentParser

    class H4ArgumentParser(HfArgumentParser):
        def parse(self):
            if len(sys.argv) == 2 and sys.argv[1].endswith(".yaml"):
                output = self.parse_yaml_file(os.path.abspath(sys.argv[1]))
            elif len(sys.argv) > 2 and sys.argv[1].endswith(".yaml"):
                output = self.parse_yaml_and_args(os.path.abspath(sys.argv[1]), sys.argv[2:])
            else:
                output = self.parse_args_into_dataclasses()
            if len(output) == 1:
                output = output[0]
            return output
"""

_RW = """
    from dataclasses import dataclass, field
    from transformers import AutoModelForCausalLM, Trainer, TrainingArguments
    from arguments import H4ArgumentParser

    @dataclass
    class ModelArguments:
        model_name_or_path: str = field(default=None)

    parser = H4ArgumentParser((ModelArguments, TrainingArguments))
    model_args, training_args = parser.parse()
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
    Trainer(model=model, args=training_args).train()
"""


def test_a_parser_subclass_of_the_checkout_runs_its_own_parse_over_the_yaml_and_the_flags(tmp_path, monkeypatch):
    """alignment-handbook's H4ArgumentParser copied into a repository: `train.py recipe.yaml --key=value` reads the
    YAML its parse() names (sys.argv[1]) and the flags over it; the run is the script's, not the YAML read alone."""
    root = _write(tmp_path, {"arguments.py": _H4, "train.py": _RW, "recipe.yaml":
                             "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 4\n"
                             "gradient_accumulation_steps: 4\noutput_dir: o\n"})
    plan = _command(root, monkeypatch, "accelerate", "launch", "train.py", "recipe.yaml",
                    "--model_name_or_path=Qwen/Qwen2.5-1.5B", "--gradient_accumulation_steps=8")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum") == {
        "model_id": "Qwen/Qwen2.5-1.5B", "per_device_batch": 4, "grad_accum": 8}


def test_a_parser_of_the_checkouts_own_installed_package_runs_its_parse(tmp_path, monkeypatch):
    """The same parser in a package of the checkout installed from src/ (`from alignment import H4ArgumentParser`,
    setup.py's package_dir): the script with its recipe is the run, so a keyword the script writes into its trainer
    (`SFTTrainer(..., packing=True)`) and a flag over the recipe both count."""
    script = """
        from dataclasses import dataclass, field
        from transformers import AutoModelForCausalLM
        from trl import SFTConfig, SFTTrainer
        from alignment import (
            H4ArgumentParser,
        )

        @dataclass
        class ModelArguments:
            model_name_or_path: str = field(default=None)

        def main():
            parser = H4ArgumentParser((ModelArguments, SFTConfig))
            model_args, training_args = parser.parse()
            model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path)
            SFTTrainer(model=model, args=training_args, train_dataset=None, packing=True).train()

        if __name__ == "__main__":
            main()
    """
    root = _write(tmp_path, {
        "setup.py": "from setuptools import find_packages, setup\nsetup(name='x', package_dir={'': 'src'}, "
                    "packages=find_packages('src'))\n",
        "src/alignment/__init__.py": "from .configs import H4ArgumentParser\n",
        "src/alignment/configs.py": _H4,
        "scripts/run_sft.py": script,
        "recipes/sft.yaml": "model_name_or_path: Qwen/Qwen2.5-0.5B\nper_device_train_batch_size: 4\n"
                            "gradient_accumulation_steps: 4\nmax_seq_length: 1024\noutput_dir: o\n",
    })
    plan = _command(root, monkeypatch, "accelerate", "launch", "scripts/run_sft.py", "recipes/sft.yaml",
                    "--gradient_accumulation_steps=16")
    assert plan.path.endswith("run_sft.py")
    assert _get(plan, "model_id", "per_device_batch", "grad_accum", "packing") == {
        "model_id": "Qwen/Qwen2.5-0.5B", "per_device_batch": 4, "grad_accum": 16, "packing": True}
