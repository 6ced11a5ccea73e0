"""What a fit finds in its checkpoint directory before it writes: leftovers, and an earlier run.

Leftovers are what a killed save leaves: ``.NAME.partial`` (a checkpoint or digest list being
written), ``.NAME.tmp-*`` (a bundle being written) and ``.NAME.old-PID`` (the previous bundle
or sharded checkpoint, moved aside for the new one). They are cleaned only by the run holding
the directory's lock (:mod:`~agon_lightning.callbacks.run_lock`): with the lock held, no
other live run can be writing there, so every leftover is a dead save's. An ``.old-`` one whose
replacement never arrived is the only copy, and is put back rather than deleted.

An earlier run's checkpoints are not replaced by a fit that starts from scratch: that fit is
refused unless it resumes (``--ckpt_path last``) or says ``--overwrite``, which deletes them first.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from agon_lightning.infra.checksum import SUFFIX, remove_digests

from .bundle import bundle_dir

LEFTOVER_PATTERNS = (".*.partial", ".*.tmp-*", ".*.old-*")
_OLD = re.compile(r"^\.(?P<name>.+)\.old-\d+$")


def delete(path: Path) -> None:
    """Delete a file or a directory tree."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def clean_leftovers(directory: str | Path) -> list[str]:
    """Remove the leftovers of killed saves in ``directory``; call it only while holding its lock.

    Returns:
        A line per copy put back in place (an ``.old-`` copy whose replacement is missing).
    """
    directory, restored = Path(directory), []
    for pattern in LEFTOVER_PATTERNS:
        for leftover in sorted(directory.glob(pattern)):
            moved = _OLD.match(leftover.name)
            original = directory / moved.group("name") if moved else None
            if original is not None and not original.exists():
                os.replace(leftover, original)
                restored.append(f"put {original} back from {leftover.name}, left by a save that was killed")
            else:
                delete(leftover)
    for listing in directory.glob(f"*{SUFFIX}"):  # digests of checkpoints that are gone
        if not listing.with_name(listing.name.removesuffix(SUFFIX)).exists():
            listing.unlink()
    return restored


def earlier_checkpoints(directory: str | Path) -> list[Path]:
    """The checkpoints (``*.ckpt``, files or sharded directories) in ``directory``, by name."""
    return sorted(Path(directory).glob("*.ckpt")) if Path(directory).is_dir() else []


def fresh_fit_refusal(directory: str | Path, found: list[Path]) -> str:
    """Why a fit from scratch may not start in ``directory``: it would replace the checkpoints ``found``."""
    names = ", ".join(p.name for p in found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
    return (
        f"{directory} holds checkpoints of an earlier run ({names}) and this fit starts from scratch; "
        "continue that run with --ckpt_path last, replace it with --overwrite "
        "(AgonCheckpoint(overwrite=True) from Python), or give another --trainer.default_root_dir"
    )


def clear_checkpoints(found: list[Path]) -> str:
    """Delete the checkpoints ``found``, their bundles and digests; the line to log."""
    for checkpoint in found:
        delete(checkpoint)
        delete(bundle_dir(checkpoint))
        remove_digests(checkpoint)
    return f"--overwrite: deleted the earlier run's checkpoints {[p.name for p in found]} and their bundles"
