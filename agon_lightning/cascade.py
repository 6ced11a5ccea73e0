"""The pair as it deploys: one adapter drafts, the other reads the draft's summary and answers.

``Cascade.from_pretrained(bundle).solve(problems)`` runs the two-stage pipeline of the paper
with plain torch (no Trainer): the base named in ``agon.json``, both adapters, and the
summarizer, prompts, rollout and verifier the pair was trained with.

It is the validation pipeline, not a re-implementation of it: :func:`solve_batch` drives any
*player* — this class, or the :class:`~agon_lightning.module.AgonModule` itself in
``predict_step`` — through the same calls validation makes (``draft_prompt``, ``sample``,
``summarize``, ``challenge_prompt``, ``sample``), and the adapters are attached by the same
:func:`~agon_lightning.policy.attach_adapters` that resumes training from a bundle. With
greedy decoding a bundle therefore reproduces the ``val/cascade_*`` pass@1 logged when it
was saved, exactly: on CPU in float32 greedy text does not depend on how prompts are batched
or padded (``tests/test_cascade.py`` checks both). Kernels that change with the batch shape
(bf16 on GPUs) can flip a near-tied greedy token; batching like validation narrows that.

**k samples and the majority vote.** With ``k == 1`` both stages decode greedily. With
``k > 1`` the drafter samples k drafts at the rollout's temperature, the answerer answers
each draft once after reading its summary (k answers, as in training), and the final answer
is the most common extracted answer (compared after :func:`normalize_answer`), ties going
to the answer that came first; the reported texts are those of the first sample carrying
it. Samples with no extractable answer do not vote; when none has one, the first sample is
reported.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import torch

from agon_lightning.bundle import build_component, read_bundle
from agon_lightning.data.files import ProblemFields, row_to_problem
from agon_lightning.policy import (
    EMBEDDED_PREFIX,
    LoraOptions,
    attach_adapters,
    load_base,
    sample_with,
)
from agon_lightning.prompts import Prompts
from agon_lightning.rollout import Rollout, RolloutBatch
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.text import extract_answer
from agon_lightning.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier
from agon_lightning.verifiers.exact import normalize_answer

ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
log = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# The pipeline, for any player
# ---------------------------------------------------------------------------------------------


class Player(Protocol):
    """What the pipeline needs: an :class:`AgonModule` or a :class:`Cascade`."""

    tokenizer: Any
    prompts: Prompts
    summarizer: Summarizer
    verifier: Verifier

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Completions with ``adapter`` active (``None``: the base)."""


@dataclass
class CascadeSample:
    """One pass through both stages."""

    draft: str
    summary: str
    final: str
    extracted: str | None
    draft_tokens: int
    final_tokens: int
    draft_truncated: bool
    final_truncated: bool


@dataclass
class CascadeResult:
    """The cascade's output for one problem.

    Attributes:
        problem: The problem.
        drafter: Adapter of the first stage.
        answerer: Adapter of the second stage.
        samples: The k passes, in sampling order.
        chosen: Index of the reported sample (the first one carrying the voted answer).
        votes: Normalised answer → number of samples that gave it.
        verdict: The verifier's verdict on the reported answer, when the problem has a gold answer.
    """

    problem: Problem
    drafter: str
    answerer: str
    samples: list[CascadeSample]
    chosen: int = 0
    votes: dict[str, int] = field(default_factory=dict)
    verdict: Verdict | None = None

    @property
    def final(self) -> CascadeSample:
        return self.samples[self.chosen]

    def to_dict(self) -> dict[str, Any]:
        """The JSON record ``agon predict`` writes (``samples`` and ``votes`` only when k > 1)."""
        s = self.final
        record: dict[str, Any] = {
            "question": self.problem.question,
            "answer": self.problem.answer,
            "drafter": self.drafter,
            "answerer": self.answerer,
            "draft": s.draft,
            "summary": s.summary,
            "final": s.final,
            "extracted": s.extracted,
            "tokens": {"draft": s.draft_tokens, "final": s.final_tokens},
            "truncated": {"draft": s.draft_truncated, "final": s.final_truncated},
            "verdict": None if self.verdict is None else asdict(self.verdict),
        }
        if len(self.samples) > 1:
            record["votes"] = self.votes
            record["samples"] = [asdict(x) for x in self.samples]
        return record


def majority_vote(answers: Sequence[str | None]) -> tuple[int, dict[str, int]]:
    """``(index of the reported sample, votes)``: the most common answer, ties to the earliest.

    Answers are compared after :func:`normalize_answer`; ``None`` (no answer) does not vote.
    """
    keys = [None if a is None else normalize_answer(a) for a in answers]
    votes = Counter(k for k in keys if k is not None)
    if not votes:
        return 0, {}
    best = max(votes.values())
    winner = next(k for k in keys if k is not None and votes[k] == best)  # first to reach the top count
    return keys.index(winner), dict(votes)


def challenge_prompts(
    player: Player, problems: list[Problem], drafts: RolloutBatch
) -> tuple[list[str], list[str]]:
    """``(summaries, prompts)``: each draft summarised, and the prompt its answerer reads.

    The one place the second stage's input is built, in training, validation and deployment.
    """
    summaries = [
        player.summarizer.summarize(text, p, bool(cut))
        for text, p, cut in zip(drafts.texts, problems, drafts.truncated)
    ]
    prompts = [player.prompts.challenge_prompt(player.tokenizer, p, s) for p, s in zip(problems, summaries)]
    return summaries, prompts


def challenge(
    player: Player, problems: list[Problem], drafts: RolloutBatch, answerer: str | None, greedy: bool
) -> tuple[list[str], RolloutBatch]:
    """The second stage: summarise each draft, then ``answerer`` answers each after reading it."""
    summaries, prompts = challenge_prompts(player, problems, drafts)
    return summaries, player.sample(answerer, prompts, 1, greedy)


def solve_batch(
    player: Player, problems: list[Problem], drafter: str, answerer: str, k: int = 1
) -> list[CascadeResult]:
    """Both stages on one batch: greedy when ``k == 1``, else k sampled passes and a vote."""
    if k < 1:
        raise ValueError(f"k (samples per problem) must be >= 1, got {k}")
    greedy = k == 1
    prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
    drafts = player.sample(drafter, prompts, k, greedy)  # the k samples of a problem are adjacent
    grouped = [p for p in problems for _ in range(k)]
    summaries, finals = challenge(player, grouped, drafts, answerer, greedy)
    samples = [
        CascadeSample(
            drafts.texts[i],
            summaries[i],
            text,
            extract_answer(text),
            int(drafts.lengths[i]),
            int(finals.lengths[i]),
            bool(drafts.truncated[i]),
            bool(finals.truncated[i]),
        )
        for i, text in enumerate(finals.texts)
    ]
    results = []
    for j, problem in enumerate(problems):
        group = samples[j * k : (j + 1) * k]
        chosen, votes = majority_vote([s.extracted for s in group])
        results.append(CascadeResult(problem, drafter, answerer, group, chosen, votes))
    graded = [r for r in results if r.problem.answer is not None]
    verdicts = verify_each(player.verifier, [r.final.final for r in graded], [r.problem for r in graded])
    for result, verdict in zip(graded, verdicts):
        result.verdict = verdict
    return results


UNVERIFIABLE = "unverifiable"


def verify_each(verifier: Verifier, texts: list[str], problems: list[Problem]) -> list[Verdict]:
    """Verdicts for deployment, where one row the verifier cannot judge must not lose the others.

    A row whose check raises (a reasoning-gym verifier given a problem without its task
    metadata, say) gets ``Verdict(correct=False, reason="unverifiable: …")`` naming the error;
    the error is logged, and every other row keeps its verdict.
    """
    try:
        return verifier.verify_batch(texts, problems)
    except Exception:  # noqa: BLE001 — judged row by row below, each failure logged and recorded
        pass
    verdicts = []
    for i, (text, problem) in enumerate(zip(texts, problems)):
        try:
            verdicts.append(verifier.verify(text, problem))
        except Exception as err:  # noqa: BLE001
            reason = f"{UNVERIFIABLE}: {type(verifier).__name__}: {err}"
            log.warning("row %d of the batch: %s", i, reason)
            verdicts.append(Verdict(correct=False, score=0.0, reason=reason))
    return verdicts


# ---------------------------------------------------------------------------------------------
# Loading a bundle
# ---------------------------------------------------------------------------------------------


def canonical_base(name: str) -> str:
    """A base model name comparable across machines: a shipped model's path becomes ``agon:NAME``."""
    path = Path(name)
    if path.parent.name == "assets" and path.parent.parent.name == "agon_lightning":
        return EMBEDDED_PREFIX + path.name
    if not name.startswith(EMBEDDED_PREFIX) and path.exists():
        return str(path.resolve())
    return name.rstrip("/")


def check_adapters(path: Path, meta: dict[str, Any], names: Sequence[str]) -> None:
    """Each adapter in ``names`` is in the bundle, has weights, and was trained on its base.

    Raises:
        ValueError: an adapter the bundle does not list, or one trained on another base.
        FileNotFoundError: an adapter without its weights file.
    """
    listed = meta.get("adapters", [])
    for name in names:
        if name not in listed:
            raise ValueError(f"bundle {path} holds adapters {listed}, not {name!r}")
        adapter_dir = path / name
        if not any((adapter_dir / f).is_file() for f in ADAPTER_WEIGHTS):
            raise FileNotFoundError(
                f"adapter {name!r} has no weights: {adapter_dir / ADAPTER_WEIGHTS[0]} is missing"
            )
        config_file = adapter_dir / "adapter_config.json"
        try:
            trained_on = json.loads(config_file.read_text()).get("base_model_name_or_path")
        except json.JSONDecodeError as err:
            raise ValueError(f"{config_file} is not valid JSON: {err}") from err
        if trained_on and canonical_base(trained_on) != canonical_base(meta["base_model"]):
            raise ValueError(
                f"{config_file} says the adapter was trained on {trained_on!r}, but {path / 'agon.json'} "
                f"names base_model {meta['base_model']!r}; the adapter does not belong to this bundle"
            )


def load_adapters(
    path: str | Path,
    meta: dict[str, Any],
    names: Sequence[str],
    base_model: str | None = None,
    dtype: str | None = None,
) -> tuple[Any, Any]:
    """``(PeftModel with the named adapters, tokenizer)`` from a bundle, in eval mode.

    Args:
        path: The bundle directory.
        meta: Its ``agon.json`` (:func:`~agon_lightning.bundle.read_bundle`).
        names: Adapters to attach.
        base_model: Load the base from here instead of ``agon.json``'s ``base_model`` (a
            local copy of the same model).
        dtype: ``float32`` | ``bfloat16`` | ``float16`` (default: the bundle's).
    """
    path = Path(path)
    check_adapters(path, meta, names)
    base_name = base_model or meta["base_model"]
    base, tokenizer = load_base(base_name, dtype or meta.get("dtype", "float32"))
    try:
        policy = attach_adapters(base, tuple(names), LoraOptions(init_from=str(path)))
    except (RuntimeError, ValueError, KeyError) as err:  # size mismatches, target modules not found
        raise ValueError(
            f"the adapters {list(names)} in {path} do not fit base model {base_name!r}: {err}"
        ) from err
    policy.eval()
    return policy, tokenizer


BACKENDS = {"hf": "agon_lightning.rollout.HFRollout", "vllm": "agon_lightning.vllm_rollout.VLLMRollout"}
SAMPLING_ARGS = ("max_new_tokens", "temperature", "top_p", "top_k")


def rollout_for_backend(spec: dict[str, Any], backend: str | None) -> Rollout:
    """The bundle's rollout (``spec``), or the sampling backend ``backend`` with the same sampling settings.

    Raises:
        ValueError: ``backend`` is not one of :data:`BACKENDS`.
    """
    if backend is None:
        return build_component(spec)
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {backend!r}")
    if spec["class_path"] == BACKENDS[backend]:
        return build_component(spec)
    init_args = spec.get("init_args", {})
    sampling = {k: init_args[k] for k in SAMPLING_ARGS if k in init_args}
    return build_component({"class_path": BACKENDS[backend], "init_args": sampling})


# ---------------------------------------------------------------------------------------------
# The Python API
# ---------------------------------------------------------------------------------------------


def as_problems(problems: Sequence[Problem | str | Mapping[str, Any]]) -> list[Problem]:
    """:meth:`Cascade.solve`'s input as problems: each a Problem, a question, or a mapping.

    A mapping is read like a row of a problem file (``question``, ``answer``, ``metadata``;
    other keys go into the metadata), by :func:`~agon_lightning.data.files.row_to_problem`.

    Raises:
        TypeError: ``problems`` is one problem rather than a sequence, or an item is of
            another kind (the message names its position and what is accepted).
        ValueError: a mapping without a non-empty string ``question``.
    """
    accepted = (
        "a Problem, a question string, or a mapping with 'question' (and optionally 'answer', 'metadata')"
    )
    if isinstance(problems, (str, Mapping, Problem)):
        raise TypeError(f"problems must be a list, each {accepted}; got a single {type(problems).__name__}")
    items = []
    for i, item in enumerate(problems):
        if isinstance(item, Problem):
            items.append(item)
        elif isinstance(item, str):
            items.append(Problem(question=item))
        elif isinstance(item, Mapping):
            try:
                items.append(row_to_problem(dict(item), ProblemFields()))
            except ValueError as err:
                raise ValueError(f"problem {i}: {err}") from err
        else:
            raise TypeError(f"problem {i} is a {type(item).__name__}; each problem must be {accepted}")
    return items


class Cascade:
    """Both adapters on one base, deployed as the two-stage cascade.

    Args:
        policy: A PeftModel holding the adapters.
        tokenizer: Its tokenizer (left padding).
        drafter: Default drafting adapter.
        rollout: Sampling backend and settings (``max_new_tokens``, ``temperature`` for k > 1).
        verifier: Grades answers of problems that have a gold answer.
        summarizer: What of a draft the answerer reads.
        prompts: Prompt templates of both stages.
    """

    def __init__(
        self,
        policy: Any,
        tokenizer: Any,
        drafter: str,
        rollout: Rollout,
        verifier: Verifier,
        summarizer: Summarizer,
        prompts: Prompts,
    ) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.adapters = tuple(policy.peft_config)
        self.rollout = rollout
        self.verifier = verifier
        self.summarizer = summarizer
        self.prompts = prompts
        self.answerer(drafter)  # validates the name
        self.drafter = drafter

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device | None = None,
        dtype: str | None = None,
        base_model: str | None = None,
        backend: str | None = None,
    ) -> Cascade:
        """Load a bundle written by :func:`~agon_lightning.bundle.save_bundle`.

        Args:
            path: The bundle directory (``alpha/``, ``beta/``, ``agon.json``).
            device: Where to run (default: CUDA when available, else CPU).
            dtype: Base weights dtype (default: the one the pair was trained in).
            base_model: Load the base from here instead of ``agon.json``'s ``base_model``.
            backend: Sample with ``hf`` (``transformers.generate``) or ``vllm`` (one engine, both
                adapters resident), keeping the bundle's sampling settings; ``None``: the
                bundle's own rollout.
        """
        meta = read_bundle(path)
        rollout = rollout_for_backend(meta["rollout"], backend)
        policy, tokenizer = load_adapters(path, meta, meta["adapters"], base_model, dtype)
        if not rollout.reports_logprobs:  # an engine samples on its own device; the PeftModel only feeds it
            policy.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))
        return cls(
            policy,
            tokenizer,
            meta["drafter"],
            rollout,
            build_component(meta["verifier"]),
            build_component(meta["summarizer"]),
            Prompts(**meta["prompts"]),
        )

    def answerer(self, drafter: str) -> str:
        """The adapter that answers after ``drafter``: the other one (itself in a one-adapter bundle)."""
        if drafter not in self.adapters:
            raise ValueError(f"drafter must be one of {list(self.adapters)}, got {drafter!r}")
        others = [a for a in self.adapters if a != drafter]
        return others[0] if others else drafter

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Completions with ``adapter`` active (``None``: the base with adapters disabled)."""
        return sample_with(self.policy, self.rollout, self.tokenizer, adapter, prompts, num_samples, greedy)

    def solve(
        self,
        problems: Sequence[Problem | str | Mapping[str, Any]],
        drafter: str | None = None,
        k: int = 1,
        batch_size: int = 8,
        seed: int | None = None,
    ) -> list[CascadeResult]:
        """Run the cascade on each problem, ``batch_size`` problems per ``generate`` call.

        Args:
            problems: Problems, bare question strings (no gold answer, no verdict), or mappings
                with ``question`` and optionally ``answer`` and ``metadata`` (see :func:`as_problems`).
            drafter: Drafting adapter (default: the bundle's).
            k: Passes per problem; 1 is greedy, more are sampled and majority-voted.
            batch_size: Problems per batch. Validation batches by ``val_batch_size``; the same
                value comes closest to its batching where kernels depend on the batch shape.
            seed: Seed the global torch RNG first (sampling with k > 1).

        Raises:
            TypeError: an input that is none of the accepted kinds (names its position).
            ValueError: an empty question (names its position), a bad drafter, k or batch size.
        """
        drafter = drafter or self.drafter
        answerer = self.answerer(drafter)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        items = as_problems(problems)
        for i, p in enumerate(items):
            if not p.question.strip():
                raise ValueError(f"problem {i} has an empty question")
        if seed is not None:
            torch.manual_seed(seed)
        results: list[CascadeResult] = []
        for start in range(0, len(items), batch_size):
            results += solve_batch(self, items[start : start + batch_size], drafter, answerer, k)
        return results
