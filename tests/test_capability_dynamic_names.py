"""Classes and functions chosen by a name the script reads at run time: `globals()[cfg["model"]](**cfg["args"])`
where the class comes from a star import of the checkout's own package."""

from checkouts import write_checkout

from memlint.extract import extract_paths

_PACKAGE = {
    "model/__init__.py": "from .agent import *\n",
    "model/agent.py": '''
        from transformers import AutoModelForCausalLM

        __all__ = ["Wrapper"]


        class Wrapper:
            def __init__(self, **args):
                self.model = AutoModelForCausalLM.from_pretrained(args["path"])
        ''',
    "cfg.yaml": "model_cls: Wrapper\nmodel_args:\n  path: Qwen/Qwen2-0.5B\nbs: 4\n",
}

_TRAIN = '''
    import yaml
    from transformers import Trainer, TrainingArguments
    from model import *


    def load_model(args):
        return globals()[args["model_cls"]](**args)


    cfg = yaml.safe_load(open("cfg.yaml"))
    cfg.update(cfg["model_args"])
    agent = load_model(cfg)
    args = TrainingArguments(output_dir="o", per_device_train_batch_size=cfg["bs"])
    Trainer(model=agent.model, args=args).train()
    '''


def test_globals_item_of_a_star_imported_class_is_that_class(tmp_path, monkeypatch):
    write_checkout(tmp_path, {**_PACKAGE, "train.py": _TRAIN}, dedent=True)
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert plan.get("model_id").value == "Qwen/Qwen2-0.5B"
    assert plan.get("per_device_batch").value == 4


def test_globals_item_of_a_name_nothing_binds_stays_unknown(tmp_path, monkeypatch):
    cfg = "model_cls: Missing\nmodel_args:\n  path: Qwen/Qwen2-0.5B\nbs: 4\n"
    write_checkout(tmp_path, {**_PACKAGE, "cfg.yaml": cfg, "train.py": _TRAIN.replace("from model import *\n", "")},
                   dedent=True)
    monkeypatch.chdir(tmp_path)
    (plan,) = extract_paths(["train.py"])
    assert not plan.get("model_id").known


_PARSED = '''
    from dataclasses import dataclass, field
    from transformers import AutoModelForCausalLM, HfArgumentParser, Trainer, TrainingArguments


    @dataclass
    class ModelArguments:
        model_name_or_path: str = field(default="facebook/opt-350m")


    @dataclass
    class DataArguments:
        max_len: int = 1024


    def parse(classes):
        parsed = HfArgumentParser(classes).parse_args_into_dataclasses()
        return BY_NAME


    def main():
        a = parse((ModelArguments, DataArguments, TrainingArguments))
        margs, targs = a["ModelArguments"], a["TrainingArguments"]
        model = AutoModelForCausalLM.from_pretrained(margs.model_name_or_path)
        Trainer(model=model, args=targs).train()


    if __name__ == "__main__":
        main()
    '''


def _parsed_plan(tmp_path, monkeypatch, by_name):
    from checkouts import plan_of_command

    write_checkout(tmp_path, {"train.py": _PARSED.replace("BY_NAME", by_name)}, dedent=True)
    return plan_of_command(tmp_path, monkeypatch, "python", "train.py", "--output_dir", "o",
                           "--per_device_train_batch_size", "3")


def test_parsed_dataclasses_keyed_by_zip_of_their_names(tmp_path, monkeypatch):
    plan = _parsed_plan(tmp_path, monkeypatch, 'dict(zip(["ModelArguments", "DataArguments", "TrainingArguments"], parsed))')
    assert plan.get("model_id").value == "facebook/opt-350m" and plan.get("per_device_batch").value == 3


def test_parsed_dataclasses_keyed_by_their_class_names(tmp_path, monkeypatch):
    plan = _parsed_plan(tmp_path, monkeypatch, "{type(p).__name__: p for p in parsed}")
    assert plan.get("model_id").value == "facebook/opt-350m" and plan.get("per_device_batch").value == 3


def test_zip_stops_at_the_shortest_and_a_grown_list_stays_unknown(tmp_path, monkeypatch):
    plan = _parsed_plan(tmp_path, monkeypatch, 'dict(zip(["ModelArguments", "DataArguments"], parsed))')
    assert plan.get("model_id").value == "facebook/opt-350m"
    assert not plan.get("per_device_batch").known  # no "TrainingArguments" key: zip stopped at two
