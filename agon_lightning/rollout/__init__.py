"""Sampling: the ``Rollout`` interface and its backends.

- :mod:`~agon_lightning.rollout.base`: the ``Rollout`` interface, ``RolloutBatch`` and the
  helpers every backend shares (prompt encoding, stop tokens, the completion mask);
- :mod:`~agon_lightning.rollout.hf`: the Hugging Face backend (``HFRollout``), sampling on
  the training model itself;
- :mod:`~agon_lightning.rollout.decode_loop`: its decode loop (token by token, finished rows
  dropped, the prompt's cache shared across a group);
- :mod:`~agon_lightning.rollout.merged`: sampling with the active adapter merged into a copy
  of each weight;
- :mod:`~agon_lightning.rollout.sampling`: each sampled token's log-prob under the
  distribution it was drawn from, and what counts as a sharded weight;
- :mod:`~agon_lightning.rollout.vllm`: the vLLM backend (``VLLMRollout``);
- :mod:`~agon_lightning.rollout.prefetch`: the next step's drafts sampled during the update
  (``max_staleness`` >= 1).

The interface is importable from the package itself (``from agon_lightning.rollout import
Rollout``), and ``agon_lightning.rollout.HFRollout`` — the class path configs and bundles
written before the backends had modules of their own — resolves to the same class. The names
load on first use, so importing one backend does not load the others.
"""

from __future__ import annotations

from agon_lightning.infra.lazy import lazy_names

_EXPORTS: dict[str, str] = {
    "Rollout": "agon_lightning.rollout.base",
    "RolloutBatch": "agon_lightning.rollout.base",
    "HFRollout": "agon_lightning.rollout.hf",
    "stop_token_ids": "agon_lightning.rollout.base",
    "completion_mask": "agon_lightning.rollout.base",
    "encode_prompts": "agon_lightning.rollout.base",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_names(__name__, _EXPORTS)
