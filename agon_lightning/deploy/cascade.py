"""The policies as they deploy: the cascade (one adapter drafts, another reads the draft's summary and
answers), one adapter alone, or the game's own answer graph — as the bundle's ``agon.json`` records.

``Cascade.from_pretrained(bundle).solve(problems)`` runs the deployed policy with plain torch (no
Trainer): the base named in ``agon.json``, every adapter of the run, the summarizer, prompts, rollout
and verifier they were trained with, and for a graph bundle the game itself, rebuilt from its class
path and constructor arguments. For a game's answer graph a :class:`Cascade` is the player
:meth:`~agon_lightning.games.base.Game.answer` is handed: it offers ``sample``, ``read``,
``tokenizer``, ``prompts`` and ``summarizer``.

It is the validation pipeline, not a re-implementation of it: :meth:`Cascade.solve` runs
:func:`~agon_lightning.training.deployment.deployed_answers` (for a cascade
:func:`~agon_lightning.rollout.pipeline.solve_batch`, the calls validation makes), and the adapters
are attached by the same :func:`~agon_lightning.adapters.policy.attach_adapters` that resumes training
from a bundle (:func:`~agon_lightning.deploy.bundle.load_adapters`). With greedy decoding a bundle
therefore reproduces the ``val/cascade_*`` (``val/game``, ``val/ADAPTER``) pass@1 logged when it was
saved, exactly: on CPU in float32 greedy text does not depend on how prompts are batched or padded
(``tests/test_cascade.py`` checks both). Kernels that change with the batch shape (bf16 on
GPUs) can flip a near-tied greedy token; batching like validation narrows that. With ``k > 1``
the answers are majority-voted (:mod:`agon_lightning.rollout.pipeline`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from agon_lightning.adapters.policy import sample_with
from agon_lightning.adapters.snapshots import policies_of
from agon_lightning.data.files import row_to_problem
from agon_lightning.deploy.bundle import build_component, bundle_deployment, load_adapters, read_bundle
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.base import Game
from agon_lightning.infra.quiet import quiet_dependency_noise
from agon_lightning.rollout.base import Rollout, RolloutBatch
from agon_lightning.rollout.pipeline import UNVERIFIABLE, CascadeResult, CascadeSample, challenge_prompts
from agon_lightning.summarizers.base import Summarizer
from agon_lightning.training.deployment import Answer, Deployment, deployed_answers
from agon_lightning.verifiers.base import Verifier

__all__ = [
    "BACKENDS", "Answer", "Cascade", "CascadeResult", "CascadeSample", "as_problems", "rollout_for_backend",
]  # fmt: skip

log = logging.getLogger(__name__)

BACKENDS = {"hf": "agon_lightning.rollout.hf.HFRollout", "vllm": "agon_lightning.rollout.vllm.VLLMRollout"}
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


class UnbuiltVerifier(Verifier):
    """Stands in for a bundle's verifier that cannot be rebuilt here, so the pair still answers.

    A reward function defined in the training script (``__main__``) or as a lambda is recorded by
    a path no other process can import. Serving needs no verifier; where an answer would be graded,
    its verdict is ``unverifiable`` with the reason (``agon predict`` counts and names those rows).
    """

    def __init__(self, reason: str) -> None:
        self.reason = reason

    def grades(self, problem: Problem) -> bool:
        return problem.answer is not None or bool(problem.metadata)

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return Verdict(correct=False, reason=f"{UNVERIFIABLE}: {self.reason}")


def build_verifier(spec: dict[str, Any]) -> Verifier:
    """The bundle's verifier (``spec``), or an :class:`UnbuiltVerifier` saying why it cannot be rebuilt."""
    try:
        return build_component(spec)
    except (ImportError, ValueError) as err:
        reason = (
            f"the bundle's verifier cannot be rebuilt here: {err} (a reward function defined in the training "
            "script or as a lambda cannot be imported back: define it in a module importable here)"
        )
        log.warning("%s: answers are given, and left ungraded", reason)
        return UnbuiltVerifier(reason)


def as_problems(problems: Sequence[Problem | str | Mapping[str, Any]]) -> list[Problem]:
    """:meth:`Cascade.solve`'s input as problems: each a Problem, a question, or a mapping.

    A mapping is read like a row of a problem file (``prompt`` or ``question``, as text or chat
    messages; ``answer`` or ``solution``; every other key into the metadata), by
    :func:`~agon_lightning.data.files.row_to_problem`.

    Raises:
        TypeError: ``problems`` is one problem rather than a sequence, or an item is of
            another kind (the message names its position and what is accepted).
        ValueError: a mapping without a non-empty prompt (``prompt`` or ``question``).
    """
    accepted = (
        "a Problem, a question string, or a mapping with 'prompt' or 'question' (and optionally 'answer', "
        "other columns)"
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
                items.append(row_to_problem(item))
            except ValueError as err:
                raise ValueError(f"problem {i}: {err}") from err
        else:
            raise TypeError(f"problem {i} is a {type(item).__name__}; each problem must be {accepted}")
    return items


def build_game(spec: dict[str, Any]) -> Game:
    """The game a graph bundle records (``agon.json``'s ``game``), rebuilt to answer.

    Raises:
        ImportError: its class cannot be imported here (naming it and what to do).
        TypeError: its recorded arguments do not build it (naming them).
    """
    try:
        game = build_component(spec)
    except ImportError as err:
        raise ImportError(
            f"the bundle deploys its game's answer graph, but {err}; install the package that defines "
            "the game, or put its module on the Python path"
        ) from err
    except TypeError as err:
        raise TypeError(
            f"the bundle's game {spec['class_path']!r} cannot be rebuilt from its recorded arguments "
            f"{spec.get('init_args', {})}: {err} (a bundle records a game's constructor arguments from the "
            "same-named attributes it keeps)"
        ) from err
    if not isinstance(game, Game):
        raise TypeError(f"the bundle's game {spec['class_path']!r} is a {type(game).__name__}, not a Game")
    return game


class Cascade:
    """Every adapter of a run on one base, deployed as the run fixed it.

    Args:
        policy: A PeftModel holding the adapters.
        tokenizer: Its tokenizer (left padding).
        deployment: How the bundle answers: a cascade (its drafter and answerer), one adapter
            alone, or the game's answer graph.
        rollout: Sampling backend and settings (``max_new_tokens``, ``temperature`` for k > 1).
        verifier: Grades answers of problems that have a gold answer.
        summarizer: What of a draft the answerer reads.
        prompts: Prompt templates of both stages.
        system_messages: How training showed system messages (``agon.json``'s ``system_messages``:
            ``per_row``, ``template`` or ``none``; ``None``: not recorded), for ``agon serve``.
        game: The game whose answer graph a ``graph`` deployment runs.

    Raises:
        ValueError: a deployment naming an adapter the policy does not hold, or a graph without its game.
    """

    def __init__(
        self,
        policy: Any,
        tokenizer: Any,
        deployment: Deployment,
        rollout: Rollout,
        verifier: Verifier,
        summarizer: Summarizer,
        prompts: Prompts,
        system_messages: str | None = None,
        game: Game | None = None,
    ) -> None:
        self.policy = policy
        self.tokenizer = tokenizer
        self.adapters = tuple(policies_of(policy))  # a snapshot slot is no policy to deploy
        self.rollout = rollout
        self.verifier = verifier
        self.summarizer = summarizer
        self.prompts = prompts
        self.system_messages = system_messages
        self.game = game
        if deployment.kind == "graph" and game is None:
            raise ValueError("a graph deployment answers through its game's answer graph: pass the game")
        missing = [
            a for a in (deployment.drafter, deployment.answerer) if a is not None and a not in self.adapters
        ]
        if missing:
            raise ValueError(
                f"the deployment names {missing}, but the policy holds the adapters {list(self.adapters)}"
            )
        self.deployment = deployment

    @property
    def drafter(self) -> str | None:
        """The adapter that drafts in the bundle's deployment (alone: the one that answers; ``None``: a graph)."""
        return self.deployment.drafter

    @classmethod
    def from_pretrained(
        cls,
        path: str | Path,
        device: str | torch.device | None = None,
        dtype: str | None = None,
        base_model: str | None = None,
        backend: str | None = None,
    ) -> Cascade:
        """Load a bundle written by :func:`~agon_lightning.deploy.bundle.save_bundle`.

        Args:
            path: The bundle directory (a folder per adapter, ``agon.json``).
            device: Where to run (default: CUDA when available, else CPU).
            dtype: Base weights dtype (default: the one the adapters were trained in).
            base_model: Load the base from here instead of ``agon.json``'s ``base_model``.
            backend: Sample with ``hf`` (``transformers.generate``) or ``vllm`` (one engine, every
                adapter resident), keeping the bundle's sampling settings; ``None``: the
                bundle's own rollout.

        Dependencies' messages no setting reaches (a progress bar where stderr is a file, PEFT's
        deprecated read) are dropped first: :func:`~agon_lightning.infra.quiet.quiet_dependency_noise`.
        """
        quiet_dependency_noise()
        meta = read_bundle(path)
        deployment = bundle_deployment(meta)
        game = build_game(meta["game"]) if deployment.kind == "graph" else None
        rollout = rollout_for_backend(meta["rollout"], backend)
        policy, tokenizer = load_adapters(path, meta, meta["adapters"], base_model, dtype)
        if not rollout.keeps_own_weights:  # an engine samples on its own device; the PeftModel only feeds it
            policy.to(torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu")))
        return cls(
            policy,
            tokenizer,
            deployment,
            rollout,
            build_verifier(meta["verifier"]),
            build_component(meta["summarizer"]),
            Prompts(**meta["prompts"]),
            meta.get("system_messages"),
            game,
        )

    def sample(
        self, adapter: str | None, prompts: list[str], num_samples: int, greedy: bool = False
    ) -> RolloutBatch:
        """Completions with ``adapter`` active (``None``: the base with adapters disabled)."""
        return sample_with(self.policy, self.rollout, self.tokenizer, adapter, prompts, num_samples, greedy)

    def read(self, problems: list[Problem], drafts: RolloutBatch) -> tuple[list[str], list[str]]:
        """``(summaries, prompts)``: each draft summarised, and the prompt of the adapter that reads it."""
        return challenge_prompts(self, problems, drafts)

    def solve(
        self,
        problems: Sequence[Problem | str | Mapping[str, Any]],
        drafter: str | None = None,
        k: int = 1,
        batch_size: int = 8,
        seed: int | None = None,
    ) -> list[CascadeResult | Answer]:
        """Answer each problem as the bundle deploys, ``batch_size`` problems per batch.

        A cascade gives :class:`CascadeResult` (draft, summary, final answer), one adapter alone or a
        game's answer graph :class:`~agon_lightning.training.deployment.Answer`; each has ``final`` (the
        reported sample, its text in ``final.final``), ``verdict`` and ``to_dict()``.

        Args:
            problems: Problems, bare question strings (no gold answer, no verdict), or mappings
                with ``question`` and optionally ``answer`` and ``metadata`` (see :func:`as_problems`).
            drafter: Drafting adapter (default: the bundle's; for a cascade the pair swaps when it is the
                bundle's answerer; alone, it answers). A graph bundle takes none.
            k: Passes per problem; 1 is greedy, more are sampled and majority-voted (a graph: 1 only).
            batch_size: Problems per batch. Validation batches by ``val_batch_size``; the same
                value comes closest to its batching where kernels depend on the batch shape.
            seed: Seed the global torch RNG first (sampling with k > 1).

        Raises:
            TypeError: an input that is none of the accepted kinds (names its position).
            ValueError: an empty question (names its position), a bad drafter, k or batch size.
        """
        deployment = self.deployment if drafter is None else self.deployment.drafting(drafter, self.adapters)
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        items = as_problems(problems)
        for i, p in enumerate(items):
            if not p.question.strip():
                raise ValueError(f"problem {i} has an empty question")
        if seed is not None:
            torch.manual_seed(seed)
        results: list[CascadeResult | Answer] = []
        for start in range(0, len(items), batch_size):
            results += deployed_answers(self, items[start : start + batch_size], deployment, self.game, k)
        return results
