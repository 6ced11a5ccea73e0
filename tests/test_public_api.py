"""The package's public names: each imports from ``agon_lightning``, and importing the package stays light."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

import agon_lightning

ISSUE_NAMES = ["AgonModule", "Cascade", "Problem", "Verifier", "Summarizer", "Reward", "Rollout"]
DATA_MODULES = ["ProblemDataModule", "ReasoningGymDataModule", "FileProblemDataModule", "DeepMathDataModule",
                "CodeContestsDataModule"]  # fmt: skip


def test_every_public_name_imports_and_all_lists_exactly_them():
    assert set(ISSUE_NAMES + DATA_MODULES) <= set(agon_lightning.__all__)
    assert agon_lightning.__all__ == sorted(agon_lightning._EXPORTS)
    for name in agon_lightning.__all__:
        value = getattr(agon_lightning, name)
        assert value is getattr(importlib.import_module(agon_lightning._EXPORTS[name]), name), name
        assert name in dir(agon_lightning)
    from agon_lightning import AgonModule, Cascade, Problem, Reward, Rollout, Summarizer, Verifier  # noqa: F401

    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        agon_lightning.Nope  # noqa: B018


@pytest.mark.parametrize(
    "code",
    [
        "import agon_lightning.game.text",
        "import agon_lightning; agon_lightning.__all__",
        "from agon_lightning.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass",
    ],
)
def test_importing_the_package_or_agon_help_loads_neither_torch_nor_lightning(code):
    check = f"{code}\nimport sys\nheavy = [m for m in ('torch', 'lightning', 'transformers') if m in sys.modules]\n"
    check += "assert not heavy, heavy"
    result = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
