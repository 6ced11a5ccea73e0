"""How many adapters and roles a config's game has, read before anything loads (the planner, the server command).

``model.game`` is ``agon`` or ``grpo`` (with ``model.schedule``), an entry-point name of the group
``agon_lightning.games``, or a ``{class_path, init_args}`` mapping: the class is imported and
built with its arguments, and its ``GameSpec`` counted.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from agon_lightning.infra.errors import UsageError


def game_shape(model: dict[str, Any]) -> tuple[int, int]:
    """``(policies, roles)`` of the game an ``agon fit`` config's ``model`` section plays.

    Raises:
        UsageError: a game class that cannot be imported or built, naming ``model.game``.
    """
    game = model.get("game", "agon")
    if game in (None, "agon"):
        return (1, 2) if model.get("schedule") == "self_play" else (2, 2)
    if game == "grpo":
        return 1, 1
    if isinstance(game, str):
        found = {ep.name: ep.value.replace(":", ".") for ep in entry_points(group="agon_lightning.games")}
        game = {"class_path": found.get(game, game)}
    path, args = str(game.get("class_path", "")), game.get("init_args") or {}
    module, _, name = path.rpartition(".")
    try:
        spec = getattr(importlib.import_module(module), name)(**args).spec
    except Exception as err:  # any failure to build it names the option
        raise UsageError(f"model.game={path!r} could not be built to count its policies: {err}") from err
    return len(spec.policies), len(spec.roles)
