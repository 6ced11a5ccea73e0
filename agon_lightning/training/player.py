"""The module as a game's :class:`~agon_lightning.games.player.Player`: what a game may call.

:class:`Playing` is the part of :class:`~agon_lightning.training.module.AgonModule` a game sees:
sampling with any adapter, drafting (through the features: sampling ahead), verifying,
summaries, the league's rivals, the reward, and each role's rollouts stamped with the version.
"""

from __future__ import annotations

import contextlib
from types import SimpleNamespace
from typing import Any

from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor

from agon_lightning.adapters.policy import generating, sample_with
from agon_lightning.adapters.snapshots import is_slot
from agon_lightning.game.rewards import Outcomes, RoleRewards, cut_value
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.player import Rival
from agon_lightning.games.records import RoleRollout, correct_of, graded_of, rows_of
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.rollout.pipeline import challenge_prompts
from agon_lightning.strategies import gathered


class Playing:
    """The Player half of the module (a mixin: it reads the module's policy, rollout, components and features)."""

    policy: Any
    tokenizer: Any
    rollout: Any
    verifier: Any
    reward: Any
    features: Any
    game: Any
    grpo: Any
    agon_step: int
    policy_version: int
    _told_cut: bool

    @property
    def num_generations(self) -> int:
        return self.grpo.num_generations

    @property
    def step(self) -> int:
        """The game step being played (``agon_step``)."""
        return self.agon_step

    @property
    def version(self) -> int:
        """The policy version (``policy_version``): updates the adapters have taken."""
        return self.policy_version

    @property
    def adapter_history(self) -> Any:
        """Each adapter's last versions (public): what ``self`` references and the league read; ``None``: none kept."""
        return self.features.history

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Sample with ``adapter`` (``None`` = the base with adapters disabled)."""
        return sample_with(
            self.policy, self.rollout, self.tokenizer, adapter, prompts, num_samples, greedy, self.trainable,
            self._sampling_weights,
        )  # fmt: skip

    def sample_mixed(
        self, adapters: list[str | None], prompts: list[str], greedy: bool = False
    ) -> RolloutBatch:
        """One sample per prompt, prompt ``i`` with ``adapters[i]`` (``None`` = the base), in one batch."""
        with generating(self.policy), self._sampling_weights():
            return self.rollout.generate(
                self.policy, self.tokenizer, prompts, 1, greedy, adapter_names=adapters
            )

    def _sampling_weights(self) -> Any:
        """Around one rollout: the whole model gathered once under sharding, unless the backend keeps its own."""
        if self.rollout.keeps_own_weights:
            return contextlib.nullcontext()
        return gathered(self.policy)

    def draft(self, adapter: str, problems: list[Problem], role: str = "drafter") -> RoleRollout:
        n = self.num_generations
        prompts = [self.prompts.draft_prompt(self.tokenizer, p) for p in problems]

        def sample_now() -> RolloutBatch:
            return self.sample(adapter, prompts, n)

        ahead = (
            None if is_slot(adapter) else self.features.first("drafts", self, problems, adapter, sample_now)
        )
        drafts, version = ahead if ahead is not None else (sample_now(), self.version)
        verdicts = self.verify(drafts.texts, [p for p in problems for _ in range(n)])
        return RoleRollout(
            adapter, drafts, verdicts, correct_of(verdicts), role=role, versions=rows_of(version, len(drafts))
        )

    def verify(self, texts: list[str], problems: list[Problem]) -> list[Verdict]:
        verdicts = self.verifier.verify_batch(texts, problems)
        self.tell_if_cut(SimpleNamespace(graded=graded_of(verdicts)))  # what tell_if_cut reads of an outcome
        return verdicts

    def read(self, problems: list[Problem], drafts: RolloutBatch) -> tuple[list[str], list[str]]:
        return challenge_prompts(self, problems, drafts)

    def rival(self, role: str, adapter: str) -> Rival | None:
        rivals = self.game.spec.rivals
        if role not in rivals:
            raise ValueError(
                f"the game {self.game.name} asked for a rival of role {role!r}, which its spec declares none for "
                f"(GameSpec.rivals: {dict(rivals)})"
            )
        return self.features.first("rival", self, role, adapter)

    def rival_played(self, rival: Rival | None, reader_correct: Tensor, rival_correct: Tensor) -> None:
        self.features.call("rival_played", self, rival, reader_correct, rival_correct)

    def pay(self, outcomes: Outcomes) -> RoleRewards:
        return self.reward(outcomes)

    def role(
        self,
        role: str,
        adapter: str,
        rollouts: RolloutBatch,
        verdicts: list[Verdict],
        rewards: Tensor,
        **fields: Any,
    ) -> RoleRollout:
        if role not in self.game.spec.roles:
            raise ValueError(
                f"the game {self.game.name} has no role {role!r} (its roles: {list(self.game.spec.roles)})"
            )
        fields.setdefault("versions", rows_of(self.version, len(rollouts)))
        return RoleRollout(adapter, rollouts, verdicts, rewards, role=role, **fields)

    def weights_updated(self, adapters: list[str]) -> None:
        """Tell the rollout ``adapters`` changed (now, or once the features sampling ahead are done)."""
        if not self.features.any("weights_updated", self, adapters):
            self.rollout.on_weights_updated(self.policy, adapters)

    def tell_if_cut(self, outcome: Any) -> None:
        """Warn once when the reward functions' graded values (``outcome.graded``) meet a reward that pays
        only c: never a silent cut."""
        paid = getattr(self.reward, "pays_graded", False)  # a reward component typed by duck has no such flag
        value = None if self._told_cut or paid else cut_value(outcome)
        if value is None:
            return
        self._told_cut = True
        rule = getattr(self.verifier, "correct_if", None)
        threshold = getattr(self.verifier, "threshold", None)
        rule = f" (c = {rule} >= {threshold:g})" if rule and threshold is not None else ""
        rank_zero_warn(
            f"the reward functions returned {value:g}, not 0 or 1, but the reward ({type(self.reward).__name__}) "
            f"pays only the 0/1 correctness c{rule}; pay their values with --model.reward=graded (GradedReward), "
            "or return 0 or 1 from the function"
        )


def check_paid(verifier: Any, reward: Any) -> None:
    """Refuse a verifier graded by several reward functions or weights beside a reward that pays only c.

    Raises:
        ValueError: naming both components and the reward that pays the weighted sum.
    """
    if getattr(verifier, "graded", False) and not getattr(reward, "pays_graded", False):
        raise ValueError(
            f"the verifier ({type(verifier).__name__}) grades with several reward functions or weights, "
            f"but the reward ({type(reward).__name__}) pays only their 0/1 correctness; pay the weighted "
            "sum with --model.reward=graded (GradedReward), or give one function with weight 1"
        )
