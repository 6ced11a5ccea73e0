"""Which code a run executes: the commit of the checkout ``agon_lightning`` is imported from.

A sweep's runs are separate processes, each importing the package as it is on disk when it
starts: a commit made while a sweep runs reaches every run started after it, and a run resumed
in a later session goes on with whatever the checkout holds then. :func:`code_version` names that
code so that a run's records can say which it was.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import agon_lightning

PACKAGE = Path(agon_lightning.__file__).resolve().parent


def code_version(package: Path = PACKAGE) -> str | None:
    """``"<commit>"``, or ``"<commit>+changes"`` where the code's tracked files differ from it; ``None`` outside a git checkout.

    ``None`` too where the package is not a tracked part of the enclosing repository (an install
    under a virtual environment that happens to sit inside some other checkout).
    """
    git = ["git", "-C", str(package)]
    try:
        tracked = subprocess.run(
            [*git, "ls-files", "--error-unmatch", "__init__.py"], capture_output=True, timeout=30
        )
        if tracked.returncode != 0:
            return None
        head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, timeout=30)
        if head.returncode != 0:
            return None
        # the code a run imports: the package and, in a source checkout, the callbacks and configs beside it
        paths = [
            str(p) for p in (package, package.parent / "callbacks", package.parent / "configs") if p.is_dir()
        ]
        dirty = subprocess.run(
            [*git, "status", "--porcelain", "--untracked-files=no", "--", *paths],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return head.stdout.strip() + ("+changes" if dirty.stdout.strip() else "")
