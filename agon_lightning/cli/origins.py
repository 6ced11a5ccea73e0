"""Where each data option's value came from: the command line, a config file, or the class's default.

A message about ``data.val_size=200`` helps only if it says where 200 came from. A user who
switched ``--data=files`` on top of ``configs/agon.yaml`` never wrote a ``val_size``: jsonargparse
kept the one the config set for its own data module, since the new class takes an option of that
name. Here the command's arguments are read again in the order jsonargparse applies them (each
``--config`` file, each ``--data...`` option) to say, for every option of the data module, who
set it last; the data module names that origin in its messages
(:meth:`~agon_lightning.data.base.ProblemDataModule.set_origins`). An origin whose value is not
the one in force is left out, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from agon_lightning.infra.shipped_configs import CONFIG_OPTIONS

COMMAND_LINE = "given on the command line"
UNKNOWN = object()  # a value given as text on the command line: not compared with the parsed one
DATA_FILES = (".yaml", ".yml", ".json")


def data_origins(argv: Sequence[str], class_path: str | None, values: Mapping[str, Any]) -> dict[str, str]:
    """``{option: where its value was set}`` for the data module's options, as far as ``argv`` tells.

    Args:
        argv: The command's arguments (a leading subcommand is skipped), config paths expanded.
        class_path: The data module's class, as parsed.
        values: Its options' values, as parsed (``data.init_args``).
    """
    found: dict[str, tuple[str, str | None, Any]] = {}  # option → (origin, class it was set for, value)
    current: str | None = None  # the class the arguments so far chose

    def section(data: Any, origin: str) -> None:  # a config's ``data:``, or a mapping given to --data
        nonlocal current
        if isinstance(data, Mapping):
            current = data.get("class_path", current)
            for key, set_to in (data.get("init_args") or {}).items():
                found[key] = (origin, current, set_to)

    for option, value in _pairs(argv):
        if option in CONFIG_OPTIONS and value:
            section(_read_yaml(value).get("data"), f"set in {value}")
        elif option in ("--data", "--data.class_path") and value:
            if value.endswith(DATA_FILES):
                section(_read_yaml(value), f"set in {value}")
            elif value.lstrip().startswith("{"):
                section(_load_yaml(value), COMMAND_LINE)
            else:
                current = value
        elif option.startswith("--data."):
            key = option.removeprefix("--data.").removeprefix("init_args.")
            if "." not in key:
                found[key] = (COMMAND_LINE, None, UNKNOWN)
    origins = {}
    for key, (origin, written_for, set_to) in found.items():
        if key not in values or (set_to is not UNKNOWN and values[key] != set_to):
            continue  # something this reading does not follow set it since: say nothing
        if written_for and class_path and _short(written_for) != _short(class_path):
            origin += f" for {_short(written_for)}, kept when --data chose {_short(class_path)}"
        origins[key] = origin
    return origins


def _pairs(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """``(option, value)`` for each option of ``argv`` (``--x=v``, ``--x v``; ``None``: a flag)."""
    args = list(argv)
    if args and not args[0].startswith("-"):
        args = args[1:]  # the subcommand
    pairs: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("-"):
            option, eq, value = arg.partition("=")
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("-"):
                value, i = args[i + 1], i + 1
            pairs.append((option, value if eq or value else None))
        i += 1
    return pairs


def _read_yaml(path: str) -> dict[str, Any]:
    """The mapping in the YAML (or JSON) file ``path``; empty where it cannot be read."""
    try:
        return _load_yaml(Path(path).read_text())
    except OSError:
        return {}


def _load_yaml(text: str) -> dict[str, Any]:
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError:
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _short(class_path: str) -> str:
    """``agon_lightning.data.files.FileProblemDataModule`` → ``FileProblemDataModule``."""
    return class_path.rsplit(".", 1)[-1]
