"""The published shapes of the Qwen3 dense models, so they can be built or planned for offline.

A model of the right architecture with random weights runs every code path a Hub
checkpoint runs — the decode loop, chunked log-probs, checkpointing, export — and costs the
same time and memory, with no download. The values are those of each model's ``config.json``
on the Hub (``Qwen/Qwen3-0.6B`` … ``Qwen/Qwen3-8B``).
"""

from __future__ import annotations

from typing import Any

_COMMON: dict[str, Any] = dict(
    vocab_size=151_936, head_dim=128, num_key_value_heads=8, max_position_embeddings=40_960,
    rope_theta=1_000_000.0, rms_norm_eps=1e-6,
)  # fmt: skip
QWEN3: dict[str, dict[str, Any]] = {
    "qwen3-0.6b": dict(_COMMON, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                       num_attention_heads=16, tie_word_embeddings=True),
    "qwen3-1.7b": dict(_COMMON, hidden_size=2048, intermediate_size=6144, num_hidden_layers=28,
                       num_attention_heads=16, tie_word_embeddings=True),
    "qwen3-4b": dict(_COMMON, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36,
                     num_attention_heads=32, tie_word_embeddings=True),
    "qwen3-8b": dict(_COMMON, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36,
                     num_attention_heads=32, tie_word_embeddings=False),
}  # fmt: skip


def qwen3_config(name: str, **overrides: Any) -> Any:
    """A ``Qwen3Config`` with the shape of ``name`` (a key of :data:`QWEN3`), ``overrides`` on top."""
    from transformers import Qwen3Config

    if name.lower() not in QWEN3:
        raise ValueError(f"unknown Qwen3 shape {name!r}; known: {sorted(QWEN3)}")
    return Qwen3Config(**{**QWEN3[name.lower()], **overrides})
