"""Held-out evaluation of the pair as it deploys: each policy alone, the base, the cascades.

Greedy decoding, one sample per problem: pass@1. A cascade ``cascade_ab`` is the deployed
pipeline — ``alpha`` drafts from the plain prompt, ``beta`` reads the draft's summary and
gives the final answer; ``cascade_ba`` swaps them. Lengths are completion tokens of the
stage that produced the answer.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn
from torchmetrics import MeanMetric

from agon_lightning.types import Problem

if TYPE_CHECKING:
    from agon_lightning.module import AgonModule

ADAPTER_KEY = {"alpha": "a", "beta": "b"}


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

    def __init__(self, adapters: tuple[str, ...], game: str) -> None:
        super().__init__()
        self.adapters = adapters
        self.cascades = cascade_pairs(adapters, game)
        self.keys = ["base", *adapters, *(key for key, _, _ in self.cascades)]
        self.metrics = nn.ModuleDict(
            {f"{key}__{stat}": MeanMetric() for key in self.keys for stat in ("pass@1", "length")}
        )
        self.history: list[tuple[int, dict[str, float]]] = []
        self.last_outputs: list[dict[str, Any]] = []

    @property
    def deployed_key(self) -> str:
        """The policy a user would deploy: the first cascade, else the single adapter."""
        return self.cascades[0][0] if self.cascades else self.adapters[0]

    def _add(self, key: str, correct: list[bool], lengths: torch.Tensor) -> None:
        device = self.metrics[f"{key}__pass@1"].device
        self.metrics[f"{key}__pass@1"].update(torch.tensor(correct, dtype=torch.float32, device=device))
        self.metrics[f"{key}__length"].update(lengths.float().to(device))

    @torch.no_grad()
    def update(self, module: AgonModule, problems: list[Problem]) -> None:
        prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems]
        drafts = {}
        for key in ["base", *self.adapters]:
            rb = module.sample(None if key == "base" else key, prompts, 1, greedy=True)
            verdicts = module.verifier.verify_batch(rb.texts, problems)
            self._add(key, [v.correct for v in verdicts], rb.lengths)
            drafts[key] = (rb, verdicts)
        for key, drafter, answerer in self.cascades:
            rb, _ = drafts[drafter]
            summaries = [
                module.summarizer.summarize(t, p, bool(tr))
                for t, p, tr in zip(rb.texts, problems, rb.truncated)
            ]
            second = [
                module.prompts.challenge_prompt(module.tokenizer, p, s) for p, s in zip(problems, summaries)
            ]
            final = module.sample(answerer, second, 1, greedy=True)
            verdicts = module.verifier.verify_batch(final.texts, problems)
            self._add(key, [v.correct for v in verdicts], final.lengths)
            drafts[key] = (final, verdicts)
        self.last_outputs = [
            {key: {"text": rb.texts[i], "correct": v[i].correct} for key, (rb, v) in drafts.items()}
            for i in range(len(problems))
        ]

    def compute(self) -> dict[str, float]:
        """``val/KEY/pass@1`` and ``val/KEY/length`` for every key; resets the metrics."""
        out = {}
        for name, metric in self.metrics.items():
            key, stat = name.split("__")
            out[f"val/{key}/{stat}"] = float(metric.compute())
            metric.reset()
        out["val/deployed/pass@1"] = out[f"val/{self.deployed_key}/pass@1"]
        return out

    def run(self, module: AgonModule, batches: Iterable[list[Problem]]) -> dict[str, float]:
        for batch in batches:
            self.update(module, batch)
        return self.compute()
