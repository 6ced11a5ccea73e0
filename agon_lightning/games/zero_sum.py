"""Zero-sum self-play with role-conditioned advantages (after SPIRAL, "Self-Play on Zero-Sum Games
Incentivizes Reasoning via Multi-Agent Multi-Turn Reinforcement Learning").

One adapter plays both sides of a simple zero-sum game over the data's problems. The first side
answers each problem N times from the plain prompt; the second answers each of those after
reading its summary (as Agon's challenger does). The side that is right when the other is wrong
wins (+1, the other −1); a tie — both right, or both wrong — pays 0 to each.

One policy in two roles sees two reward streams of different means (the second, reading the
first, wins more often). SPIRAL's role-conditioned advantage estimation (RAE) keeps one baseline
per role, an exponential moving average of that role's mean reward, and subtracts it: each role
is judged against how that role usually does, not against a group mean. The baselines are the
game's state, saved in checkpoints, so a resumed run continues them exactly.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from agon_lightning.game.names import ALPHA
from agon_lightning.game.types import Problem
from agon_lightning.games.base import Game
from agon_lightning.games.player import Player
from agon_lightning.games.records import RoleRollout, StepRecord
from agon_lightning.games.spec import GameSpec
from agon_lightning.strategies import sum_over_processes

FIRST, SECOND = "first", "second"
METRICS = (
    "zs/first_win_rate",
    "zs/second_win_rate",
    "zs/tie_rate",
    "zs/baseline_first",
    "zs/baseline_second",
)


# ---------------------------------------------------------------------------------------------
# The math: pure functions of the rewards
# ---------------------------------------------------------------------------------------------
def zero_sum_payoff(mine: Tensor, theirs: Tensor) -> Tensor:
    """``[B]`` a side's payoff: +1 where it is right and the other wrong, −1 the other way round, 0 on a tie."""
    return mine.float() - theirs.float()


def outcome_rates(second: Tensor, first: Tensor) -> dict[str, float]:
    """The shares of games the first side won, the second won, and tied (they sum to 1)."""
    payoff = zero_sum_payoff(second, first)
    return {
        "zs/first_win_rate": float((payoff < 0).float().mean()),
        "zs/second_win_rate": float((payoff > 0).float().mean()),
        "zs/tie_rate": float((payoff == 0).float().mean()),
    }


def moving_average(baseline: float, mean: float, decay: float) -> float:
    """The baseline after one step: ``decay·b + (1 − decay)·mean``."""
    return decay * baseline + (1.0 - decay) * mean


def agreeing_groups(rewards: Tensor, group_size: int) -> Tensor:
    """``[G]`` 1.0 for each group of ``group_size`` consecutive rows whose rewards all agree."""
    if group_size < 1 or rewards.numel() % group_size:
        raise ValueError(f"{rewards.numel()} rewards do not split into groups of {group_size}")
    grouped = rewards.float().view(-1, group_size)  # [G, N]
    return (grouped.amax(dim=1) == grouped.amin(dim=1)).float()


# ---------------------------------------------------------------------------------------------
# The game
# ---------------------------------------------------------------------------------------------
class ZeroSumGame(Game):
    """Both sides of a zero-sum game played by one adapter, with role-conditioned advantages (SPIRAL).

    ``alpha`` plays both roles. ``first``: N answers of each problem from the plain prompt
    (``player.draft``, so sampling ahead can draw them a step early). ``second``: one answer
    per first-side answer, after reading its summary. With c the 0/1 correctness,
    ``r_second = c(second) − c(first)`` and ``r_first = −r_second`` in each row.

    Advantages (RAE): per role, ``A = r − b_role``, with ``b_role`` an exponential moving
    average of the role's mean reward (starting at 0), updated after the advantages are taken:
    ``b ← decay·b + (1 − decay)·mean(r)``. They are not normalised by a group's spread, so
    ``grpo.scale_std`` and ``grpo.std`` do not apply. The mean is over every process's rows, so
    the baselines are the same on all of them (and in the checkpoint rank 0 writes).

    At a step the league plays (``model.league``), the second reads a past version of alpha's
    first-side answers instead and is paid against them; the first is paid against the second's
    answer in its row, so that step's two payoffs need not sum to zero.

    Args:
        decay: The baselines' decay (SPIRAL's α), in [0, 1): the weight of the past.

    Raises:
        ValueError: ``decay`` outside [0, 1) (naming the value).
    """

    def __init__(self, decay: float = 0.95) -> None:
        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0.0 <= decay < 1.0:
            raise ValueError(
                f"decay must be a number in [0, 1) (the baselines' weight of the past), got {decay!r}"
            )
        self.decay = float(decay)
        self.baselines: dict[str, float] = {FIRST: 0.0, SECOND: 0.0}
        """Each role's baseline: the moving average of its mean reward (public; saved in checkpoints)."""
        # the baselines the last advantages were taken against (what the step logs)
        self._used: dict[str, float] = dict(self.baselines)

    @property
    def spec(self) -> GameSpec:
        return GameSpec(
            policies=(ALPHA,),
            roles=(FIRST, SECOND),
            first_stage=FIRST,
            rivals={SECOND: FIRST, FIRST: SECOND},
            answers=(FIRST, SECOND),
            deploy="single",
            metrics=METRICS,
        )

    def play(self, player: Player, problems: list[Problem]) -> StepRecord:
        n = player.num_generations
        first = player.draft(ALPHA, problems, role=FIRST)
        record = StepRecord(player.step, problems, first)
        grouped = [p for p in problems for _ in range(n)]
        read, faced = first.rollouts, first.correct  # what the second reads and is graded against
        rival = player.rival(SECOND, ALPHA)
        if rival is not None:
            record.rival_drafts = player.draft(rival.slot, problems, role=FIRST)
            record.rival_drafts.versions = torch.full_like(record.rival_drafts.versions, rival.version)
            read, faced = record.rival_drafts.rollouts, record.rival_drafts.correct
        record.summaries, prompts = player.read(grouped, read)
        answers = player.sample(ALPHA, prompts, 1)
        second = player.role(
            SECOND, ALPHA, answers, player.verify(answers.texts, grouped), torch.zeros(len(answers))
        )
        second.rewards = zero_sum_payoff(second.correct, faced)
        first.rewards = zero_sum_payoff(first.correct, second.correct)
        record.challenge = second
        record.reward_terms = outcome_rates(second.correct, faced)
        player.rival_played(rival, second.correct, faced)
        return record

    def advantages(self, roles: list[RoleRollout], num_generations: int, options: Any) -> Tensor:
        """RAE: each role's rewards minus its baseline; then each baseline takes the role's mean reward.

        Returns ``[groups]`` 1.0 for each group (``role.group_size`` rows, else N) whose rewards all agree.
        """
        zero_std = []
        self._used = dict(self.baselines)
        # Each role's reward sum and row count over every process: the baselines stay alike on all of them.
        sums = sum_over_processes(
            torch.tensor([[float(r.rewards.float().sum()), float(r.rewards.numel())] for r in roles], dtype=torch.float64)
        )  # fmt: skip
        for role, (total, rows) in zip(roles, sums.tolist(), strict=True):
            baseline = self.baselines[role.role]
            role.advantages = role.rewards.float() - baseline
            self.baselines[role.role] = moving_average(baseline, total / max(rows, 1.0), self.decay)
            zero_std.append(agreeing_groups(role.rewards, role.group_size or num_generations))
        return torch.cat(zero_std)

    def metrics(self, record: StepRecord) -> dict[str, float]:
        """The baselines this step's advantages were taken against."""
        return {f"zs/baseline_{role}": value for role, value in self._used.items()}

    def state_dict(self) -> dict[str, Any]:
        return {"baselines": dict(self.baselines)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state.get("baselines")
        if saved is None:
            return
        if set(saved) != set(self.baselines):
            raise ValueError(
                f"the checkpoint's ZeroSumGame baselines are for roles {sorted(saved)}, not {sorted(self.baselines)}"
            )
        self.baselines = {role: float(value) for role, value in saved.items()}
        self._used = dict(self.baselines)
