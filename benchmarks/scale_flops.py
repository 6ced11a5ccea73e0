"""Matrix-product FLOPs of a step's generation and update, and what a plain matmul reaches on this CPU.

Achieved FLOP/s is the useful arithmetic of a phase divided by its time; the ceiling it is
compared with is one ``torch.matmul`` of the phase's own shape (rows × hidden × the widest
projection), timed on the same thread. Only the linear layers and the output head are
counted (attention scores add under 3% at these lengths); the count is the same for every
implementation doing the same work, so the ratio of two FLOP/s is the inverse ratio of times.
"""

from __future__ import annotations

import time
from typing import Any

import torch


def linear_params(config: Any) -> tuple[int, int]:
    """``(decoder-layer matmul weights, output-head weights)`` of a Llama-family config."""
    h, i = config.hidden_size, config.intermediate_size
    q = config.num_attention_heads * getattr(config, "head_dim", h // config.num_attention_heads)
    kv = config.num_key_value_heads * getattr(config, "head_dim", h // config.num_attention_heads)
    per_layer = h * (q + 2 * kv) + q * h + 3 * h * i
    return config.num_hidden_layers * per_layer, config.vocab_size * h


def generation_flops(config: Any, rollout_tokens: float) -> float:
    """Forward products of the decode steps: each sampled token through the layers and the head.

    The prompts' prefill is not counted (an implementation may prefill a shared prompt once),
    but its time is in the phase's time, so the FLOP/s reported is a lower bound.
    """
    layers, head = linear_params(config)
    return 2.0 * (layers + head) * rollout_tokens


def update_flops(config: Any, rollout_tokens: float, prompt_tokens: float) -> float:
    """A forward over prompt and completion and the backward to the activations (the base is frozen).

    The head runs on the completion positions only; no weight gradient of the base is counted.
    """
    layers, head = linear_params(config)
    return 2.0 * 2.0 * (layers * (rollout_tokens + prompt_tokens) + head * rollout_tokens)


def matmul_flops_per_s(rows: int, inner: int, outer: int, dtype: torch.dtype = torch.float32) -> float:
    """FLOP/s of ``[rows, inner] @ [inner, outer]`` on one thread, per CPU second (best of a few repeats).

    CPU time, like the phases it is compared with (the workers' ``time.process_time``), so a
    busy machine slows neither side of the ratio.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, outer, dtype=dtype)
        torch.matmul(a, b)
        best = float("inf")
        repeats = max(3, int(2e9 / (2 * rows * inner * outer)))
        for _ in range(3):
            start = time.process_time()
            for _ in range(repeats):
                torch.matmul(a, b)
            best = min(best, (time.process_time() - start) / repeats)
    finally:
        torch.set_num_threads(threads)
    return 2.0 * rows * inner * outer / best
