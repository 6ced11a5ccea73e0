"""The configs shipped with the package, by name: ``--config agon:agon.yaml``, ``agon config``.

The YAML files of the repository's ``configs/`` folder install as package data
(``agon_lightning.configs``), so a plain ``pip install`` carries them and no checkout is
needed to start. ``agon:NAME`` names one wherever the package is installed (the prefix is
the one shipped models use, ``agon:tiny-qwen3``); ``agon config`` lists them, and
``agon config NAME > my.yaml`` copies one out to edit.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from agon_lightning.errors import CommandParser, UsageError
from agon_lightning.names import (
    SHIPPED as PREFIX,  # a config, or a model (adapters.policy.resolve_model_path)
)

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


def config_main(argv: Sequence[str] | None = None) -> None:
    """``agon config``: list the shipped configs, or print one."""
    parser = CommandParser(
        prog="agon config",
        description="List the configs shipped with the package, or print one. Any command's --config "
        "takes them as agon:NAME; copy one out to edit it: agon config agon.yaml > my.yaml",
    )
    parser.add_argument("name", nargs="?", help="a shipped config, e.g. agon.yaml or experiments/grpo.yaml")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if args.name is None:
        print("\n".join(PREFIX + n for n in shipped_configs()))
        return
    path = resolve_config(args.name if args.name.startswith(PREFIX) else PREFIX + args.name)
    if not path.is_file():
        raise UsageError(f"{args.name!r} is a folder of configs; pick one: agon config | grep {path.name}/")
    sys.stdout.write(path.read_text())
