"""Held-out evaluation of the policies as they deploy: each adapter alone, the base, the cascades, the
game's answer graph — and what the paper leaves open: how two adapters' errors overlap, what the
cascade converts and breaks, and what the whole cascade costs.

Greedy decoding, one sample per problem: pass@1. Every adapter is scored alone under its own name
(``val/alpha/…``, ``val/judge/…``). A game that deploys as a cascade (``GameSpec.deploy``) is also
scored as every ordered pair of its adapters: ``cascade_ab`` — ``alpha`` drafts from the plain
prompt, ``beta`` reads the draft's summary and gives the final answer; ``cascade_ba`` swaps them,
``cascade_aa`` (one adapter: self-play, or GRPO with ``self_cascade``) reads its own draft, and
adapters of other names make ``cascade_<drafter>_<answerer>``. A game that deploys as a graph is
scored as ``game``: its own :meth:`~agon_lightning.games.base.Game.answer`, one final completion per
problem. ``moa`` (on request) is the cascade with the untrained base in both stages: a
Mixture-of-Agents pass. ``length`` is always the completion tokens of the stage that gave the
answer; the deployed key (:attr:`deployed_key`) is fixed before training, never chosen by the scores.

Per key and evaluation (``val/[SPLIT/]KEY/…``):

- ``pass@1``, ``length`` (mean), ``length/p50`` and ``length/p90``, ``cap_hit`` (the fraction of
  completions that reached ``max_new_tokens`` without stopping); ``cost/total_tokens`` (every
  token sampled for the answer: draft + challenger for a cascade, every stage of the game's graph,
  as a mean over the batch's problems) and ``cost/wall_s`` (seconds per problem: the batch's
  generation and summarising time for this key alone, over its problems; grading is not counted);
- cascades also: ``cost/draft_tokens``, ``cost/challenger_prompt_tokens`` (the second stage's
  prefill), ``cost/challenger_tokens``; the drafter's ``draft/length/p50``, ``draft/length/p90``
  and ``draft/cap_hit`` (the length stats above are the answering challenger's: length is
  measured per role); ``conversions`` and ``regressions`` (fractions of the
  problems whose draft was wrong and final right, or right and final wrong, so pass@1 of the
  cascade = the drafter's + conversions − regressions) and ``conversion_rate`` /
  ``regression_rate`` (the same over wrong, resp. right drafts);
- with exactly two adapters, ``val/[SPLIT/]overlap/jaccard`` (|W_α ∩ W_β| / |W_α ∪ W_β| of the two
  wrong sets) and ``…/overlap/beta_wrong_given_alpha_wrong`` (the second adapter's errors given the
  first's, whatever their names). A ratio with an empty denominator is left out, not logged as 0.

A held-out problem may name a *split* in its metadata (``metadata["split"] = "hard"``): its
results are reported apart, as ``val/hard/KEY/…``. Every problem's outcome under every policy of
the last evaluation is kept (:attr:`CascadeEvaluator.last_outcomes`, written as ``outcomes.jsonl``).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch
from torch import nn
from torchmetrics import CatMetric, MeanMetric

from agon_lightning.game.names import ALPHA, BASE, BETA
from agon_lightning.game.types import SPLIT, Problem  # SPLIT: also read from here
from agon_lightning.games.base import Game
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.rollout.pipeline import MixedPlayer, challenge_prompts
from agon_lightning.training.deployment import Deployment, graph_answer

ADAPTER_KEY = {ALPHA: "a", BETA: "b"}
GAME = "game"  # the key of a graph game's own answer
OVERLAP = "overlap"
DEPLOYED = "deployed"
MOA = "moa"
POLICY_STATS = ("pass@1", "length", "cost/total_tokens", "cost/wall_s", "cap_hit")
STAGE_TOKENS = ("cost/draft_tokens", "cost/challenger_prompt_tokens", "cost/challenger_tokens")
CASCADE_STATS = (*POLICY_STATS, *STAGE_TOKENS, "draft/cap_hit", "conversions", "regressions", "_draft_wrong")
# Length distributions, per role: stat whose every value is kept → the name its quantiles log under.
# ``length`` is the answering stage's (the policy alone, or a cascade's challenger); a cascade's
# drafter is ``draft/length``.
QUANTILED = {"length": "length", "cost/draft_tokens": "draft/length"}
QUANTILES = {"p50": 0.5, "p90": 0.9}
OVERLAP_STATS = ("_alpha_wrong", "_both_wrong", "_either_wrong")
# Derived ratios: name → (numerator, denominator), both stats of the same key and rows.
RATIOS = {
    "conversion_rate": ("conversions", "_draft_wrong"),
    "regression_rate": ("regressions", "_draft_right"),
    "jaccard": ("_both_wrong", "_either_wrong"),
    "beta_wrong_given_alpha_wrong": ("_both_wrong", "_alpha_wrong"),
}


def split_of(problem: Problem) -> str:
    """The held-out split a problem belongs to (``""``: the main one)."""
    return str(problem.metadata.get(SPLIT, ""))


def cascade_pairs(
    adapters: tuple[str, ...], deploy: str, self_cascade: bool = False
) -> list[tuple[str, str, str]]:
    """``(metric key, drafter, answerer)`` for every cascade the run can deploy.

    Two adapters: both orders. One adapter: ``cascade_aa`` (self-play always, GRPO with
    ``self_cascade``). ``self_cascade`` with two adapters adds each one's self-cascade.
    """
    pairs = (
        [(d, c) for d in adapters for c in adapters if d != c or len(adapters) == 1]
        if deploy == "cascade"
        else []
    )
    if self_cascade:
        pairs += [(d, d) for d in adapters if (d, d) not in pairs]
    return [(cascade_key(d, c), d, c) for d, c in pairs]


def cascade_key(drafter: str, answerer: str) -> str:
    """``cascade_ab`` for alpha → beta; ``cascade_<drafter>_<answerer>`` for adapters of other names."""
    if drafter in ADAPTER_KEY and answerer in ADAPTER_KEY:
        return f"cascade_{ADAPTER_KEY[drafter]}{ADAPTER_KEY[answerer]}"
    return f"cascade_{drafter}_{answerer}"


def ratio_metrics(means: dict[str, float]) -> dict[str, float]:
    """Each :data:`RATIOS` entry whose stats are in ``means`` and whose denominator is > 0.

    ``means`` holds one key's stats as means over the same rows, so a ratio of means is the ratio
    of counts; ``_draft_right`` is ``1 − _draft_wrong``.
    """
    if "_draft_wrong" in means:
        means = {**means, "_draft_right": 1.0 - means["_draft_wrong"]}
    return {
        name: means[num] / means[den]
        for name, (num, den) in RATIOS.items()
        if num in means and den in means and means[den] > 0
    }


def base_is_frozen(module: nn.Module) -> bool:
    """Whether no parameter outside the adapters trains (the base's outputs then never change)."""
    return not any(p.requires_grad for name, p in module.named_parameters() if "lora_" not in name)


class SampledTokens:
    """A player that passes every call on to ``player`` and counts the completion tokens ``sample`` draws:
    what a game's answer graph costs, whatever its stages."""

    def __init__(self, player: Any) -> None:
        self.player = player
        self.tokens = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.player, name)

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        batch = self.player.sample(adapter, prompts, num_samples, greedy)
        self.tokens += int(batch.lengths.sum())
        return batch


class CascadeEvaluator(nn.Module):
    """Accumulates every key's stats with torchmetrics, and keeps each problem's outcome.

    A ``nn.Module`` so its metric states follow the LightningModule's device and are
    reduced across ranks by torchmetrics.

    Args:
        adapters: The run's adapters, any number, any names (each is a key).
        deploy: The game's deployment (``GameSpec.deploy``): ``cascade`` evaluates every ordered pair of
            adapters as a cascade too; ``graph`` evaluates the game's answer graph (key ``game``).
        moa: Also evaluate ``moa`` (the base drafts, the base answers after reading).
        self_cascade: Also evaluate each adapter's self-cascade (``cascade_aa``).
        deployed: The key reported as ``deployed``; ``None``: ``game`` for a graph, the first trained
            cascade (``cascade_ab``, ``cascade_aa`` for self-play) for a cascade, else the first adapter alone.
        game: The game, whose :meth:`~agon_lightning.games.base.Game.answer` a graph deployment runs.

    Raises:
        ValueError: a graph deployment without its game; an adapter named like a key of the
            evaluator (``game``, ``overlap``, ``deployed``, ``moa``, or a cascade's); a ``deployed`` key
            the run does not train.
    """

    def __init__(
        self,
        adapters: tuple[str, ...],
        deploy: str,
        moa: bool = False,
        self_cascade: bool = False,
        deployed: str | None = None,
        game: Game | None = None,
    ) -> None:
        super().__init__()
        if deploy == "graph" and game is None:
            raise ValueError(
                "deploy='graph' scores the game's own answer graph (key 'game'): pass the game (game=)"
            )
        self.adapters = adapters
        self.deploy = deploy
        self.game = game
        self.cascades = cascade_pairs(adapters, deploy, self_cascade)
        if moa:  # the base drafts, the base answers after reading the summary
            self.cascades.append((MOA, BASE, BASE))
        answers = [BASE, *adapters, *([GAME] if deploy == "graph" else [])]  # one stage gives the answer
        self.keys = [*answers, *(key for key, _, _ in self.cascades)]
        self._one_stage = answers
        clash = sorted(set(adapters) & {GAME, OVERLAP, DEPLOYED, MOA})
        if clash or len(set(self.keys)) != len(self.keys):
            raise ValueError(
                f"the adapters {list(adapters)} name two of the evaluator's keys alike ({self.keys}; reserved: "
                f"{[GAME, OVERLAP, DEPLOYED, MOA]}): rename them in the game's GameSpec.policies"
            )
        if deployed is None:
            trained = [key for key, drafter, _ in self.cascades if drafter != BASE]
            deployed = (
                GAME if deploy == "graph" else trained[0] if deploy == "cascade" and trained else adapters[0]
            )
        if deployed not in self.keys or deployed == BASE:
            raise ValueError(f"deployed={deployed!r} is not a trained policy of this run; expected one of "
                             f"{[k for k in self.keys if k not in (BASE, MOA)]}")  # fmt: skip
        self.deployed_key = deployed
        """The key of the policy a bundle deploys (public)."""
        self.stats = {key: POLICY_STATS for key in answers}
        self.stats.update({key: CASCADE_STATS for key, _, _ in self.cascades})
        if len(adapters) == 2:
            self.stats[OVERLAP] = OVERLAP_STATS
        # Metric name -> (split, key, stat): adapter names may hold the "__" that joins them.
        self._where = {
            f"{key}__{stat}": ("", key, stat) for key, stats in self.stats.items() for stat in stats
        }
        self.metrics = nn.ModuleDict({name: MeanMetric() for name in self._where})
        # Every value of the QUANTILED stats, gathered across ranks at compute (one per problem).
        self.samples = nn.ModuleDict(
            {name: CatMetric() for name, (_, _, stat) in self._where.items() if stat in QUANTILED}
        )
        self.history: list[tuple[int, dict[str, float]]] = []
        """``(step, {metric: value})`` per finished evaluation, oldest first (public)."""
        self.last_outputs: list[dict[str, Any]] = []
        """The last validation batch's decoded outputs (public)."""
        self.outcomes: list[dict[str, Any]] = []  # this evaluation's, problem by problem
        self.last_outcomes: list[dict[str, Any]] = []
        """The last finished evaluation's outcome rows, problem by problem (public)."""
        self._splits: set[str] = set()
        # The frozen base's greedy outputs (``base`` and the untrained cascade ``moa``) per batch of
        # prompts: they cannot change during a run, so each batch is generated at the first evaluation only.
        self._frozen: dict[tuple[str, ...], dict[str, tuple[RolloutBatch, float]]] = {}

    @property
    def deployment(self) -> Deployment:
        """How the deployed policy answers (what a bundle records): the game's graph for ``game``, a
        cascade's pair, or an adapter — alone, or for a cascade game drafting for the other adapter
        (itself when the run has one), as a bundle pairs them."""
        key = self.deployed_key
        if key == GAME:
            return Deployment("graph")
        pair = next(((d, a) for k, d, a in self.cascades if k == key), None)
        if pair is not None:
            return Deployment("cascade", *pair)
        if self.deploy == "cascade":
            return Deployment("cascade", key, next((a for a in self.adapters if a != key), key))
        return Deployment("single", key, key)

    @property
    def deployed_drafter(self) -> str | None:
        """The adapter that drafts in the deployed policy (the adapter itself alone; ``None``: a game's graph)."""
        return self.deployment.drafter

    @property
    def deployed_answerer(self) -> str | None:
        """The adapter whose completion answers in the deployed policy (``None``: a game's graph)."""
        return self.deployment.answerer

    def _metric(self, split: str, key: str, stat: str, metrics: nn.ModuleDict | None = None) -> nn.Module:
        """The metric of ``key``'s ``stat`` on ``split`` in ``metrics`` (the means by default), created
        on first use for a named split."""
        metrics = self.metrics if metrics is None else metrics
        name = f"{split}__{key}__{stat}" if split else f"{key}__{stat}"
        if name not in metrics:
            template = metrics[f"{key}__{stat}"]
            metrics[name] = type(template)().to(template.device)
            self._where[name] = (split, key, stat)
        return metrics[name]

    def _add(self, key: str, rows: list[dict[str, float]], splits: list[str]) -> None:
        """Add one value per problem of each stat of ``key`` (``rows[i][stat]``)."""
        for split in dict.fromkeys(splits):
            index = [i for i, s in enumerate(splits) if s == split]
            for stat in self.stats[key]:
                metric = self._metric(split, key, stat)
                values = torch.tensor(
                    [rows[i][stat] for i in index], dtype=torch.float32, device=metric.device
                )
                metric.update(values)
                if stat in QUANTILED:
                    self._metric(split, key, stat, self.samples).update(values)
            self._splits.add(split)

    def _generate(self, module: MixedPlayer, adapter: str, prompts: list[str]) -> tuple[RolloutBatch, float]:
        """Greedy completions of ``prompts`` with ``adapter`` alone (``base``: adapters off), and the seconds taken."""
        start = time.perf_counter()
        rb = module.sample_mixed([None if adapter == BASE else adapter] * len(prompts), prompts, greedy=True)
        return rb, time.perf_counter() - start

    @torch.no_grad()
    def update(self, module: MixedPlayer, problems: list[Problem]) -> None:
        # One generate call per policy and stage, each timed: the cost of every key is its own.
        n, splits = len(problems), [split_of(p) for p in problems]
        prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems]
        outputs, seconds = {}, {}
        reuse = base_is_frozen(module)
        frozen = self._frozen.get(tuple(prompts), {}) if reuse else {}
        for key, (rb, wall) in frozen.items():
            outputs[key], seconds[key] = rb, wall
        for key in [BASE, *self.adapters]:
            if key not in outputs:
                outputs[key], seconds[key] = self._generate(module, key, prompts)
        for key, drafter, answerer in self.cascades:
            if key in outputs:  # reused: the frozen base read the frozen base
                continue
            start = time.perf_counter()
            _, second = challenge_prompts(module, problems, outputs[drafter])
            summarising = time.perf_counter() - start
            outputs[key], generating = self._generate(module, answerer, second)
            seconds[key] = seconds[drafter] + summarising + generating
        spent = {}  # key -> every completion token sampled for the batch's answers, per problem
        if GAME in self.stats:
            meter, start = SampledTokens(module), time.perf_counter()
            outputs[GAME] = graph_answer(self.game, meter, problems)
            seconds[GAME], spent[GAME] = time.perf_counter() - start, meter.tokens / n
        if reuse and not frozen:
            unchanging = [
                BASE,
                *(key for key, drafter, answerer in self.cascades if drafter == answerer == BASE),
            ]
            self._frozen[tuple(prompts)] = {key: (outputs[key], seconds[key]) for key in unchanging}
        verdicts = {key: module.verifier.verify_batch(rb.texts, problems) for key, rb in outputs.items()}
        correct = {key: [float(v.correct) for v in vs] for key, vs in verdicts.items()}
        rows: dict[str, list[dict[str, float]]] = {}
        capped = {key: rb.truncated.float().tolist() for key, rb in outputs.items()}
        for key in self._one_stage:
            lengths = outputs[key].lengths.tolist()
            rows[key] = [{"pass@1": correct[key][i], "length": lengths[i],
                          "cost/total_tokens": spent.get(key, lengths[i]), "cost/wall_s": seconds[key] / n,
                          "cap_hit": capped[key][i]} for i in range(n)]  # fmt: skip
        for key, drafter, _ in self.cascades:
            draft, final = outputs[drafter].lengths.tolist(), outputs[key].lengths.tolist()
            prefill = outputs[key].prompt_mask.sum(1).tolist()
            a, b = correct[drafter], correct[key]
            rows[key] = [
                {"pass@1": b[i], "length": final[i], "cost/total_tokens": draft[i] + final[i],
                 "cost/wall_s": seconds[key] / n, "cap_hit": capped[key][i], "cost/draft_tokens": draft[i],
                 "cost/challenger_prompt_tokens": prefill[i], "cost/challenger_tokens": final[i],
                 "draft/cap_hit": capped[drafter][i], "conversions": (1 - a[i]) * b[i],
                 "regressions": a[i] * (1 - b[i]), "_draft_wrong": 1 - a[i]}
                for i in range(n)
            ]  # fmt: skip
        if OVERLAP in self.stats:
            wa, wb = (1 - torch.tensor(correct[k]) for k in self.adapters)
            rows[OVERLAP] = [{"_alpha_wrong": float(wa[i]), "_both_wrong": float(wa[i] * wb[i]),
                              "_either_wrong": float(torch.maximum(wa[i], wb[i]))} for i in range(n)]  # fmt: skip
        for key, key_rows in rows.items():
            self._add(key, key_rows, splits)
        self.last_outputs = [
            {key: {"text": outputs[key].texts[i], "correct": verdicts[key][i].correct} for key in outputs}
            for i in range(n)
        ]
        self.outcomes += [
            outcome_record(p, i, rows, self.stats, self.deployed_key) for i, p in enumerate(problems)
        ]

    def compute(self) -> dict[str, float]:
        """``val/[SPLIT/]KEY/STAT`` for every key, stat and split seen, with the ratios; resets the metrics."""
        means = self._computed(self.metrics, lambda stat, value: {stat: float(value)})
        quantiles = self._computed(self.samples, lambda stat, value: quantile_metrics(QUANTILED[stat], value))
        out = {}
        for (split, key), stats in sorted(means.items()):
            prefix = f"val/{split}/{key}/" if split else f"val/{key}/"
            out.update({prefix + s: v for s, v in stats.items() if not s.startswith("_")})
            out.update({prefix + s: v for s, v in ratio_metrics(stats).items()})
            out.update({prefix + s: v for s, v in quantiles.get((split, key), {}).items()})
        for split in sorted(self._splits):
            prefix = f"val/{split}/" if split else "val/"
            deployed = f"{prefix}{self.deployed_key}/"
            out.update(
                {
                    f"{prefix}{DEPLOYED}/{k[len(deployed) :]}": v
                    for k, v in list(out.items())
                    if k.startswith(deployed)
                }
            )
        self._splits = set()
        self.last_outcomes, self.outcomes = self.outcomes, []
        return out

    def _computed(self, metrics: nn.ModuleDict, values: Any) -> dict[tuple[str, str], dict[str, float]]:
        """``(split, key) → values(stat, computed)`` merged, for every metric of a split seen; resets them."""
        out: dict[tuple[str, str], dict[str, float]] = {}
        for name, metric in metrics.items():
            split, key, stat = self._where[name]
            if split in self._splits:
                out.setdefault((split, key), {}).update(values(stat, metric.compute()))
            metric.reset()
        return out

    def run(self, module: MixedPlayer, batches: Iterable[list[Problem]]) -> dict[str, float]:
        for batch in batches:
            self.update(module, batch)
        return self.compute()


def quantile_metrics(name: str, values: torch.Tensor | list) -> dict[str, float]:
    """``{name}/p50`` and ``{name}/p90`` of ``values`` (a :class:`~torchmetrics.CatMetric`'s
    result: a tensor, or an empty list when nothing was added); ``{}`` for no values."""
    values = torch.as_tensor(values, dtype=torch.float32).flatten()
    if values.numel() == 0:
        return {}
    return {f"{name}/{q}": float(values.quantile(p)) for q, p in QUANTILES.items()}


def outcome_record(
    problem: Problem,
    i: int,
    rows: dict[str, list[dict[str, float]]],
    stats: dict[str, tuple[str, ...]],
    deployed: str,
) -> dict[str, Any]:
    """One line of ``outcomes.jsonl``: question, split, the deployed key's name, and per key ``KEY``
    (right?), ``KEY/length``, ``KEY/capped`` (hit ``max_new_tokens``), ``KEY/wall_s``; for cascades also
    ``KEY/draft_tokens``, ``KEY/challenger_prompt_tokens``, ``KEY/challenger_tokens``, ``KEY/draft_capped``,
    ``KEY/converted`` and ``KEY/regressed``."""
    record: dict[str, Any] = {"question": problem.question, "split": split_of(problem), "deployed": deployed}
    for key, key_rows in rows.items():
        if key == OVERLAP:  # the adapters' own booleans give it, problem by problem
            continue
        r = key_rows[i]
        record[key] = bool(r["pass@1"])
        record[f"{key}/length"] = int(r["length"])
        record[f"{key}/capped"] = bool(r["cap_hit"])
        record[f"{key}/wall_s"] = r["cost/wall_s"]
        if "conversions" in stats[key]:
            record.update({f"{key}/{s.removeprefix('cost/')}": int(r[s]) for s in STAGE_TOKENS})
            record[f"{key}/draft_capped"] = bool(r["draft/cap_hit"])
            record[f"{key}/converted"] = bool(r["conversions"])
            record[f"{key}/regressed"] = bool(r["regressions"])
    return record
