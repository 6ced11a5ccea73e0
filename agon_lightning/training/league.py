"""A league of past rivals: the challenger sometimes answers a past drafter's drafts.

Agon's risk is a pair that collapses into each other or cycles: each adapter learns against the
rival as it is now. Fictitious self-play trains against a mixture of past opponents instead
(AlphaStar's league). Here, at a step the league plays (probability ``league.probability``), the
challenger reads and is graded against drafts sampled from a frozen snapshot of the drafting
adapter as it was ``age`` updates ago; the drafter still samples its own drafts and trains on
them as usual (its reward never depends on the challenger). Snapshots are adapter-only, kept in
the run's :class:`~agon_lightning.adapters.snapshots.AdapterHistory` and sampled through the
drafter's ``_league`` slot (a vLLM engine or server receives it as one more versioned adapter).

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

import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from agon_lightning.adapters.snapshots import AdapterHistory, load_into, slot_of
from agon_lightning.training.records import RoleRollout, rows_of

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
    """

    probability: float = 0.0
    max_age: int = 10
    rule: str = "uniform"
    pfsp_power: float = 2.0
    seed: int | None = None

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


@dataclass
class Rival:
    """The past drafter a step's challenger faces."""

    adapter: str
    version: int
    age: int

    @property
    def slot(self) -> str:
        return slot_of(self.adapter, "league")


class LeaguePlay:
    """The league at work: which rival each step, and the challenger's record against each."""

    def __init__(self, league: League | None, game: str) -> None:
        self.league = league or League()
        if self.active and game == "grpo":
            raise ValueError(
                "model.league has the challenger face past drafters, but game='grpo' has no challenger"
            )
        self.games: dict[str, dict[int, list[float]]] = {}  # drafting adapter → version → [wins, games]

    @property
    def active(self) -> bool:
        """Whether the league ever plays (``probability`` > 0)."""
        return self.league.probability > 0

    @property
    def depth(self) -> int:
        """How many past versions of each adapter the league reads (0 when off)."""
        return self.league.max_age if self.active else 0

    def slots(self, adapters: tuple[str, ...]) -> dict[str, str]:
        """The snapshot slots the rivals are sampled through: slot → adapter (none when off)."""
        return {slot_of(a, "league"): a for a in adapters} if self.active else {}

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
        return {"games": self.games}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.games = {a: {int(v): list(r) for v, r in g.items()} for a, g in state.get("games", {}).items()}


def sample_rival(player: Any, rival: Rival, history: AdapterHistory, problems: list[Any]) -> RoleRollout:
    """The past drafter's N drafts of each problem, verified (the module's sampling, through the rival's slot)."""
    _, state = history.at(rival.adapter, rival.version)
    load_into(player.policy, rival.slot, state)
    player.drafts.weights_updated(
        player.policy, [rival.slot]
    )  # a sampling engine takes the slot's new weights
    n = player.grpo.num_generations
    batch = player.sample(rival.slot, [player.prompts.draft_prompt(player.tokenizer, p) for p in problems], n)
    verdicts = player.verifier.verify_batch(batch.texts, [p for p in problems for _ in range(n)])
    return RoleRollout(
        rival.slot, batch, verdicts, torch.zeros(len(batch)), versions=rows_of(rival.version, len(batch))
    )


def load_past(history: AdapterHistory | None, league: LeaguePlay, state: dict[str, Any]) -> None:
    """Restore the adapters' past weights and the league's record from a checkpoint's ``agon`` state.

    Raises:
        ValueError: the run reads past weights (a ``self`` KL reference, a league) and the
            checkpoint holds none: resuming would read other weights than the run did.
    """
    saved = state.get("adapter_history")
    if history is None:
        if saved is not None:
            rank_zero_warn(
                "the checkpoint holds past adapter weights (model.kl's 'self' reference or model.league) "
                "and this run reads none: they are not used"
            )
        return
    if saved is None:
        raise ValueError(
            "this run reads past adapter weights (model.kl's 'self' reference or model.league), but the "
            "checkpoint holds none (it was written without either): resuming would read other weights than "
            "the run did"
        )
    history.load_state_dict(saved)
    if state.get("league") is not None:
        league.load_state_dict(state["league"])
