"""The set-up CI runs is the README's, and ``agon`` names torch companions built for another torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agon_lightning import cli

ROOT = Path(__file__).resolve().parents[1]


def test_ci_installs_exactly_as_the_readme_says():
    readme = (ROOT / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith("| CPU (what `.ci/run` runs")]
    (command,) = re.findall(r"`(pip install torch==2\.13\.0 [^`]+)`", row)
    assert command in (ROOT / ".ci" / "run").read_text().splitlines()
    assert "python -m pytest -q" in (ROOT / ".ci" / "run").read_text()


@pytest.mark.parametrize(
    ("versions", "broken"),
    [
        (
            {"torch": "2.13.0+cpu", "torchvision": "0.28.0", "torchaudio": "2.11.1"},
            ["torchvision 0.28.0", "torchaudio 2.11.1"],
        ),
        ({"torch": "2.13.0+cpu", "torchvision": "0.28.0+cpu"}, []),
        ({"torch": "2.13.0", "torchvision": "0.28.0"}, []),  # a CUDA torch: its torchvision loads
        ({"torch": "2.13.0+cpu"}, []),
    ],
)
def test_cuda_built_companions_of_a_cpu_torch_are_named(monkeypatch, versions, broken):
    from importlib.metadata import PackageNotFoundError

    def version(name):
        if name not in versions:
            raise PackageNotFoundError(name)
        return versions[name]

    monkeypatch.setattr(cli, "version", version)
    assert cli.broken_torch_companions() == broken
    if broken:
        with pytest.raises(SystemExit):
            cli.main(["config"])
