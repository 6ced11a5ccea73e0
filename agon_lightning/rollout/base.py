"""The rollout interface: what every sampling backend takes and returns.

A rollout returns everything the update needs — prompt and completion token ids with
masks — and everything the game needs — decoded texts, lengths, truncation flags — so no
one re-tokenises text (which would not round-trip exactly). The helpers here are the pieces
every backend shares: the prompts' encoding, the stop tokens, and the completion mask.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from agon_lightning.adapters.peft_boundary import active_adapter, our_name


@dataclass
class RolloutBatch:
    """``B`` sampled completions (B = prompts × samples, samples of a prompt adjacent).

    Attributes:
        prompt_ids: ``[B, P]`` left-padded prompt ids.
        prompt_mask: ``[B, P]`` 1 on real prompt tokens.
        completion_ids: ``[B, T]`` right-padded completion ids (T ≤ max_new_tokens).
        completion_mask: ``[B, T]`` 1 up to and including the first EOS.
        texts: Decoded completions, special tokens removed.
        lengths: ``[B]`` completion tokens (EOS included).
        truncated: ``[B]`` True where no EOS came within ``max_new_tokens``.
        logprobs: ``[B, T]`` the sampler's own log-prob of each completion token under the
            distribution it drew from (after temperature, top-k and top-p; 0 on padding). Every
            shipped backend reports them; ``None`` only from a backend that cannot.
        versions: ``B`` names of the adapter version each row was sampled with (``alpha-v7``),
            from a backend that serves versioned adapters (a vLLM server); ``None`` otherwise.
    """

    prompt_ids: Tensor
    prompt_mask: Tensor
    completion_ids: Tensor
    completion_mask: Tensor
    texts: list[str]
    lengths: Tensor
    truncated: Tensor
    logprobs: Tensor | None = None
    versions: list[str] | None = None

    def __len__(self) -> int:
        return len(self.texts)

    def select(self, index: slice) -> RolloutBatch:
        """Rows ``index`` (for micro-batching)."""
        return RolloutBatch(
            self.prompt_ids[index], self.prompt_mask[index], self.completion_ids[index],
            self.completion_mask[index], self.texts[index], self.lengths[index], self.truncated[index],
            None if self.logprobs is None else self.logprobs[index],
            None if self.versions is None else self.versions[index],
        )  # fmt: skip


def completion_mask(completion_ids: Tensor, eos_ids: list[int]) -> tuple[Tensor, Tensor]:
    """``(mask [B, T], truncated [B])``: 1 up to and including the first EOS token."""
    is_eos = torch.isin(completion_ids, torch.tensor(eos_ids, device=completion_ids.device))
    seen_before = (is_eos.cumsum(dim=1) - is_eos.long()) > 0  # an EOS strictly earlier
    return (~seen_before).long(), ~is_eos.any(dim=1)


def stop_token_ids(model: Any, tokenizer: Any) -> list[int]:
    """Every id that ends a completion: the tokenizer's EOS and each EOS of the model's generation config.

    Qwen3's generation config lists two (``<|im_end|>`` and ``<|endoftext|>``) while its
    tokenizer names one; a rollout that stopped on the tokenizer's alone would run past the
    other to ``max_new_tokens`` and be counted as truncated.
    """
    ids: list[int] = []
    config = getattr(model, "generation_config", None)
    for value in (tokenizer.eos_token_id, getattr(config, "eos_token_id", None)):
        for i in value if isinstance(value, (list, tuple)) else [value]:
            if i is not None and int(i) not in ids:
                ids.append(int(i))
    if not ids:
        raise ValueError("neither the tokenizer nor the model's generation config names an EOS token")
    return ids


def check_generate_args(prompts: Sequence[str], adapter_names: Sequence[str | None] | None) -> None:
    """Raise ``ValueError`` unless there is a prompt, and one adapter name per prompt when names are given."""
    if not prompts:
        raise ValueError("generate needs at least one prompt")
    if adapter_names is not None and len(adapter_names) != len(prompts):
        raise ValueError(f"adapter_names needs one name per prompt: {len(adapter_names)} for {len(prompts)}")


def row_adapters(
    model: Any,
    prompts: Sequence[str],
    adapter_names: Sequence[str | None] | None,
    held: Iterable[str],
    where: str,
) -> list[str | None]:
    """Each prompt's adapter (``None``: adapters off): ``adapter_names`` as given, else the model's active
    adapter on every row. Raises ``ValueError`` naming any adapter not in ``held`` (a backend's own store,
    described by ``where``)."""
    names = [our_name(n) for n in adapter_names] if adapter_names else [active_adapter(model)] * len(prompts)
    held = set(held)
    unknown = sorted({n for n in names if n is not None and n not in held})
    if unknown:
        raise ValueError(f"no adapter {unknown} {where}; held there: {sorted(held)}")
    return names


def encode_prompts(
    tokenizer: Any, prompts: list[str], num_samples: int, device: Any
) -> tuple[Tensor, Tensor]:
    """``(ids [B, P], mask [B, P])``: the prompts left-padded, each repeated ``num_samples`` times in a row.

    No special tokens are added: the prompt templates already hold what the model expects.
    """
    enc = tokenizer(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
    ids = enc["input_ids"].repeat_interleave(num_samples, dim=0).to(device)
    return ids, enc["attention_mask"].repeat_interleave(num_samples, dim=0).to(device)


class Rollout(ABC):
    """Samples ``num_samples`` completions for each prompt with the model's active adapter.

    Attributes:
        max_new_tokens: The completion budget.
        keeps_own_weights: ``True`` for a backend that holds its own copy of the base (an
            inference engine such as vLLM) and reads only the adapters from the model: the module
            then neither gathers sharded weights for it nor moves the model to a device for it.
            ``False`` (the default) samples from the trained model itself.
        max_staleness: K, how many adapter versions behind the trainer a sample may be. 0 (the
            default): every step samples the weights it then updates. K >= 1: the next step's
            drafts are sampled while this step updates (:mod:`agon_lightning.rollout.prefetch`),
            one version behind; only a backend that keeps its own weights can do that.
    """

    max_new_tokens: int
    # The sampling settings every backend takes (set through _keep_sampling); the trainer reads
    # ``temperature`` to recompute the sampled tokens' log-probs at the temperature they had.
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    keeps_own_weights: bool = False
    max_staleness: int = 0

    @abstractmethod
    def generate(
        self,
        model: Any,
        tokenizer: Any,
        prompts: list[str],
        num_samples: int = 1,
        greedy: bool = False,
        adapter_names: list[str | None] | None = None,
    ) -> RolloutBatch:
        """Samples for one prompt are adjacent in the result (a GRPO group).

        ``adapter_names`` gives one adapter per prompt (``None`` = adapters off), so
        several policies sample in one batch (PEFT mixed-adapter inference, eval mode
        only); ``None`` samples every prompt with the active adapter.
        """

    def on_weights_updated(self, model: Any, adapter_names: Sequence[str]) -> None:
        """Called after every optimizer step with the adapters it changed.

        A backend that samples from its own copy of the weights (an inference engine) must
        bring that copy up to date before it samples again; one that samples from ``model``
        itself, like :class:`HFRollout`, has nothing to do.
        """
        return None  # the default: samples come from ``model`` itself, already current

    def _keep_sampling(self, max_new_tokens: int, temperature: float, top_p: float, top_k: int) -> None:
        """Keep the sampling settings every backend takes; a ValueError names the first out of range."""
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature <= 0:
            raise ValueError(
                f"temperature must be > 0 (use greedy=True for greedy decoding), got {temperature}"
            )
        if not 0 < top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {top_p}")
        if top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {top_k}")
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.top_k = top_k

    def _keep_staleness(self, max_staleness: int) -> None:
        """Keep ``max_staleness`` (K); a ValueError names it unless it is an int >= 0 this backend can honour."""
        if isinstance(max_staleness, bool) or not isinstance(max_staleness, int) or max_staleness < 0:
            raise ValueError(f"max_staleness must be an int >= 0 (0 = synchronous), got {max_staleness!r}")
        if max_staleness and not self.keeps_own_weights:
            raise ValueError(
                f"max_staleness={max_staleness} samples the next step's drafts while the update changes the "
                f"weights, but {type(self).__name__} samples those very weights; use max_staleness=0 here, or "
                "a backend with its own copy (VLLMRollout, VLLMServerRollout)"
            )
        self.max_staleness = max_staleness

    def generate_ahead(
        self,
        model: Any,
        tokenizer: Any,
        prompts: list[str],
        num_samples: int,
        adapter_names: list[str | None],
    ) -> RolloutBatch:
        """``generate`` from a background thread while the trainer updates the weights (``max_staleness`` >= 1).

        It must sample the adapter versions the backend already holds: read no weight of ``model``
        (push nothing), change no state of it, and make no collective call (the main thread is in
        the backward's). The default refuses; backends that keep their own weights override it.
        """
        raise NotImplementedError(
            f"{type(self).__name__} cannot sample ahead of the update (max_staleness=0 only)"
        )
