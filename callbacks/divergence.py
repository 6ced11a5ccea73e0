"""Are the two policies still two? Divergence between the adapters, measured every k steps.

The paper keeps ``alpha`` and ``beta`` apart by heuristics (different inits, different
gradient streams) and says so: if they collapse into one policy, the game degenerates into
self-play or distillation. Every ``every_n_steps`` steps this logs, under ``divergence/``:

* ``delta_distance`` and ``delta_cosine``: Frobenius distance and cosine between the
  adapters' weight updates ΔW = s·B·A, summed over every LoRA module, and each adapter's
  ``{name}_delta_norm``. They come from r×r Gram matrices; no ΔW is ever formed. The cosine
  is left out while an adapter's ΔW is 0 (alpha's, at the start): it has no angle;
* ``symmetric_kl``: KL(α‖β) + KL(β‖α) of the next-token distributions (temperature 1),
  averaged over the tokens of a fixed probe set, and ``kl_{name}_base``: KL(adapter‖base)
  on the same tokens (left out if the probe completions hold no token);
* ``answer_agreement``: the share of draft/challenge pairs, over the steps since the last
  measurement, whose final answers are equal; ``copy_rate``: equal and both wrong. Only where
  both roles answer the problem (the game's ``GameSpec.answers``): a verifier's yes/no is not an answer.

The probe set is the first ``num_probes`` held-out problems' draft prompts, each followed by
the base model's greedy completion: built once, so every measurement reads the same tokens.
After ``warmup_steps``, a ``symmetric_kl`` under ``min_symmetric_kl`` or a ``delta_cosine``
over ``max_delta_cosine`` is a collapse: a warning, ``divergence/collapsed`` = 1 and, with
``stop_on_collapse``, a stop after ``patience`` collapsed measurements in a row.
"""

from __future__ import annotations

import math
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn
from torch import Tensor, nn

from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.policy import (
    adapter_parameters,
    completion_hidden_states,
    generating,
    logit_head,
    output_weight,
    using,
)
from agon_lightning.game.names import BASE
from agon_lightning.game.text import extract_answer
from agon_lightning.game.types import Verdict
from agon_lightning.infra.logprobs import LogitHead
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.strategies import full_tensors, whole_parameter

from .protocol import AgonModuleView
from .run_files import log_step_metrics

LoraFactors = tuple[Tensor, Tensor, float]  # A [r, in], B [out, r], scale


# ---------------------------------------------------------------------------------------------
# Weights: the adapters' ΔW
# ---------------------------------------------------------------------------------------------
def lora_factors(
    model: nn.Module, adapter: str, weights: dict[str, Tensor] | None = None
) -> dict[str, LoraFactors]:
    """``{module name: (A, B, scale)}`` of every LoRA layer of ``adapter``.

    Args:
        weights: Whole copies of the LoRA weights by parameter name, to read instead of the
            model's own (which are shards under FSDP2 and ZeRO-3).
    """
    weights = weights or {}
    factors = {}
    for name, module in model.named_modules():
        if peft.is_lora_layer(module) and peft.has_adapter(module, adapter):
            part = peft.lora_part(module, adapter)
            factors[name] = (
                weights.get(f"{name}.lora_A.{adapter}.weight", part.a.weight),
                weights.get(f"{name}.lora_B.{adapter}.weight", part.b.weight),
                float(part.scaling),
            )
    return factors


def delta_inner(x: LoraFactors, y: LoraFactors) -> float:
    """⟨s₁B₁A₁, s₂B₂A₂⟩_F = s₁s₂ Σ (B₁ᵀB₂) ⊙ (A₁A₂ᵀ), in float64."""
    (a1, b1, s1), (a2, b2, s2) = x, y
    gram_b = b1.detach().double().T @ b2.detach().double()  # [r1, r2]
    gram_a = a1.detach().double() @ a2.detach().double().T  # [r1, r2]
    return s1 * s2 * float((gram_b * gram_a).sum())


def delta_stats(
    model: nn.Module, adapters: tuple[str, ...], weights: dict[str, Tensor] | None = None
) -> dict[str, float]:
    """Each adapter's ‖ΔW‖ and, for two adapters, the distance and cosine between their ΔW.

    ``weights``: whole LoRA weights by parameter name (see :func:`lora_factors`).
    """
    factors = {n: lora_factors(model, n, weights) for n in adapters}
    squared = {n: sum(delta_inner(f, f) for f in factors[n].values()) for n in adapters}
    out = {f"{n}_delta_norm": math.sqrt(squared[n]) for n in adapters}
    if len(adapters) == 2:
        a, b = adapters
        cross = sum(
            delta_inner(factors[a][m], factors[b][m]) for m in factors[a] if m in factors[b]
        )  # fixed order
        out["delta_distance"] = math.sqrt(max(squared[a] + squared[b] - 2 * cross, 0.0))
        norms = math.sqrt(squared[a] * squared[b])
        if norms > 0:  # alpha's ΔW is 0 at init: no angle, no value (not a cosine of 0)
            out["delta_cosine"] = cross / norms
    return out


# ---------------------------------------------------------------------------------------------
# Behaviour: next-token distributions and answers
# ---------------------------------------------------------------------------------------------
def mean_token_kls(
    hidden: dict[str, Tensor],
    weight: Tensor,
    mask: Tensor,
    pairs: list[tuple[str, str, str]],
    head: LogitHead = LogitHead(),
) -> dict[str, float]:
    """Mean over the tokens in ``mask`` of KL(p‖q) for each ``(name, p, q)`` of ``pairs``; ``{}`` without a token.

    Args:
        hidden: policy → ``[B, T, H]`` final hidden states at the predicting positions.
        weight: ``[V, H]`` output embeddings.
        mask: ``[B, T]`` 1 on the tokens to average over.
        pairs: ``(metric name, policy p, policy q)``.
        head: The model's logit scaling and soft-capping.
    """
    count = int(mask.sum())
    if not count:  # no token to average over: undefined, not 0 (which would read as a collapse)
        return {}
    totals = dict.fromkeys((name for name, _, _ in pairs), 0.0)
    for row in range(mask.shape[0]):  # one row's [T, V] logits at a time
        keep = mask[row].bool()
        logp = {
            k: torch.log_softmax(head.apply((h[row][keep] @ weight.T).float()), dim=-1)
            for k, h in hidden.items()
        }
        for name, p, q in pairs:
            totals[name] += float((logp[p].exp() * (logp[p] - logp[q])).sum())
    return {name: total / count for name, total in totals.items()}


def final_answer(text: str, verdict: Verdict) -> str | None:
    """The answer the verifier read (else the text's last answer), whitespace-normalised."""
    answer = verdict.extracted if verdict.extracted is not None else extract_answer(text)
    return None if answer is None else " ".join(answer.split())


def answer_counts(record: Any) -> tuple[int, int, int]:
    """``(agreeing pairs, copied wrong pairs, pairs)`` of a step's drafts and challenges."""
    draft, challenge = record.draft, record.challenge
    agree = copied = 0
    for i in range(len(challenge.verdicts)):
        a = final_answer(draft.rollouts.texts[i], draft.verdicts[i])
        b = final_answer(challenge.rollouts.texts[i], challenge.verdicts[i])
        if a is not None and a == b:
            agree += 1
            copied += not (draft.verdicts[i].correct or challenge.verdicts[i].correct)
    return agree, copied, len(challenge.verdicts)


# ---------------------------------------------------------------------------------------------
# The callback
# ---------------------------------------------------------------------------------------------
class DivergenceMonitor(L.Callback):
    """Logs ``divergence/*`` every ``every_n_steps`` and warns (or stops) on collapse.

    Args:
        every_n_steps: Measure after steps 0, k, 2k, ...
        num_probes: Held-out prompts in the fixed probe set.
        min_symmetric_kl: Collapse when the symmetric KL falls below this (``None``: off).
        max_delta_cosine: Collapse when the ΔW cosine rises above this (``None``: off).
        warmup_steps: No collapse check before this step (both start near the base).
        stop_on_collapse: Stop training after ``patience`` collapsed measurements in a row.
        patience: See ``stop_on_collapse``.
    """

    def __init__(
        self,
        every_n_steps: int = 10,
        num_probes: int = 8,
        min_symmetric_kl: float | None = 1e-4,
        max_delta_cosine: float | None = 0.99,
        warmup_steps: int = 20,
        stop_on_collapse: bool = False,
        patience: int = 1,
    ) -> None:
        if every_n_steps < 1 or num_probes < 1 or patience < 1:
            raise ValueError(
                f"every_n_steps, num_probes and patience must be >= 1, got {every_n_steps}, {num_probes}, {patience}"
            )
        self.every_n_steps = every_n_steps
        self.num_probes = num_probes
        self.min_symmetric_kl = min_symmetric_kl
        self.max_delta_cosine = max_delta_cosine
        self.warmup_steps = warmup_steps
        self.stop_on_collapse = stop_on_collapse
        self.patience = patience
        self._probes: RolloutBatch | None = None
        # Carried across a resume (state_dict), so a resumed run logs what an unbroken one does.
        self._counts = [0, 0, 0]  # agreeing, copied, pairs since the last measurement
        self._collapsed_in_a_row = 0

    def state_dict(self) -> dict[str, Any]:
        return {"counts": list(self._counts), "collapsed_in_a_row": self._collapsed_in_a_row}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._counts = list(state_dict["counts"])
        self._collapsed_in_a_row = int(state_dict["collapsed_in_a_row"])

    def _probe_batch(self, trainer: L.Trainer, pl_module: AgonModuleView) -> RolloutBatch:
        if self._probes is None:
            problems = list(
                getattr(trainer.datamodule, "val_problems", None) or pl_module.last_record.problems
            )
            prompts = [
                pl_module.prompts.draft_prompt(pl_module.tokenizer, p) for p in problems[: self.num_probes]
            ]
            self._probes = pl_module.sample(None, prompts, 1, greedy=True)
        return self._probes

    def kls(self, trainer: L.Trainer, pl_module: AgonModuleView) -> dict[str, float]:
        """``kl_{name}_base`` for each adapter and, for two adapters, ``symmetric_kl``."""
        rb = self._probe_batch(trainer, pl_module)
        policy, names = pl_module.policy, pl_module.adapter_names
        trainable = [p for n in names for p in adapter_parameters(policy, n)]
        args = (rb.prompt_ids, rb.prompt_mask, rb.completion_ids, rb.completion_mask)
        with generating(policy):
            hidden = {}
            for name in [None, *names]:
                with using(policy, name, trainable):
                    hidden[name or BASE] = completion_hidden_states(policy, *args)
        pairs = [(f"kl_{n}_{BASE}", n, BASE) for n in names]
        if len(names) == 2:
            pairs += [("kl_ab", names[0], names[1]), ("kl_ba", names[1], names[0])]
        head = whole_parameter(policy, output_weight(policy))  # a shard under ZeRO-3: every rank gathers
        out = mean_token_kls(hidden, head, rb.completion_mask, pairs, logit_head(policy))
        if len(names) == 2 and out:
            out["symmetric_kl"] = out.pop("kl_ab") + out.pop("kl_ba")
        return out

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: AgonModuleView, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        record = pl_module.last_record
        if record is None:
            return
        # Agreement compares two answers to the problem: a second role that judges the first (yes/no) has none.
        answering = set(pl_module.game.spec.answers)
        if record.challenge is not None and {record.draft.role, record.challenge.role} <= answering:
            self._counts = [c + n for c, n in zip(self._counts, answer_counts(record))]
        if record.step % self.every_n_steps:
            return
        adapters = full_tensors(pl_module.policy)  # whole on every rank (a collective under sharding)
        metrics = {
            **delta_stats(pl_module.policy, pl_module.adapter_names, adapters),
            **self.kls(trainer, pl_module),
        }
        agree, copied, pairs = self._counts
        if pairs:
            metrics.update(answer_agreement=agree / pairs, copy_rate=copied / pairs)
        self._counts = [0, 0, 0]
        if "symmetric_kl" in metrics:
            metrics["collapsed"] = float(self._check_collapse(trainer, record.step, metrics))
        log_step_metrics(trainer, {f"divergence/{k}": v for k, v in metrics.items()}, record.step)

    def _check_collapse(self, trainer: L.Trainer, step: int, metrics: dict[str, float]) -> bool:
        reasons = []
        if self.min_symmetric_kl is not None and metrics["symmetric_kl"] < self.min_symmetric_kl:
            reasons.append(
                f"symmetric KL {metrics['symmetric_kl']:.3g} < min_symmetric_kl={self.min_symmetric_kl}"
            )
        cosine = metrics.get("delta_cosine")  # none while an adapter has not moved
        if self.max_delta_cosine is not None and cosine is not None and cosine > self.max_delta_cosine:
            reasons.append(f"ΔW cosine {cosine:.4f} > max_delta_cosine={self.max_delta_cosine}")
        if step < self.warmup_steps or not reasons:
            self._collapsed_in_a_row = 0
            return False
        self._collapsed_in_a_row += 1
        stopping = self.stop_on_collapse and self._collapsed_in_a_row >= self.patience
        rank_zero_warn(
            f"alpha and beta are collapsing toward each other at step {step}: {'; '.join(reasons)}."
            + (" Stopping (stop_on_collapse)." if stopping else "")
        )
        if stopping:
            trainer.should_stop = True
        return True
