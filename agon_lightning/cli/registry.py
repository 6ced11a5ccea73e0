"""Plugins: components found through entry points, imported before the CLI parser is built.

Built-ins register through the same groups in our own pyproject.toml, so a third-party
package that declares, e.g.::

    [project.entry-points."agon_lightning.verifiers"]
    lean = "my_pkg.verify:LeanVerifier"

is selectable exactly like a built-in: ``--model.verifier=LeanVerifier`` or
``class_path: LeanVerifier`` in YAML (jsonargparse resolves a short class name among the
imported subclasses of the argument's type). On the command line the entry-point name works
too (``--model.verifier=lean``, ``--model.rollout=vllm``, ``--data=files``):
:func:`resolve_component_names` turns it into the class path before the parser sees it. Data
modules register under ``agon_lightning.data`` (the group is named after the ``--data`` option),
and ``agon sft``'s SFT examples under ``agon_lightning.examples`` (``--data.examples``).
"""

from __future__ import annotations

from importlib.metadata import entry_points

from agon_lightning.data.base import ProblemDataModule
from agon_lightning.game.formats import FormatCheck
from agon_lightning.game.rewards import Reward
from agon_lightning.games.base import Game
from agon_lightning.rollout.base import Rollout
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.training.sft_data import SFTExamples
from agon_lightning.verifiers.base import Verifier

GROUPS: dict[str, type] = {
    "agon_lightning.rollouts": Rollout,
    "agon_lightning.verifiers": Verifier,
    "agon_lightning.summarizers": Summarizer,
    "agon_lightning.rewards": Reward,
    "agon_lightning.formats": FormatCheck,
    "agon_lightning.games": Game,
    "agon_lightning.data": ProblemDataModule,
    "agon_lightning.examples": SFTExamples,
}


def load_plugins() -> dict[str, dict[str, type]]:
    """Import every registered component; ``{group: {entry-point name: class}}``.

    Raises:
        ImportError: an entry point cannot be imported (names the entry point).
        TypeError: an entry point is not a subclass of its group's base class.
    """
    found: dict[str, dict[str, type]] = {}
    for group, base in GROUPS.items():
        found[group] = {}
        for ep in entry_points(group=group):
            try:
                obj = ep.load()
            except Exception as err:
                raise ImportError(
                    f"entry point {ep.name!r} = {ep.value!r} in group {group!r} failed to import: {err}"
                ) from err
            if not (isinstance(obj, type) and issubclass(obj, base)):
                raise TypeError(
                    f"entry point {ep.name!r} = {ep.value!r} in group {group!r} is not a {base.__name__} subclass"
                )
            found[group][ep.name] = obj
    return found


def group_for_option(name: str) -> str | None:
    """The entry-point group of a component option: ``verifier`` → ``agon_lightning.verifiers``,
    ``data`` → ``agon_lightning.data``."""
    return next((group for group in GROUPS if group.rsplit(".", 1)[1] in (f"{name}s", name)), None)


def available_names(group: str) -> list[str]:
    """The class names a component option of ``group`` accepts (``--model.verifier=NAME``), sorted."""
    return sorted({cls.__name__ for cls in load_plugins()[group].values()})


def entry_point_paths(group: str) -> dict[str, str]:
    """``{entry-point name: dotted class path}`` of ``group``, read without importing anything."""
    return {ep.name: ep.value.replace(":", ".") for ep in entry_points(group=group)}


def resolve_component_names(argv: list[str]) -> list[str]:
    """``argv`` with each component option given an entry-point name rewritten to its class path.

    ``--model.rollout=vllm`` (or ``--model.rollout vllm``, or ``--model.rollout.class_path=vllm``)
    becomes ``--model.rollout=agon_lightning.rollout.vllm.VLLMRollout``. Class names and class
    paths pass through unchanged, as does every other argument.
    """
    resolved = list(argv)
    for i, arg in enumerate(resolved):
        if not arg.startswith("--"):
            continue
        key, eq, value = arg.partition("=")
        option = key[2:].removesuffix(".class_path").rsplit(".", 1)[-1]  # --data: "data"
        group = group_for_option(option)
        if group is None:
            continue
        paths = entry_point_paths(group)
        if eq and value in paths:
            resolved[i] = f"{key}={paths[value]}"
        elif not eq and i + 1 < len(resolved) and resolved[i + 1] in paths:
            resolved[i + 1] = paths[resolved[i + 1]]
    return resolved
