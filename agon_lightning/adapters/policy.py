"""Two policies, one frozen base: loading the base, attaching the LoRA adapters, switching.

Both policies are LoRA adapters (``alpha``, ``beta``) on the same frozen base, so the pair
costs ~2% more memory than one model. They start differently — ``alpha`` with PEFT's zero
``B`` (it *is* the base at step 0), ``beta`` with ``B ~ N(0, σ²)`` — so they diverge into
different blind spots. ``disable_adapter()`` gives the exact base: a free KL reference.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.fast_lora import adapters_disabled, install
from agon_lightning.adapters.peft_boundary import (  # noqa: F401  BASE_ADAPTER, active_adapter: this module's API too
    BASE_ADAPTER,
    activate,
    active_adapter,
    base_model,
)
from agon_lightning.adapters.shared_prompt import (
    prefix_hidden_states,
    prompt_groups,
    shared_prefixes,
    shares_prompts,
)
from agon_lightning.adapters.snapshots import adapter_state, load_into
from agon_lightning.adapters.weights_files import weights_file, weights_problem
from agon_lightning.game.names import BETA
from agon_lightning.infra.errors import UsageError
from agon_lightning.infra.logprobs import LogitHead
from agon_lightning.infra.model_source import resolve_model_path
from agon_lightning.strategies.gather import fsdp2_modules, of_adapter, zero3_parameters

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class LoraOptions:
    """LoRA settings shared by both adapters.

    Attributes:
        r: Rank.
        alpha: LoRA scaling numerator (scale = alpha / r).
        dropout: Dropout on the LoRA input (off during generation).
        target_modules: Module names to adapt (``"all-linear"`` is accepted).
        beta_init_std: σ of ``beta``'s Gaussian ``B`` init; ``alpha`` keeps zero ``B``.
        init_seed: Seed for ``beta``'s noise, so both adapters are reproducible.
        init_from: A directory holding ``alpha/`` and ``beta/`` PEFT adapters to start from.
    """

    r: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: list[str] | str = field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    )
    beta_init_std: float = 1e-3
    init_seed: int = 0
    init_from: str | None = None

    def __post_init__(self) -> None:
        if self.r < 1:
            raise ValueError(f"lora.r must be >= 1, got {self.r}")
        if not 0 <= self.dropout < 1:
            raise ValueError(f"lora.dropout must be in [0, 1), got {self.dropout}")
        if self.beta_init_std < 0:
            raise ValueError(f"lora.beta_init_std must be >= 0, got {self.beta_init_std}")


def load_causal_lm(path: str | Path, **kwargs: Any) -> nn.Module:
    """``AutoModelForCausalLM.from_pretrained(path, **kwargs)`` with the Hub's kernels off unless asked for.

    Recent transformers releases (5.25 here) kernelize every model they load by default: on a GPU
    they fetch layer kernels (RMSNorm, SiLU, the rotary embedding) from the Hub where they can, and
    run them in place of the model's own forward, and on every mode switch they walk the whole
    model again. Training would then depend on whether the Hub was reachable (our GPU machines have
    no network) and no longer match the decode loop's torch arithmetic, which samples for it; and
    each sampling call's eval/train switch would cost 5.5 ms instead of 1.5 (the Countdown model
    with two adapters, on a CPU). ``use_kernels=True`` in ``kwargs`` asks for them.
    """
    from transformers import AutoModelForCausalLM

    kwargs.setdefault("use_kernels", False)
    return AutoModelForCausalLM.from_pretrained(path, **kwargs)


def load_base(name: str, dtype: str = "float32", **kwargs: Any) -> tuple[nn.Module, Any]:
    """Load a causal LM and its tokenizer (left padding, a pad token), base frozen."""
    from transformers import AutoTokenizer

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    path = resolve_model_path(name)
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = load_causal_lm(path, dtype=DTYPES[dtype], **kwargs)
    model.requires_grad_(False)
    model.train()  # from_pretrained returns eval mode; generation switches to eval itself
    return model, tokenizer


def attach_adapters(
    base: nn.Module, names: tuple[str, ...], opts: LoraOptions, slots: dict[str, str] | None = None
) -> nn.Module:
    """Wrap ``base`` in a PeftModel holding one LoRA adapter per name (LoRA layers on the fused forward).

    ``slots``: frozen snapshot slots to attach, slot name → the adapter whose shape (and, at
    first, weights) it takes (:func:`~agon_lightning.adapters.snapshots.slot_of`); attached after
    the adapters without drawing from the global random stream, so the trained adapters and the
    run's sampling are the same with or without slots.
    """
    from peft import LoraConfig, PeftModel, get_peft_model

    if opts.init_from:
        root = Path(opts.init_from)
        missing = [n for n in names if not (root / n / "adapter_config.json").is_file()]
        if missing:
            raise FileNotFoundError(
                f"lora.init_from={str(root)!r} lacks adapters {missing} (expected NAME/adapter_config.json)"
            )
        for name in names:  # a damaged file is named here, not by PEFT's bare SafetensorError
            weights = weights_file(root / name)
            if weights is not None and (problem := weights_problem(weights)) is not None:
                raise UsageError(
                    f"lora.init_from={str(root)!r}: cannot read {weights} ({problem}: truncated or garbled); "
                    "start from another bundle (NAME/ beside each NAME.ckpt of a run)"
                )
        model = PeftModel.from_pretrained(
            base, str(root / names[0]), adapter_name=names[0], is_trainable=True
        )
        for name in names[1:]:
            model.load_adapter(str(root / name), adapter_name=name, is_trainable=True)
        add_slots(model, slots or {})
        install(model)
        peft.check_peft(model)
        return model
    config = LoraConfig(
        r=opts.r,
        lora_alpha=opts.alpha,
        lora_dropout=opts.dropout,
        target_modules=opts.target_modules,
        bias="none",
    )
    model = get_peft_model(base, config, adapter_name=names[0])
    for name in names[1:]:
        model.add_adapter(name, config)
    if BETA in names and opts.beta_init_std > 0:
        generator = torch.Generator().manual_seed(opts.init_seed)
        for pname, param in model.named_parameters():
            if f".lora_B.{BETA}." in pname:
                noise = torch.randn(param.shape, generator=generator) * opts.beta_init_std
                param.data.copy_(noise.to(param.dtype))
    add_slots(model, slots or {})
    install(model)
    peft.check_peft(model)  # the PEFT internals the adapters are switched and fused through
    return model


def add_slots(model: nn.Module, slots: dict[str, str]) -> None:
    """Each frozen snapshot slot (slot → adapter) beside its adapter, of its configuration and weights."""
    for slot, adapter in slots.items():
        with torch.random.fork_rng(devices=[]):  # the slot's initial draw is overwritten below
            model.add_adapter(slot, model.peft_config[adapter])
        load_into(model, slot, adapter_state(model, adapter))
        for name, param in model.named_parameters():
            if of_adapter(name, slot):
                param.requires_grad_(False)


def adapter_parameters(model: nn.Module, name: str) -> list[nn.Parameter]:
    """The LoRA parameters of adapter ``name``."""
    params = [p for n, p in model.named_parameters() if of_adapter(n, name)]
    if not params:
        raise ValueError(f"adapter {name!r} has no parameters in this model")
    return params


@contextlib.contextmanager
def base_only(model: nn.Module, trainable: list[nn.Parameter] | None = None) -> Iterator[None]:
    """The exact frozen base (every adapter off), with ``trainable`` still trainable afterwards.

    Leaving PEFT's ``disable_adapter()`` re-activates the active adapter through
    ``set_adapter``, which sets ``requires_grad=False`` on every other adapter — and autograd
    then drops their gradients even from forwards that ran earlier in the step. So the flags
    are put back by name on the way out. Where the model's adapter layers are all on the fused
    forward, they are switched off directly (:func:`~agon_lightning.adapters.fast_lora.adapters_disabled`:
    the same state without PEFT's walks over every module).
    """
    try:
        with adapters_disabled(model) as done, contextlib.ExitStack() as stack:
            if not done:  # adapter layers other than fast_lora's: PEFT's own switch
                stack.enter_context(peft.peft_disabled(model))
            yield
    finally:
        peft.restore_trainable(trainable)


@contextlib.contextmanager
def using(
    model: nn.Module, adapter: str | None, trainable: list[nn.Parameter] | None = None
) -> Iterator[None]:
    """``adapter`` active inside (``None``: the exact base, :func:`base_only`), ``trainable`` kept trainable."""
    if adapter is None:
        with base_only(model, trainable):
            yield
    else:
        activate(model, adapter, trainable or [])
        yield


class AdapterReplay:
    """Activation checkpointing that recomputes each forward with the adapter it ran with.

    The checkpointed forward of a decoder layer is recomputed during the backward, when a
    different adapter may be active (both roles' forwards run before one joint backward).
    Given to ``torch.utils.checkpoint`` as ``context_fn``: at forward time it notes which
    adapters are active, and wraps the recomputation in a context that sets exactly those on
    every LoRA layer — directly, not through ``set_adapter``, so no ``requires_grad`` flag
    changes in the middle of a backward — and restores what was active before.
    """

    def __init__(self) -> None:
        self.layers: list[Any] = []

    def bind(self, model: nn.Module) -> None:
        """Find the LoRA layers of ``model`` (call once the adapters are attached)."""
        self.layers = peft.tuner_layers(model)

    def __call__(self) -> tuple[contextlib.AbstractContextManager, contextlib.AbstractContextManager]:
        if not self.layers:
            raise RuntimeError(
                "AdapterReplay is not bound to a model: call bind(model) after attaching adapters"
            )
        state = [peft.switch_state(layer) for layer in self.layers]
        return contextlib.nullcontext(), self._replaying(state)

    @contextlib.contextmanager
    def _replaying(self, state: list[tuple[Any, bool]]) -> Iterator[None]:
        now = [peft.switch_state(layer) for layer in self.layers]
        try:
            for layer, saved in zip(self.layers, state):
                peft.set_switch(layer, saved)
            yield
        finally:
            for layer, saved in zip(self.layers, now):
                peft.set_switch(layer, saved)


def enable_checkpointing(model: nn.Module) -> None:
    """Activation checkpointing on ``model``'s base, recomputing with the adapter each forward used."""
    replay = AdapterReplay()
    base = base_model(model)
    kwargs = {"use_reentrant": False, "context_fn": replay}
    if hasattr(base, "activation_checkpointing_enable"):
        base.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # transformers releases before the rename
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    base.enable_input_require_grads()
    replay.bind(model)


@contextlib.contextmanager
def generating(model: nn.Module) -> Iterator[None]:
    """Eval mode (no LoRA dropout) and no autograd for sampling; restores the mode after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        model.train(was_training)


def completion_hidden_states(
    model: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    groups: Tensor | None = None,
) -> Tensor:
    """Final hidden states at the positions that predict each completion token: ``[B, T, H]``.

    Runs the decoder without the LM head (log-probs are then taken chunk by chunk), with
    position ids from the attention mask exactly as ``generate`` computes them under left
    padding, so the recomputed log-probs match the sampling pass. The leading prompt tokens
    that the rows of a group share run once for the group (:mod:`agon_lightning.adapters.shared_prompt`):
    a GRPO group's whole prompt, or the problem that precedes each challenger's draft summary.
    Where completions differ in length enough that running rows in length-sorted chunks, each at
    its own width, costs fewer token positions, they run so instead (:func:`length_chunks`; not
    with sharded weights, where every rank must call the modules alike).

    Args:
        groups: ``[G]`` consecutive rows per group (e.g. from
            :func:`~agon_lightning.adapters.shared_prompt.sample_groups`); ``None``: runs of identical prompts.
    """
    decoder = base_model(model).get_decoder()
    counts = prompt_groups(prompt_ids, prompt_mask) if groups is None else groups
    prefixes = None
    # Not under FSDP2: the prefix's keys and values reach the backward through the cache, a path
    # its per-layer unshard-for-backward does not see (the layer's weights would be freed by then).
    if counts is not None and shares_prompts(decoder) and not fsdp2_modules(decoder):
        prefixes = shared_prefixes(prompt_ids, prompt_mask, counts)
    args = (decoder, prompt_ids, prompt_mask, completion_ids, completion_mask)
    chunks = (
        None if is_partitioned(decoder) else length_chunks(span(prompt_mask, leading=True), completion_mask)
    )
    if (
        chunks is not None
        and len(chunks[0]) > 1
        and chunks[1] < _one_call_cost(prompt_mask, completion_mask, prefixes, counts)
    ):
        return _chunked_hidden_states(*args, chunks[0])
    if prefixes is not None:
        return prefix_hidden_states(*args, *prefixes, counts)
    return _full_hidden_states(*args)


# A decoder call's fixed cost, in token positions: what merging two chunks into one must save. On the
# Countdown config (python -m benchmarks.profile_countdown) 64 and 256 ran the update alike, within noise.
CALL_TOKENS = 64


def is_partitioned(decoder: nn.Module) -> bool:
    """Whether a strategy shards ``decoder``'s weights: every rank must then call its modules alike."""
    return bool(fsdp2_modules(decoder) or zero3_parameters(decoder))


def length_chunks(prompt_widths: Tensor, completion_mask: Tensor) -> tuple[list[Tensor], int] | None:
    """Rows sorted by completion length and cut into chunks that each run at their own width.

    The completions of a batch are padded to its longest; a forward over every row at that width
    spends the padding's share of its work on nothing. Sorted by length, contiguous chunks of rows
    each run at their own longest prompt and completion; the cut minimises the token positions
    run plus :data:`CALL_TOKENS` per chunk (an exact partition of the sorted rows, ``O(B²)``).

    Args:
        prompt_widths: ``[B]`` prompt columns each row runs (after a shared prefix, where one runs first).
        completion_mask: ``[B, T]`` right-padded completions.

    Returns:
        ``(chunks, cost)``: each chunk's row indices ``[b]`` and the partition's cost in token
        positions; ``None`` for a batch of fewer than two rows.
    """
    total = completion_mask.shape[0]
    if total < 2:
        return None
    lengths = span(completion_mask, leading=False)  # [B]
    order = torch.sort(lengths, descending=True, stable=True).indices
    sorted_t = lengths[order].tolist()
    sorted_p = prompt_widths[order].tolist()
    best = [0] * (total + 1)  # best[i]: the least cost of rows i.. (sorted); best[total] = 0
    cut = [total] * (total + 1)  # where the chunk that starts at row i ends
    for i in range(total - 1, -1, -1):
        widest_p, best[i] = 0, -1
        for j in range(i + 1, total + 1):  # chunk i..j-1: its longest completion is row i's
            widest_p = max(widest_p, sorted_p[j - 1])
            cost = (j - i) * (widest_p + sorted_t[i]) + CALL_TOKENS + best[j]
            if best[i] < 0 or cost < best[i]:
                best[i], cut[i] = cost, j
    chunks, i = [], 0
    while i < total:
        chunks.append(order[i : cut[i]])
        i = cut[i]
    return chunks, best[0]


def span(mask: Tensor, leading: bool) -> Tensor:
    """``[B]`` columns each row needs, at least 1: from its first 1 to the end (``leading``: a left-padded
    prompt), or from the start to its last 1 (a right-padded completion)."""
    cols = torch.arange(1, mask.shape[1] + 1, device=mask.device)  # [W]
    if leading:
        cols = cols.flip(0)
    return (mask.bool() * cols).amax(dim=1).clamp(min=1)


def _one_call_cost(
    prompt_mask: Tensor,
    completion_mask: Tensor,
    prefixes: tuple[Tensor, Tensor] | None,
    counts: Tensor | None,
) -> int:
    """Token positions of the one-call forward, each group's shared prefix run once where ``prefixes``."""
    rows, width = prompt_mask.shape[0], prompt_mask.shape[1] + completion_mask.shape[1]
    if prefixes is None or counts is None:
        return rows * width + CALL_TOKENS
    shared = prefixes[1]  # [B]
    rest = int((prompt_mask.sum(dim=1) - shared).max())
    return len(counts) * int(shared.max()) + rows * (rest + completion_mask.shape[1]) + 2 * CALL_TOKENS


def _full_hidden_states(
    decoder: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
) -> Tensor:
    """The plain forward of ``prompt + completion``: hidden states ``[B, T, H]`` predicting the completion."""
    ids = torch.cat([prompt_ids, completion_ids], dim=1)  # [B, P + T]
    attn = torch.cat([prompt_mask, completion_mask], dim=1)
    positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
    hidden = decoder(
        input_ids=ids, attention_mask=attn, position_ids=positions, use_cache=False
    ).last_hidden_state
    return hidden[:, prompt_ids.shape[1] - 1 : -1]  # [B, T, H]


def _chunked_hidden_states(
    decoder: nn.Module,
    prompt_ids: Tensor,
    prompt_mask: Tensor,
    completion_ids: Tensor,
    completion_mask: Tensor,
    chunks: list[Tensor],
) -> Tensor:
    """:func:`_full_hidden_states` chunk by chunk (:func:`length_chunks`), each at its own width.

    A chunk drops the prompt's leading columns that are masked in all its rows and the
    completion's trailing ones (masked keys, and positions no loss reads); position ids come from
    the mask, so every kept token sees what it sees in the full forward. Positions past a row's
    completion hold zeros.
    """
    width, pieces = completion_ids.shape[1], []
    for rows in chunks:
        p_mask, c_mask = prompt_mask[rows], completion_mask[rows]
        p, t = int(span(p_mask, leading=True).max()), int(span(c_mask, leading=False).max())
        hidden = _full_hidden_states(
            decoder, prompt_ids[rows][:, -p:], p_mask[:, -p:], completion_ids[rows][:, :t], c_mask[:, :t]
        )  # [b, t, H]
        pieces.append(torch.nn.functional.pad(hidden, (0, 0, 0, width - t)))
    order = torch.cat(chunks)
    inverse = torch.empty_like(order)
    inverse[order] = torch.arange(len(order), device=order.device)
    return torch.cat(pieces).index_select(0, inverse)  # [B, T, H]


def output_weight(model: nn.Module) -> Tensor:
    """The ``[V, H]`` output-embedding matrix."""
    return base_model(model).get_output_embeddings().weight


def logit_head(model: nn.Module) -> LogitHead:
    """How the model turns ``hidden @ W.T`` into its logits, read from its config.

    Handles the families that scale (Cohere ``logit_scale``, Granite ``logits_scaling``) or
    soft-cap (Gemma 2/3 ``final_logit_softcapping``) their final logits, so the trainer's
    log-probs are those of the policy that sampled.

    Raises:
        ValueError: an output layer with a bias (the chunked log-probs project without one).
    """
    base = base_model(model)
    head = base.get_output_embeddings()
    if getattr(head, "bias", None) is not None:
        raise ValueError(
            f"{type(base).__name__}'s output layer has a bias, which the chunked log-probs do not apply; "
            "this model is not supported"
        )
    config = base.config.get_text_config() if hasattr(base.config, "get_text_config") else base.config
    scale = 1.0
    if getattr(config, "logit_scale", None) is not None:  # Cohere: logits * logit_scale
        scale *= float(config.logit_scale)
    if getattr(config, "logits_scaling", None) is not None:  # Granite: logits / logits_scaling
        scale /= float(config.logits_scaling)
    softcap = getattr(config, "final_logit_softcapping", None)
    return LogitHead(scale=scale, softcap=float(softcap) if softcap else None)


def sample_with(
    model: nn.Module,
    rollout: Any,
    tokenizer: Any,
    adapter: str | None,
    prompts: list[str],
    num_samples: int,
    greedy: bool = False,
    trainable: list[nn.Parameter] | None = None,
    weights: Callable[[], contextlib.AbstractContextManager[Any]] = contextlib.nullcontext,
) -> Any:
    """Sample with ``adapter`` active (``None`` = the base, adapters disabled), in eval mode.

    The one sampling path of training, validation and the deployed cascade. How the rollout
    uses the active adapter is its own business (``HFRollout`` merges it into its decode
    weights; vLLM samples its own copy). ``weights`` is entered around the rollout itself, once
    the adapter is chosen: sharded strategies gather the whole model there, once per rollout
    (:func:`agon_lightning.strategies.gathered`).
    """
    with generating(model), using(model, adapter, trainable), weights():
        return rollout.generate(model, tokenizer, prompts, num_samples, greedy)
