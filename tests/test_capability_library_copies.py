"""A checkout that holds a copy of a modelled library (a fork of TRL adding its own trainer, put on sys.path by the
script): a name the library's data does not know (`from trl.trainer import IndexedGRPOTrainer`) is read from the
copy, and the copy's own relative imports (`from .grpo_trainer import GRPOTrainer`) stay the library's classes, so
the fork's trainer is the library trainer it derives from, with that trainer's arguments."""

from __future__ import annotations

from functools import partial

from checkouts import field_values as _get, plan_of_command as _command, write_checkout

_write = partial(write_checkout, dedent=True)

_PACKAGE_INIT = """
    from typing import TYPE_CHECKING
    from .import_utils import _LazyModule

    _import_structure = {"trainer": ["GRPOConfig", "GRPOTrainer", "RankedGRPOTrainer"]}
    if TYPE_CHECKING:
        from .trainer import GRPOConfig, GRPOTrainer, RankedGRPOTrainer
    else:
        import sys
        sys.modules[__name__] = _LazyModule(__name__, globals()["__file__"], _import_structure)
"""

_TRAINER_INIT = """
    from typing import TYPE_CHECKING
    from ..import_utils import _LazyModule

    _import_structure = {
        "grpo_config": ["GRPOConfig"],
        "grpo_trainer": ["GRPOTrainer"],
        "ranked_grpo_trainer": ["RankedGRPOTrainer"],
    }
    if TYPE_CHECKING:
        from .grpo_config import GRPOConfig
        from .grpo_trainer import GRPOTrainer
        from .ranked_grpo_trainer import RankedGRPOTrainer
    else:
        import sys
        sys.modules[__name__] = _LazyModule(__name__, globals()["__file__"], _import_structure)
"""

_FORK_TRAINER = """
    import torch
    from .grpo_trainer import GRPOTrainer
    from ..models import unwrap_model_for_generation


    class RankedGRPOTrainer(GRPOTrainer):
        def __init__(self, *args, rank_weight=0.5, **kwargs):
            super().__init__(*args, **kwargs)
            self.rank_weight = rank_weight
"""

_SCRIPT = """
    import sys
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).parent.parent))

    from trl import GRPOConfig
    from trl.trainer import RankedGRPOTrainer

    args = GRPOConfig(output_dir="out", per_device_train_batch_size=3, gradient_accumulation_steps=4,
                      max_prompt_length=256, max_completion_length=512, bf16=True)
    trainer = RankedGRPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", reward_funcs=[len], args=args,
                                train_dataset=None)
    trainer.train()
"""


def _fork(root, with_trainer: bool = True):
    files = {
        "setup.py": "from setuptools import setup\nsetup(name='trl')\n",
        "requirements.txt": "transformers==4.57.1\n",
        "trl/__init__.py": _PACKAGE_INIT,
        "trl/import_utils.py": "class _LazyModule:\n    pass\n",
        "trl/trainer/__init__.py": _TRAINER_INIT,
        "trl/trainer/grpo_config.py": "class GRPOConfig:\n    pass\n",
        "trl/trainer/grpo_trainer.py": "from transformers import Trainer\n\nclass GRPOTrainer(Trainer):\n    pass\n",
        "trl/models/__init__.py": "def unwrap_model_for_generation(m):\n    return m\n",
        "examples/train_ranked.py": _SCRIPT,
    }
    if with_trainer:
        files["trl/trainer/ranked_grpo_trainer.py"] = _FORK_TRAINER
    return _write(root, files)


def test_a_forks_own_trainer_is_the_library_trainer_it_derives_from(tmp_path, monkeypatch):
    root = _fork(tmp_path)
    plan = _command(root, monkeypatch, "python", "examples/train_ranked.py")
    assert _get(plan, "trainer", "model_id", "per_device_batch", "grad_accum", "max_length") == {
        "trainer": "GRPOTrainer", "model_id": "Qwen/Qwen2.5-0.5B-Instruct", "per_device_batch": 3,
        "grad_accum": 4, "max_length": 768}
    assert plan.fields["trainer"].line == 10


def test_a_name_the_copy_does_not_define_stays_unknown(tmp_path, monkeypatch):
    root = _fork(tmp_path, with_trainer=False)
    plan = _command(root, monkeypatch, "python", "examples/train_ranked.py")
    assert plan.fields["trainer"].value is None


def test_a_library_name_the_data_knows_is_never_read_from_the_copy(tmp_path, monkeypatch):
    """The copy's GRPOTrainer derives from Trainer alone; the script's GRPOTrainer is still TRL's (modelled)."""
    root = _fork(tmp_path)
    script = (root / "examples/train_ranked.py").read_text()
    (root / "examples/train_plain.py").write_text(
        script.replace("from trl.trainer import RankedGRPOTrainer", "from trl.trainer import GRPOTrainer")
              .replace("RankedGRPOTrainer(", "GRPOTrainer("))
    plan = _command(root, monkeypatch, "python", "examples/train_plain.py")
    assert _get(plan, "trainer", "max_length") == {"trainer": "GRPOTrainer", "max_length": 768}


def test_a_relative_import_inside_the_copy_names_the_library(tmp_path, monkeypatch):
    """The fork's trainer derives from `.dpo_trainer`'s DPOTrainer, which the copy writes as a bare Trainer subclass:
    inside the copy that name is TRL's DPOTrainer (modelled), not the copied source's class."""
    root = _fork(tmp_path)
    _write(root, {
        "trl/trainer/__init__.py": _TRAINER_INIT.replace('"ranked_grpo_trainer": ["RankedGRPOTrainer"],',
                                                         '"weighted_dpo_trainer": ["WeightedDPOTrainer"],'),
        "trl/trainer/dpo_trainer.py": "from transformers import Trainer\n\nclass DPOTrainer(Trainer):\n    pass\n",
        "trl/trainer/weighted_dpo_trainer.py": """
            from .dpo_trainer import DPOTrainer

            class WeightedDPOTrainer(DPOTrainer):
                pass
        """,
        "examples/train_dpo.py": """
            import sys
            sys.path.insert(0, "..")
            from trl import DPOConfig
            from trl.trainer import WeightedDPOTrainer

            args = DPOConfig(output_dir="out", per_device_train_batch_size=2, max_length=1024)
            WeightedDPOTrainer(model="Qwen/Qwen2.5-0.5B-Instruct", args=args, train_dataset=None).train()
        """,
    })
    plan = _command(root, monkeypatch, "python", "examples/train_dpo.py")
    assert _get(plan, "trainer", "per_device_batch", "max_length") == {
        "trainer": "DPOTrainer", "per_device_batch": 2, "max_length": 1024}
