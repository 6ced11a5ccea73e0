"""The built wheel holds what an installed user imports: callbacks, configs-free package, assets."""

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_wheel_contains_callbacks_package_and_entry_points(tmp_path):
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(tmp_path), str(ROOT)],
        check=True, capture_output=True,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("agon_lightning-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "agon_lightning/callbacks/__init__.py" in names
    assert not any(n.startswith("callbacks/") for n in names), "callbacks/ must install under agon_lightning"
    entry_points = (
        zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    )
    for group in ("agon_lightning.verifiers", "agon_lightning.summarizers", "agon_lightning.rewards",
                  "agon_lightning.rollouts", "console_scripts"):  # fmt: skip
        assert f"[{group}]" in entry_points
