"""The configs shipped with the package, by name: ``--config agon:agon.yaml``, ``agon config``.

The YAML files of the repository's ``configs/`` folder install as package data
(``agon_lightning.configs``), so a plain ``pip install`` carries them and no checkout is
needed to start. ``agon:NAME`` names one wherever the package is installed (the prefix is
the one shipped models use, ``agon:tiny-qwen3``); ``agon config`` lists them, and
``agon config NAME > my.yaml`` copies one out to edit.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from agon_lightning.infra.errors import CommandParser, UsageError
from agon_lightning.infra.shipped_configs import (  # noqa: F401  (their old home: imported from here too)
    CONFIG_OPTIONS,
    LOCAL_DIR,
    PREFIX,
    expand_config_args,
    local_or_shipped,
    resolve_config,
    shipped_configs,
    shipped_root,
)


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
