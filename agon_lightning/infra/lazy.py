"""A package's public names, imported on first use (PEP 562).

``agon_lightning`` and ``agon_lightning.rollout`` name what they export and the module that
defines each, so ``from agon_lightning import Cascade`` works while ``import agon_lightning``
alone loads neither torch nor Lightning.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from typing import Any


def lazy_names(module: str, where: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` for ``module`` (PEP 562): each name of ``where`` (name → the
    module that defines it) is imported from there on first use and kept in ``module``.

    ``from module import name`` gives the object at its own module, and importing ``module`` loads
    nothing more.
    """
    namespace = sys.modules[module].__dict__

    def __getattr__(name: str) -> Any:
        source = where.get(name)
        if source is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(source), name)
        namespace[name] = value  # later look-ups skip this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(where))

    return __getattr__, __dir__
