"""Dynamic sampling (after DAPO): every problem a step trains on has a group that carries a gradient.

A group whose rewards all agree — every draft right, or every draft wrong — has zero group
advantage: its rows cost a forward and a backward and move nothing. As a policy learns, more of
each batch is such groups, and the effective batch shrinks. DAPO (Yu et al., 2025) drops them and
samples more problems until the batch is full again. Here, once the game has played a step
(``after_play``, before the advantages):

1. a problem none of whose role groups has any spread of rewards is skipped: its rows leave every
   role of the record, with its summaries and opponents (:func:`~agon_lightning.games.selection.select_problems`);
2. the game plays again on replacement problems — a whole batch of training problems at a time,
   so a refill costs what the step's first play cost — and the informative ones join the record,
   until it has as many problems as it started with or ``max_extra_draws`` plays are spent.

A game qualifies when every role has exactly P·N rows in problem-major order, N =
``grpo.num_generations`` (Agon, GRPO, prover–verifier, debate, zero-sum; not challenger-solver,
whose solver answers each posed problem m times): the rows are checked every step and the first
step of a game that does not qualify stops the run, naming it. In zero-sum, whose advantages are
each role's reward minus a moving baseline (not group-relative), a group that agrees still moves
the policy: there the feature changes which problems a batch holds, not which rows carry a gradient.

The replacements are a pure function of the seed, the step, the draw and the process's rank over
the datamodule's ``train_problems``, so a resumed run plays the refills an unbroken one played; the
feature's counters go into checkpoints. The refills call ``game.play`` directly: the other
features' ``before_play`` and ``after_play`` run once a step, for the first play (the adapters'
snapshots are kept once; the version has not changed). Two features cannot be made to agree with
that and are refused when the module is built: the league (its draw and win counts are a play's) and
sampling ahead (the refills would sample at another version than the drafts they join).

Several processes: a refill is played by every process or by none (one collective per draw decides),
and every process then trains as many problems as the one that found the fewest (one collective per
step), so the update's backward passes line up. When no process found any informative problem, the
step's first play is trained on as it is, as it would be without the feature.

Logged each step: ``dynamic/skipped_share`` (share of the first play's problems skipped),
``dynamic/extra_draws`` (plays spent on refills), ``dynamic/kept`` (informative problems trained
on), ``dynamic/first_draw_accuracy`` (the first role's accuracy over the first play, before any
problem is skipped: what ``train/<role>/accuracy`` would be without the feature; that one is over
the rows trained on), and the run's totals ``dynamic/extra_draws_total`` and ``dynamic/skipped_total``.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from agon_lightning.game.advantages import group_advantages
from agon_lightning.game.types import Problem
from agon_lightning.games.records import StepRecord
from agon_lightning.games.selection import cat_records, select_problems
from agon_lightning.training.features.ahead import SampleAhead
from agon_lightning.training.features.base import Feature
from agon_lightning.training.features.league import LeaguePlay

OPTION = "model.features' DynamicSampling"


@dataclass
class DynamicSamplingOptions:
    """Dynamic sampling's settings (the ``init_args`` of ``DynamicSampling`` in ``model.features``).

    Attributes:
        max_extra_draws: Extra plays a step may spend on replacement problems (0: off).
        seed: Seed of the replacements' draws; ``None``: the run's seed, as ``seed_everything``
            set it (0 when nothing set one).
    """

    max_extra_draws: int = 0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.max_extra_draws < 0:
            raise ValueError(f"{OPTION}.max_extra_draws must be >= 0 (0: off), got {self.max_extra_draws}")


# ---------------------------------------------------------------------------------------------
# Pure pieces
# ---------------------------------------------------------------------------------------------
def check_rows(record: StepRecord, n: int, game: str) -> None:
    """Raise ``ValueError`` unless every role has P·N rows in groups of N (naming the game and the option)."""
    count = len(record.problems)
    for role in record.roles:
        rows, size = len(role.rollouts), role.group_size or n
        if rows != count * n or size != n:
            raise ValueError(
                f"step {record.step}: {OPTION} skips a problem by its group of grpo.num_generations={n} rows in "
                f"every role, but the game {game}'s role {role.role!r} has {rows} rows in groups of {size} for "
                f"{count} problems (not {count} x {n}); remove DynamicSampling from model.features for this game"
            )


def informative(record: StepRecord, n: int) -> Tensor:
    """``[P]`` whether some role's group of the problem has rewards that differ (a group that carries a gradient)."""
    useful = torch.zeros(len(record.problems), dtype=torch.bool)
    for role in record.roles:
        _, zero_std = group_advantages(role.rewards.detach().float().cpu(), n)
        useful |= ~zero_std
    return useful


def replacement_indices(seed: int, step: int, draw: int, rank: int, pool: int, count: int) -> list[int]:
    """Which of ``pool`` training problems the ``draw``-th refill of ``step`` plays on process ``rank``.

    ``count`` distinct ones when the pool has that many; a pure function of its arguments.
    """
    rng = random.Random(f"dynamic:{seed}:{step}:{draw}:{rank}")
    return rng.sample(range(pool), count) if count <= pool else rng.choices(range(pool), k=count)


def become(record: StepRecord, other: StepRecord) -> None:
    """Make ``record`` hold ``other``'s fields (the module keeps the object it handed the features)."""
    for f in fields(StepRecord):
        setattr(record, f.name, getattr(other, f.name))


# ---------------------------------------------------------------------------------------------
# The feature
# ---------------------------------------------------------------------------------------------
class DynamicSampling(Feature):
    """Skip problems whose groups all agree and play replacements (see the module's docstring).

    Args:
        max_extra_draws: Extra plays a step may spend on replacement problems (0: off).
        seed: Seed of the replacements' draws; ``None``: the run's seed.
    """

    option = "model.features (DynamicSampling)"

    def __init__(self, max_extra_draws: int = 0, seed: int | None = None) -> None:
        self.options = DynamicSamplingOptions(max_extra_draws, seed)
        self.extra_draws = 0
        """Refills played so far in the run (saved in checkpoints)."""
        self.skipped = 0
        """Problems of first plays skipped so far in the run (saved in checkpoints)."""
        self._metrics: dict[str, float] = {}

    @property
    def active(self) -> bool:
        return self.options.max_extra_draws > 0

    @property
    def seed(self) -> int:
        """The draws' seed: ``seed``, else the run's (Lightning's ``seed_everything`` records it)."""
        if self.options.seed is not None:
            return self.options.seed
        return int(os.environ.get("PL_GLOBAL_SEED", 0))

    def composes(self, features: list[Feature]) -> None:
        """Refuse the league and sampling ahead: the refills play the game again within a step."""
        if not self.active:
            return
        k = self.options.max_extra_draws
        for f in features:
            if isinstance(f, LeaguePlay) and f.active:
                raise ValueError(
                    f"{OPTION}(max_extra_draws={k}) plays the game again within a step, but "
                    f"model.league.probability={f.league.probability} has roles face past rivals, whose draw and "
                    "win counts are one play's; set model.league.probability=0, or max_extra_draws=0"
                )
            if isinstance(f, SampleAhead) and f.active:
                raise ValueError(
                    f"{OPTION}(max_extra_draws={k}) plays the game again within a step, but "
                    f"rollout.max_staleness={f.max_staleness} samples the first stage a step ahead: the refills "
                    "would sample at another version than the drafts they join; set rollout.max_staleness=0, or "
                    "max_extra_draws=0"
                )

    def setup(self, host: Any) -> None:
        """Refuse a fit whose datamodule has no ``train_problems``."""
        if not self.active:
            return
        k = self.options.max_extra_draws
        data = host.trainer.datamodule
        if host.trainer.state.fn == "fit" and (data is None or "train_problems" not in dir(data)):
            raise ValueError(
                f"{OPTION}(max_extra_draws={k}) plays replacement problems from the datamodule's train_problems, "
                f"but the fit's datamodule is {type(data).__name__}; give a ProblemDataModule (--data), or "
                "max_extra_draws=0"
            )

    def after_play(self, host: Any, record: StepRecord) -> None:
        if not self.active:
            return
        n, game, strategy = host.num_generations, host.game.name, host.trainer.strategy
        check_rows(record, n, game)
        count = len(record.problems)
        useful = informative(record, n)
        found = int(useful.sum())
        skipped = count - found
        parts = [select_problems(record, useful.nonzero().flatten().tolist())] if found else []
        draws = 0
        # one collective a draw: every process plays as many refills (sampling gathers sharded weights)
        while draws < self.options.max_extra_draws and strategy.reduce_boolean_decision(
            found < count, all=False
        ):
            draws += 1
            more = host.game.play(host, self.replacements(host, record.step, draws, count))
            check_rows(more, n, game)
            take = informative(more, n).nonzero().flatten().tolist()[: max(count - found, 0)]
            if take:
                parts.append(select_problems(more, take))
                found += len(take)
        trained = int(strategy.reduce(torch.tensor(float(found), device=host.device), reduce_op="min"))
        first_accuracy = float(record.draft.correct.mean())
        if trained:
            merged = cat_records(parts, host.tokenizer.pad_token_id)
            if trained < found:
                merged = select_problems(merged, list(range(trained)))
            merged.reward_terms, merged.league = record.reward_terms, record.league  # the first play's
            become(record, merged)
        self.extra_draws += draws
        self.skipped += skipped
        self._metrics = {
            "dynamic/skipped_share": skipped / count,
            "dynamic/extra_draws": float(draws),
            "dynamic/kept": float(trained),
            "dynamic/first_draw_accuracy": first_accuracy,
            "dynamic/extra_draws_total": float(self.extra_draws),
            "dynamic/skipped_total": float(self.skipped),
        }

    def replacements(self, host: Any, step: int, draw: int, count: int) -> list[Problem]:
        """The problems of ``step``'s ``draw``-th refill on this process (see :func:`replacement_indices`)."""
        pool = host.trainer.datamodule.train_problems
        return [
            pool[i] for i in replacement_indices(self.seed, step, draw, host.global_rank, len(pool), count)
        ]

    @contextlib.contextmanager
    def around_update(self, host: Any, record: StepRecord) -> Iterator[dict[str, float]]:
        metrics, self._metrics = self._metrics, {}
        yield metrics

    def state_dict(self) -> dict[str, Any]:
        return {"dynamic_sampling": {"extra_draws": self.extra_draws, "skipped": self.skipped}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("dynamic_sampling") or {}
        self.extra_draws = int(saved.get("extra_draws", 0))
        self.skipped = int(saved.get("skipped", 0))
