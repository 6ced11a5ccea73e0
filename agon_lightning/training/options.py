"""The policy-gradient settings both roles share (``model.grpo``)."""

from __future__ import annotations

from dataclasses import dataclass

from agon_lightning.training.grpo import AGGREGATIONS, STD_KINDS


@dataclass
class GRPOOptions:
    """The policy-gradient settings, shared by both roles.

    Attributes:
        num_generations: N, rollouts per problem (the group size).
        scale_std: Divide advantages by the group std (``False`` = Dr. GRPO centring only).
        std: Which group std: ``population`` (÷N, the default) or ``unbiased`` (÷(N−1), TRL's).
            Unbiased makes advantages √((N−1)/N) as large (0.935× at N = 8; TRL's are 1.069×
            ours). ``population`` is the default so every result recorded with this project
            stays reproducible; the choice only rescales advantages, like a learning-rate change.
        epsilon_low: Lower clip range of the importance ratio.
        epsilon_high: Upper clip range (``> epsilon_low`` is DAPO's clip-higher).
        num_iterations: μ, optimizer steps on the same rollouts.
        kl_beta: β, weight of the KL to the frozen base (0 = no reference pass at all).
        loss_aggregation: ``token_mean`` | ``seq_mean`` | ``dr_grpo``.
        mask_truncated: Drop completions that hit ``max_new_tokens`` from the loss.
        logprob_chunk_size: Tokens per chunk when computing log-probs from hidden states.
        micro_batch_size: Sequences per role per backward (0 = the whole step at once).
        tis_cap: Cap of the truncated importance-sampling correction ``min(exp(trainer −
            sampler), cap)`` applied per token to the surrogate, from the sampling log-probs
            every rollout backend reports (vLLM, the decode loop, ``generate``); ``None`` = off.
            Typical: 2. Required with ``rollout.max_staleness`` >= 1, where it corrects for drafts
            sampled one version behind. Logged: ``train/tis_clip_fraction`` (tokens whose weight
            hit the cap) and ``train/ess`` (the weights' effective sample size, in [0, 1]).
    """

    num_generations: int = 8
    scale_std: bool = True
    std: str = "population"
    epsilon_low: float = 0.2
    epsilon_high: float = 0.2
    num_iterations: int = 1
    kl_beta: float = 0.0
    loss_aggregation: str = "token_mean"
    mask_truncated: bool = False
    logprob_chunk_size: int = 1024
    micro_batch_size: int = 0
    tis_cap: float | None = None

    def __post_init__(self) -> None:
        if self.num_generations < 2:
            raise ValueError(
                f"grpo.num_generations (N) must be >= 2 for group advantages, got {self.num_generations}"
            )
        if self.num_iterations < 1:
            raise ValueError(f"grpo.num_iterations (μ) must be >= 1, got {self.num_iterations}")
        if self.epsilon_low < 0 or self.epsilon_high < 0:
            raise ValueError(
                f"grpo.epsilon_low/high must be >= 0, got {self.epsilon_low}/{self.epsilon_high}"
            )
        if self.kl_beta < 0:
            raise ValueError(f"grpo.kl_beta must be >= 0, got {self.kl_beta}")
        if self.std not in STD_KINDS:
            raise ValueError(f"grpo.std must be one of {STD_KINDS}, got {self.std!r}")
        if self.loss_aggregation not in AGGREGATIONS:
            raise ValueError(
                f"grpo.loss_aggregation must be one of {AGGREGATIONS}, got {self.loss_aggregation!r}"
            )
        if self.micro_batch_size < 0:
            raise ValueError(f"grpo.micro_batch_size must be >= 0, got {self.micro_batch_size}")
        if self.tis_cap is not None and self.tis_cap <= 0:
            raise ValueError(f"grpo.tis_cap must be > 0 or null (off), got {self.tis_cap}")
