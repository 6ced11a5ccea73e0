"""A finished run's outcomes, kept small enough to commit: the sweep's tables recomputed from git alone.

A run directory holds checkpoints and logs (tens of MB, ignored by git). What the tables,
intervals and endpoints read is a few files: the sweep's marker, the last evaluation's
per-problem outcomes and each version's ``metrics.csv`` and ``config.yaml``. :func:`archive_run`
packs those into ``ARCHIVE/VARIANT/seed_N.tar.gz`` (tens of KB) as each run finishes, and
:func:`unpack_all` lays them out again as ``VARIANT/seed_N/`` directories that
:func:`~agon_lightning.experiments.sweep_report.read_run` reads as if the runs were there.
"""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

#: The files of a run directory a report reads (globs, relative to the run directory).
KEPT = ("sweep_done.json", "lightning_logs/version_*/metrics.csv", "lightning_logs/version_*/config.yaml",
        "lightning_logs/version_*/outcomes.jsonl")  # fmt: skip
ARCHIVE = "archive"


def archive_path(out: Path, variant: str, seed: int) -> Path:
    return out / ARCHIVE / variant / f"seed_{seed}.tar.gz"


def archive_run(run_dir: Path, dest: Path) -> Path:
    """Pack ``run_dir``'s :data:`KEPT` files into ``dest`` (written whole or not at all).

    Raises:
        FileNotFoundError: the run has no marker or no ``metrics.csv`` (not a finished run).
    """
    files = sorted({p for pattern in KEPT for p in run_dir.glob(pattern) if p.is_file()})
    names = {p.relative_to(run_dir).as_posix() for p in files}
    if "sweep_done.json" not in names or not any(n.endswith("metrics.csv") for n in names):
        raise FileNotFoundError(f"{run_dir} is not a finished run (no sweep_done.json or metrics.csv)")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with tarfile.open(tmp, "w:gz", compresslevel=9) as tar:
        for path in files:
            data = path.read_bytes()
            info = tarfile.TarInfo(path.relative_to(run_dir).as_posix())
            info.size, info.mtime = len(data), 0  # no timestamps: the same run packs to the same bytes
            tar.addfile(info, io.BytesIO(data))
    os.replace(tmp, dest)
    return dest


def unpack(packed: Path, run_dir: Path) -> Path:
    """``packed``'s files laid out in ``run_dir`` (created); refuses an entry outside it."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with tarfile.open(packed, "r:gz") as tar:
        for member in tar.getmembers():
            if not member.isfile() or member.name.startswith("/") or ".." in Path(member.name).parts:
                raise ValueError(f"{packed}: unexpected entry {member.name!r}")
        tar.extractall(run_dir, filter="data")
    return run_dir


def unpack_all(out: Path, into: Path) -> list[Path]:
    """Every ``OUT/archive/VARIANT/seed_N.tar.gz`` unpacked to ``INTO/VARIANT/seed_N/``; the run directories."""
    return [
        unpack(packed, into / packed.parent.name / packed.name.removesuffix(".tar.gz"))
        for packed in sorted((out / ARCHIVE).glob("*/seed_*.tar.gz"))
    ]
