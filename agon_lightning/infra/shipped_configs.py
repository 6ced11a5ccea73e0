"""The configs shipped with the package, found by name (``agon:agon.yaml``); ``agon config`` lists them.

The YAML files of the repository's ``configs/`` folder install as package data
(``agon_lightning.configs``), so a plain ``pip install`` carries them and no checkout is
needed to start. ``agon:NAME`` names one wherever the package is installed (the prefix is
the one shipped models use, ``agon:tiny-qwen3``). Below the CLI: the sweep and the Python API
find configs here too.
"""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from agon_lightning.game.names import (
    SHIPPED as PREFIX,  # a config, or a model (infra.model_source.resolve_model_path)
)
from agon_lightning.infra.errors import UsageError

CONFIG_OPTIONS = ("-c", "--config")
LOCAL_DIR = Path("configs")


def shipped_root() -> Path:
    """The folder the shipped configs are installed in."""
    return Path(str(resources.files("agon_lightning.configs")))


def shipped_configs() -> list[str]:
    """Names of the shipped configs, relative to :func:`shipped_root` (``agon.yaml``, ``strategy/ddp.yaml``)."""
    root = shipped_root()
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.yaml"))


def resolve_config(name: str) -> Path:
    """``agon:NAME`` → the shipped file or folder (``.yaml`` may be left out); any other name as a path.

    Raises:
        UsageError: ``NAME`` is not shipped (the message suggests the closest that is).
    """
    if not name.startswith(PREFIX):
        return Path(name)
    relative = name[len(PREFIX) :]
    root = shipped_root()
    for candidate in (root / relative, root / f"{relative}.yaml"):
        if relative and candidate.exists() and candidate.resolve().is_relative_to(root.resolve()):
            return candidate
    names = shipped_configs()
    close = difflib.get_close_matches(relative, names + [n.removesuffix(".yaml") for n in names], n=1)
    hint = f"; did you mean {PREFIX}{close[0]}?" if close else ""
    raise UsageError(f"no shipped config {name!r}{hint} (`agon config` lists them)")


def local_or_shipped(relative: str) -> Path:
    """``configs/RELATIVE`` when the working directory has it (a checkout), else the shipped copy."""
    local = LOCAL_DIR / relative
    return local if local.exists() else resolve_config(PREFIX + relative)


def expand_config_args(argv: Sequence[str]) -> list[str]:
    """``argv`` with each ``--config agon:NAME`` (``-c``, ``--config=``) replaced by the shipped file's path."""
    expanded: list[str] = []
    value_next = False
    for arg in argv:
        if value_next:
            arg = str(resolve_config(arg))
        elif arg.startswith("--config="):
            arg = "--config=" + str(resolve_config(arg.split("=", 1)[1]))
        value_next = arg in CONFIG_OPTIONS
        expanded.append(arg)
    return expanded
