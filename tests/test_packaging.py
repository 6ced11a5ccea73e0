"""The built wheel holds what an installed user needs: callbacks, shipped configs, assets."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (built,) = out.glob("agon_lightning-*.whl")
    return built


@pytest.mark.slow
def test_wheel_contains_callbacks_package_configs_and_entry_points(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    assert "agon_lightning/callbacks/__init__.py" in names
    assert not any(n.startswith(("callbacks/", "configs/")) for n in names), (
        "must install under agon_lightning"
    )
    shipped = {p.relative_to(ROOT / "configs").as_posix() for p in (ROOT / "configs").rglob("*.yaml")}
    assert {n.removeprefix("agon_lightning/configs/") for n in names if n.endswith(".yaml")} == shipped
    entry_points = (
        zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    )
    for group in ("agon_lightning.verifiers", "agon_lightning.summarizers", "agon_lightning.rewards",
                  "agon_lightning.rollouts", "console_scripts"):  # fmt: skip
        assert f"[{group}]" in entry_points


@pytest.mark.slow
def test_a_plain_install_runs_from_anywhere_with_its_shipped_configs(wheel, tmp_path):
    """A non-editable install, used from a directory with no ``configs/``: ``agon config``,
    ``--config agon:NAME`` and ``agon sweep``'s defaults all find the copies in the package."""
    target = tmp_path / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        check=True, capture_output=True,
    )  # fmt: skip
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"PYTHONPATH": str(target), "HF_HUB_OFFLINE": "1", "PATH": str(Path(sys.executable).parent)}

    def agon(*args: str) -> subprocess.CompletedProcess:
        code = "import sys, agon_lightning.cli as c; print(c.__file__, file=sys.stderr); c.main()"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True,
                              cwd=elsewhere, env=env, timeout=300)  # fmt: skip

    printed = agon("config", "agon.yaml")
    assert printed.returncode == 0, printed.stderr[-2000:]
    assert printed.stderr.startswith(str(target)), "the installed copy must be the one running"
    assert printed.stdout == (ROOT / "configs" / "agon.yaml").read_text()
    parsed = agon("fit", "--config", "agon:agon.yaml", "--print_config")
    assert parsed.returncode == 0 and "agon:tiny-qwen3" in parsed.stdout, parsed.stderr[-2000:]
    planned = agon("sweep", "--variants", "grpo", "--seeds", "0", "--out", "runs", "--dry-run")
    assert planned.returncode == 0, planned.stderr[-2000:]
    installed = target / "agon_lightning" / "configs"
    assert (
        f"--config {installed / 'agon.yaml'} --config {installed / 'experiments' / 'grpo.yaml'}"
        in planned.stdout
    )
