"""Held-out evaluation of the pair as it deploys: each policy alone, the base, the cascades.

Greedy decoding, one sample per problem: pass@1. A cascade ``cascade_ab`` is the deployed
pipeline — ``alpha`` drafts from the plain prompt, ``beta`` reads the draft's summary and
gives the final answer; ``cascade_ba`` swaps them. ``moa`` (on request) is the same pipeline
with the untrained base in both stages: a Mixture-of-Agents pass, the reference any trained
pair has to beat. Lengths are completion tokens of the stage that produced the answer.

A held-out problem may name a *split* in its metadata (``metadata["split"] = "hard"``, as
:class:`~agon_lightning.data.reasoning_gym.ReasoningGymDataModule` does for its hard set): its
results are reported apart, as ``val/hard/KEY/pass@1``. Every problem's outcome under every
policy of the last evaluation is kept (:attr:`CascadeEvaluator.last_outcomes`) for paired
comparisons between runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torchmetrics import MeanMetric

from agon_lightning.pipeline import MixedPlayer, challenge_prompts
from agon_lightning.rollout import RolloutBatch
from agon_lightning.types import Problem, Verdict

ADAPTER_KEY = {"alpha": "a", "beta": "b"}
SPLIT = "split"  # Problem.metadata key naming a held-out split; absent: the main one


def split_of(problem: Problem) -> str:
    """The held-out split a problem belongs to (``""``: the main one)."""
    return str(problem.metadata.get(SPLIT, ""))


def cascade_pairs(adapters: tuple[str, ...], game: str) -> list[tuple[str, str, str]]:
    """``(metric key, drafter, answerer)`` for every cascade the run can deploy."""
    if game == "grpo":
        return []
    return [
        (f"cascade_{ADAPTER_KEY[d]}{ADAPTER_KEY[c]}", d, c)
        for d in adapters
        for c in adapters
        if d != c or len(adapters) == 1
    ]


class CascadeEvaluator(nn.Module):
    """Accumulates pass@1 and length per policy and cascade with torchmetrics.

    A ``nn.Module`` so its metric states follow the LightningModule's device and are
    reduced across ranks by torchmetrics.
    """

    def __init__(self, adapters: tuple[str, ...], game: str, moa: bool = False) -> None:
        super().__init__()
        self.adapters = adapters
        self.cascades = cascade_pairs(adapters, game)
        if moa:  # the base drafts, the base answers after reading the summary
            self.cascades.append(("moa", "base", "base"))
        self.keys = ["base", *adapters, *(key for key, _, _ in self.cascades)]
        self.metrics = nn.ModuleDict(
            {f"{key}__{stat}": MeanMetric() for key in self.keys for stat in ("pass@1", "length")}
        )
        self.history: list[tuple[int, dict[str, float]]] = []
        self.last_outputs: list[dict[str, Any]] = []
        self.outcomes: list[dict[str, Any]] = []  # this evaluation's, problem by problem
        self.last_outcomes: list[dict[str, Any]] = []  # the last finished evaluation's
        self._splits: set[str] = set()

    @property
    def deployed_key(self) -> str:
        """The policy a user would deploy: the first trained cascade, else the single adapter."""
        return next((key for key, drafter, _ in self.cascades if drafter != "base"), self.adapters[0])

    def _metric(self, split: str, key: str, stat: str) -> MeanMetric:
        """The metric of ``key``'s ``stat`` on ``split``, created on first use for a named split."""
        name = f"{split}__{key}__{stat}" if split else f"{key}__{stat}"
        if name not in self.metrics:
            self.metrics[name] = MeanMetric().to(self.metrics[f"{key}__{stat}"].device)
        return self.metrics[name]

    def _add(self, key: str, correct: list[bool], lengths: torch.Tensor, splits: list[str]) -> None:
        for split in dict.fromkeys(splits):
            rows = [i for i, s in enumerate(splits) if s == split]
            pass_at_1, length = self._metric(split, key, "pass@1"), self._metric(split, key, "length")
            pass_at_1.update(
                torch.tensor([correct[i] for i in rows], dtype=torch.float32, device=pass_at_1.device)
            )
            length.update(lengths[rows].float().to(length.device))
            self._splits.add(split)

    def _generate(
        self, module: MixedPlayer, jobs: list[tuple[str, str, list[str]]], problems: list[Problem]
    ) -> dict[str, tuple[RolloutBatch, list[Verdict]]]:
        """Run every ``(key, adapter, prompts)`` job in one mixed-adapter generate; score each key."""
        adapters = [None if adapter == "base" else adapter for _, adapter, prompts in jobs for _ in prompts]
        rb = module.sample_mixed(adapters, [p for _, _, prompts in jobs for p in prompts], greedy=True)
        results = {}
        for i, (key, _, _) in enumerate(jobs):
            part = rb.select(slice(i * len(problems), (i + 1) * len(problems)))
            verdicts = module.verifier.verify_batch(part.texts, problems)
            self._add(key, [v.correct for v in verdicts], part.lengths.cpu(), [split_of(p) for p in problems])
            results[key] = (part, verdicts)
        return results

    @torch.no_grad()
    def update(self, module: MixedPlayer, problems: list[Problem]) -> None:
        # Two generate calls per batch, whatever the number of policies: every policy drafts in
        # one, every cascade answers in the other (one adapter per row).
        prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems]
        outputs = self._generate(module, [(key, key, prompts) for key in ["base", *self.adapters]], problems)
        second_stage = []
        for key, drafter, answerer in self.cascades:
            _, second = challenge_prompts(module, problems, outputs[drafter][0])
            second_stage.append((key, answerer, second))
        if second_stage:
            outputs.update(self._generate(module, second_stage, problems))
        self.last_outputs = [
            {key: {"text": rb.texts[i], "correct": v[i].correct} for key, (rb, v) in outputs.items()}
            for i in range(len(problems))
        ]
        self.outcomes += [
            {"question": p.question, "split": split_of(p),
             **{key: bool(v[i].correct) for key, (_, v) in outputs.items()},
             **{f"{key}/length": int(rb.lengths[i]) for key, (rb, _) in outputs.items()}}
            for i, p in enumerate(problems)
        ]  # fmt: skip

    def compute(self) -> dict[str, float]:
        """``val/[SPLIT/]KEY/pass@1`` and ``…/length`` for every key and split seen; resets the metrics."""
        out = {}
        for name, metric in self.metrics.items():
            *split, key, stat = name.split("__")
            prefix = f"val/{split[0]}/" if split else "val/"
            if (split[0] if split else "") in self._splits:
                out[f"{prefix}{key}/{stat}"] = float(metric.compute())
            metric.reset()
        for split in sorted(self._splits):
            prefix = f"val/{split}/" if split else "val/"
            out[f"{prefix}deployed/pass@1"] = out[f"{prefix}{self.deployed_key}/pass@1"]
            out[f"{prefix}deployed/length"] = out[f"{prefix}{self.deployed_key}/length"]
        self._splits = set()
        self.last_outcomes, self.outcomes = self.outcomes, []
        return out

    def run(self, module: MixedPlayer, batches: Iterable[list[Problem]]) -> dict[str, float]:
        for batch in batches:
            self.update(module, batch)
        return self.compute()
