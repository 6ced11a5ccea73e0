"""No module calls or overrides a private member of Lightning's ``ModelCheckpoint`` (a static scan).

Those members change between Lightning releases without notice; checkpointing is built on
the public hooks and ``trainer.save_checkpoint`` instead (``callbacks/checkpoint.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from lightning.pytorch.callbacks import ModelCheckpoint

import agon_lightning

ROOT = Path(agon_lightning.__file__).parent
SOURCES = [*ROOT.rglob("*.py"), *(ROOT.parent / "callbacks").glob("*.py")]
# every private name ModelCheckpoint defines or sets (methods, class and instance attributes)
PRIVATE = {
    n for cls in ModelCheckpoint.__mro__ for n in vars(cls) if n.startswith("_") and not n.startswith("__")
}
PRIVATE |= {n for n in vars(ModelCheckpoint(dirpath=".")) if n.startswith("_") and not n.startswith("__")}


def private_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, name)`` of each ``x._name`` read or written and each ``def _name`` in a class."""
    found = [(n.lineno, n.attr) for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in PRIVATE]
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        found += [
            (f.lineno, f.name) for f in cls.body if isinstance(f, ast.FunctionDef) and f.name in PRIVATE
        ]
    return found


def test_the_scan_knows_the_private_members_and_finds_a_use():
    assert {
        "_save_checkpoint",
        "_find_last_checkpoints",
        "_last_global_step_saved",
        "_every_n_train_steps",
    } <= PRIVATE
    code = "class C(ModelCheckpoint):\n    def _save_checkpoint(self, t, p):\n        self._last_global_step_saved = 1\n"
    assert {name for _, name in private_uses(ast.parse(code))} == {
        "_save_checkpoint",
        "_last_global_step_saved",
    }


def test_no_module_uses_a_private_member_of_model_checkpoint():
    offenders = [f"{p.relative_to(ROOT.parent)}:{line} {name}" for p in SOURCES
                 for line, name in private_uses(ast.parse(p.read_text()))]  # fmt: skip
    assert not offenders, offenders
