"""What a game declares before it plays: its policies, its roles, what they face and how it deploys.

The module, the features (the league, the KL anchor, sampling ahead, snapshots) and the
evaluator read a game only through its :class:`GameSpec`, checked once at construction; so a
feature that cannot apply to a game refuses at start, in one message naming both, instead of
doing nothing or failing at the first update.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from agon_lightning.game.names import BASE

Deploy = Literal["single", "cascade", "graph"]
DEPLOYS: tuple[str, ...] = ("single", "cascade", "graph")
SLOT_SUFFIXES = ("_ref", "_league")  # the snapshot slots' names (adapters.snapshots): never a policy's
_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class GameSpec:
    """A game's contract with the module and the features.

    Attributes:
        policies: The adapters the game trains, by name (any number >= 1). The first is the one a
            single-adapter deployment serves by default.
        roles: The roles the game pays, by name: each :class:`~agon_lightning.games.records.RoleRollout`
            of a step names one; ``model.kl`` addresses them (``--model.kl.judge.beta=0.04``).
        first_stage: The role whose samples come from ``player.draft`` (N samples of each problem
            from the plain prompt), which ``rollout.max_staleness`` may sample a step ahead;
            ``None``: the game samples its own first stage, and sampling ahead is refused.
        rivals: Role → the role whose samples it reads and is graded against. ``model.kl``'s
            ``rival`` reference of a role reads that role's adapter; the league offers a role a
            past version of it (``player.rival``). A role with no rival refuses both.
        answers: The roles whose completions answer the problem (verified against its answer):
            the answer-agreement monitor compares them, two at a time.
        deploy: How the trained policies answer a problem at evaluation and deployment:
            ``single`` (each policy alone), ``cascade`` (one drafts, another answers after reading
            the draft's summary: Agon), ``graph`` (the game's own: its ``answer``).
        metrics: The game's own per-step metrics (the names it logs), for its docs and tests.

    Raises:
        ValueError: a name that is empty, repeated, ``base``, a snapshot slot's, or not an
            identifier; a role named by ``first_stage``, ``rivals`` or ``answers`` that is not one
            of ``roles``; an unknown ``deploy``.
    """

    policies: tuple[str, ...]
    roles: tuple[str, ...]
    first_stage: str | None = None
    rivals: Mapping[str, str] = field(default_factory=dict)
    answers: tuple[str, ...] = ()
    deploy: Deploy = "single"
    metrics: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        for what, names in (("policies", self.policies), ("roles", self.roles)):
            if not names:
                raise ValueError(f"GameSpec.{what} is empty: a game has at least one")
            if len(set(names)) != len(names):
                raise ValueError(f"GameSpec.{what} repeats a name: {list(names)}")
            for name in names:
                if not isinstance(name, str) or not _NAME.match(name) or name == BASE:
                    raise ValueError(
                        f"GameSpec.{what}: {name!r} is not a usable name (letters, digits and _, starting with a "
                        f"letter; not {BASE!r})"
                    )
        for name in self.policies:
            if name.endswith(SLOT_SUFFIXES):
                raise ValueError(
                    f"GameSpec.policies: {name!r} ends like a snapshot slot ({', '.join(SLOT_SUFFIXES)})"
                )
        named = [("first_stage", self.first_stage)] if self.first_stage is not None else []
        named += [("rivals key", r) for r in self.rivals] + [
            ("rivals value", r) for r in self.rivals.values()
        ]
        named += [("answers", r) for r in self.answers]
        for what, role in named:
            if role not in self.roles:
                raise ValueError(f"GameSpec.{what}: {role!r} is not one of the roles {list(self.roles)}")
        if self.deploy not in DEPLOYS:
            raise ValueError(f"GameSpec.deploy must be one of {DEPLOYS}, got {self.deploy!r}")
