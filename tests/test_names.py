"""One place names the adapters and the base: the constants, and the ``Literal`` types that repeat them."""

from __future__ import annotations

import inspect
import re
import typing
from pathlib import Path

import agon_lightning
from agon_lightning.game import names
from agon_lightning.training import schedule
from callbacks.checkpoint import DRAFTER_MODES, AgonCheckpoint

ROOT = Path(agon_lightning.__file__).parent.parent


def test_the_names_are_the_user_facing_strings():
    # Metric keys (val/alpha/*, val/base/*), bundles and saved configs spell them so.
    assert (names.ALPHA, names.BETA, names.BASE) == ("alpha", "beta", "base")
    assert names.ADAPTERS == (names.ALPHA, names.BETA)


def test_the_drafter_takes_any_adapters_name_and_defaults_to_a_mode():
    assert typing.get_type_hints(AgonCheckpoint.__init__)["drafter"] is str  # a game's own names too
    assert inspect.signature(AgonCheckpoint).parameters["drafter"].default in DRAFTER_MODES


def test_schedules_use_the_adapter_names():
    assert {schedule.roles_for_step(s, k) for s in (0, 1) for k in schedule.SCHEDULES} <= {
        (a, b) for a in names.ADAPTERS for b in names.ADAPTERS
    }
    assert schedule.adapters_for("rotate", "agon") == names.ADAPTERS


def test_no_module_spells_an_adapter_or_the_base_as_a_literal():
    # Docstrings and comments may use the words; code takes them from agon_lightning.game.names.
    literal = re.compile(r"""(?<![\w.])["'](alpha|beta|base)["']""")
    found = []
    for path in [*(ROOT / "agon_lightning").rglob("*.py"), *(ROOT / "callbacks").glob("*.py")]:
        if path.name == "names.py" or path.name == "plan.py":  # plan.py: "base" is the base weights' memory
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if literal.search(code) and "Literal[" not in code:
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "\n".join(found)
