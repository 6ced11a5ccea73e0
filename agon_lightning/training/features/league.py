"""A league of past rivals: at some steps a role faces a past version of its rival.

Agon's risk is a pair that collapses into each other or cycles: each adapter learns against the
rival as it is now. Fictitious self-play trains against a mixture of past opponents instead
(AlphaStar's league). Here, at a step the league plays (probability ``league.probability``), the
challenger reads and is graded against drafts sampled from a frozen snapshot of the drafting
adapter as it was ``age`` updates ago; the drafter still samples its own drafts and trains on
them as usual (its reward never depends on the challenger). Snapshots are adapter-only, kept in
the run's :class:`~agon_lightning.adapters.snapshots.AdapterHistory` and sampled through the
drafter's ``_league`` slot (a vLLM engine or server receives it as one more versioned adapter).

Any game whose spec declares rivals (``GameSpec.rivals``: role → the role it faces) gets the
league: it asks ``player.rival(role, adapter)`` for the past version to face and reports how the
role did with ``player.rival_played``. ``league.roles`` chooses which roles it plays for (by
default every role with a rival that the game asks for). A game that declares no rivals is
refused at start; one that declares them but plays a league step without asking is stopped at
that step, naming it: the league is never a silent no-op.

Which past rival, among the versions kept (ages 1 … ``max_age``; fewer at the start):

- ``uniform``: each equally;
- ``recent``: weight 1/age;
- ``pfsp`` (prioritized fictitious self-play): weight (1 − w)^p, w the challenger's win rate
  against that version so far (a win: right where the draft was wrong; a tie: half), 0.5
  before any game, p = ``pfsp_power``: the rivals it beats least come most often.

The draw is a pure function of the seed and the step, so a resumed run draws what an
uninterrupted one drew; the win counts go into checkpoints. The seed is ``league.seed``, or by
default the run's own (``seed_everything``), so each seed of a sweep draws its own league.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from agon_lightning.adapters.snapshots import AdapterHistory, load_into, slot_of
from agon_lightning.games.base import Game
from agon_lightning.games.player import Rival
from agon_lightning.games.records import StepRecord
from agon_lightning.training.features.base import Feature

RULES = ("uniform", "recent", "pfsp")


@dataclass
class League:
    """Past rivals (``model.league``).

    Attributes:
        probability: Share of steps whose challenger faces a past drafter (0: off).
        max_age: The oldest rival, in updates (each adapter's last ``max_age`` versions are kept).
        rule: ``uniform`` | ``recent`` | ``pfsp`` (see the module's docstring).
        pfsp_power: p of ``pfsp``'s weight (1 − w)^p.
        seed: Seed of the per-step draws (whether the league plays, which rival); ``None``: the
            run's seed, as ``seed_everything`` set it (0 when nothing set one).
        roles: The roles that face past rivals, by the game's names; ``None``: every role the game
            declares a rival for.
    """

    probability: float = 0.0
    max_age: int = 10
    rule: str = "uniform"
    pfsp_power: float = 2.0
    seed: int | None = None
    roles: list[str] | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise ValueError(f"league.probability must be in [0, 1], got {self.probability}")
        if self.max_age < 1:
            raise ValueError(f"league.max_age must be >= 1 (updates), got {self.max_age}")
        if self.rule not in RULES:
            raise ValueError(f"league.rule must be one of {RULES}, got {self.rule!r}")
        if self.pfsp_power < 0:
            raise ValueError(f"league.pfsp_power must be >= 0, got {self.pfsp_power}")


def rival_weights(
    ages: list[int], rule: str, win_rates: list[float | None], power: float = 2.0
) -> list[float]:
    """Each past rival's weight (unnormalised) under ``rule``; ``win_rates[i]``: the challenger's against rival i."""
    if rule == "uniform":
        return [1.0] * len(ages)
    if rule == "recent":
        return [1.0 / a for a in ages]
    if rule == "pfsp":
        return [(1.0 - (0.5 if w is None else w)) ** power for w in win_rates]
    raise ValueError(f"league rule must be one of {RULES}, got {rule!r}")


def wins(challenge_correct: Tensor, draft_correct: Tensor) -> float:
    """The challenger's wins against the drafts it answered: 1 where it is right and the draft wrong, ½ on a tie."""
    b, a = challenge_correct.float(), draft_correct.float()
    return float(((b > a).float() + 0.5 * (b == a).float()).sum())


class LeaguePlay(Feature):
    """The league at work: which rival each step, and each role's record against each past version."""

    option = "model.league"

    def __init__(self, league: League | None) -> None:
        self.league = league or League()
        self.games: dict[str, dict[int, list[float]]] = {}  # rival's adapter → version → [wins, games]
        self._asked: set[str] = set()  # this step: the roles the game asked a rival for, and how it went
        self._metrics: dict[str, float] | None = None

    def check(self, game: Game) -> None:
        if not self.active:
            return
        rivals = game.spec.rivals
        if not rivals:
            raise ValueError(
                f"model.league has a role face past versions of its rival, but the game {game.name} declares no "
                "rivals (GameSpec.rivals), so no role can: set model.league.probability=0, or declare them"
            )
        unknown = [r for r in self.league.roles or () if r not in rivals]
        if unknown:
            raise ValueError(
                f"model.league.roles names {unknown}, which the game {game.name} declares no rival for "
                f"(GameSpec.rivals: {dict(rivals)})"
            )

    def plays(self, step: int) -> bool:
        """Whether the league plays at ``step`` (the draw's first number)."""
        return self.active and random.Random(f"{self.seed}:{step}").random() < self.league.probability

    def rival(self, host: Any, role: str, adapter: str) -> Rival | None:
        if not self.active or (self.league.roles is not None and role not in self.league.roles):
            return None
        self._asked.add(role)
        rival = self.draw(host.step, adapter, host.version, host.adapter_history)
        if rival is not None:
            _, state = host.adapter_history.at(rival.adapter, rival.version)
            load_into(host.policy, rival.slot, state)
            host.weights_updated([rival.slot])  # a sampling engine takes the slot's new weights
        return rival

    def rival_played(
        self, host: Any, rival: Rival | None, reader_correct: Tensor, rival_correct: Tensor
    ) -> None:
        if self.active:
            self._metrics = self.played(rival, reader_correct, rival_correct, host.version)

    def before_play(self, host: Any) -> None:
        self._asked, self._metrics = set(), None

    def after_play(self, host: Any, record: StepRecord) -> None:
        if not self.active:
            return
        if self.league.roles:  # every role listed must face a rival
            missing = sorted(set(self.league.roles) - self._asked)
            which = f"role(s) {missing} (model.league.roles)"
        else:  # some role must
            missing = [] if self._asked else ["any"]
            which = "any role"
        if self.plays(record.step) and missing:
            raise ValueError(
                f"step {record.step}: model.league plays this step, but the game {host.game.name} did not ask a rival "
                f"for {which} (player.rival): it declares rivals (GameSpec.rivals) it does not play against; ask for "
                "one, or set model.league.probability=0"
            )
        if self._asked and self._metrics is None:
            raise ValueError(
                f"step {record.step}: the game {host.game.name} asked for a rival but did not report how it went "
                "(player.rival_played)"
            )
        record.league = self._metrics or {}

    @property
    def active(self) -> bool:
        """Whether the league ever plays (``probability`` > 0)."""
        return self.league.probability > 0

    @property
    def depth(self) -> int:
        """How many past versions of each adapter the league reads (0 when off)."""
        return self.league.max_age if self.active else 0

    def slots(self, policies: tuple[str, ...]) -> dict[str, str]:
        """The snapshot slots the rivals are sampled through: slot → adapter (none when off)."""
        return {slot_of(a, "league"): a for a in policies} if self.active else {}

    @property
    def seed(self) -> int:
        """The draws' seed: ``league.seed``, else the run's (Lightning's ``seed_everything`` records it)."""
        if self.league.seed is not None:
            return self.league.seed
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    def win_rate(self, adapter: str, version: int) -> float | None:
        won, played = self.games.get(adapter, {}).get(version, (0.0, 0.0))
        return won / played if played else None

    def draw(self, step: int, drafter: str, version: int, history: AdapterHistory | None) -> Rival | None:
        """The rival at ``step`` (``None``: the league does not play), among the drafter's versions kept."""
        if not self.active or history is None:
            return None
        rng = random.Random(f"{self.seed}:{step}")
        if rng.random() >= self.league.probability:
            return None
        past = [v for v in history.versions(drafter) if v < version and version - v <= self.league.max_age]
        if not past:  # before the first update there is no past rival
            return None
        ages = [version - v for v in past]
        weights = rival_weights(
            ages, self.league.rule, [self.win_rate(drafter, v) for v in past], self.league.pfsp_power
        )
        if sum(weights) <= 0:  # pfsp with every rival beaten every time: uniform among them
            weights = [1.0] * len(past)
        chosen = rng.choices(past, weights)[0]
        return Rival(drafter, chosen, version - chosen)

    def played(
        self, rival: Rival | None, challenge_correct: Tensor, draft_correct: Tensor, version: int
    ) -> dict[str, float]:
        """Count the step's games against ``rival`` (``None``: the drafter now, at ``version``); the metrics to log.

        Once the league is on, every step logs every key (a key left out would repeat its last
        value in some loggers): the opponent's age is 0 when the challenger faced the drafter now.
        """
        if not self.active:
            return {}
        won, games = wins(challenge_correct, draft_correct), float(len(challenge_correct))
        if rival is not None:
            record = self.games.setdefault(rival.adapter, {}).setdefault(rival.version, [0.0, 0.0])
            record[0] += won
            record[1] += games
        metrics = {
            "league/played": float(rival is not None),
            "league/rival_age": 0.0 if rival is None else float(rival.age),
            "league/rival_version": float(version if rival is None else rival.version),
            "league/win_rate": won / games,  # this step's, against the drafts the challenge read
        }
        past = [r for by_version in self.games.values() for r in by_version.values()]
        if past:  # against every past rival so far
            metrics["league/past_win_rate"] = sum(r[0] for r in past) / sum(r[1] for r in past)
        return metrics

    def state_dict(self) -> dict[str, Any]:
        return {"league": {"games": self.games}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = (state.get("league") or {}).get("games", {})
        self.games = {a: {int(v): list(r) for v, r in g.items()} for a, g in saved.items()}
