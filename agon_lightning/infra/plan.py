"""Will it fit? Per-device memory of an Agon run, predicted from the model's config alone.

Out of memory with a colocated inference engine is the most reported failure of GRPO
trainers, and it comes after minutes of loading. Everything that a step holds can be counted
from the config: the frozen base, the game's LoRA adapters with their gradients and AdamW state, the
activations of one joint backward (with or without checkpointing), the chunked log-prob
logits, the key/value cache of sampling, and vLLM's reserved share. Each strategy shards a
different part (:data:`SHARDS`); ``agon plan`` prints the parts per strategy and which fit.

The estimate counts tensors, not the allocator: add the framework's own overhead (a CUDA
context is ~0.5 GiB; a CPU process ~0.6 GiB of libraries) when comparing with a measured peak.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any

from agon_lightning.infra.game_shape import game_shape

GIB = 2**30
DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
STRATEGIES = ("single", "ddp", "fsdp2", "zero2", "zero3")
# What each strategy divides among the devices: base weights, adapter weights, gradients, optimizer state.
SHARDS: dict[str, tuple[bool, bool, bool, bool]] = {
    "single": (False, False, False, False),
    "ddp": (False, False, False, False),
    "zero2": (False, False, True, True),
    "zero3": (True, True, True, True),
    "fsdp2": (True, True, True, True),
}
ADAM_STATES = 2  # exp_avg and exp_avg_sq, float32


@dataclass(frozen=True)
class Shape:
    """The sizes of a Llama-family decoder (what the estimate reads from a model config)."""

    hidden: int
    intermediate: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    @classmethod
    def of(cls, config: Any) -> Shape:
        """From a ``transformers`` config (``Qwen3Config``, ``LlamaConfig``, … or ``AutoConfig``)."""
        heads = config.num_attention_heads
        return cls(
            hidden=config.hidden_size, intermediate=config.intermediate_size, layers=config.num_hidden_layers,
            heads=heads, kv_heads=getattr(config, "num_key_value_heads", None) or heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // heads, vocab=config.vocab_size,
            tied=bool(getattr(config, "tie_word_embeddings", False)),
        )  # fmt: skip

    def layer_params(self) -> int:
        """The projections' weights of all decoder layers."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return self.layers * (
            self.hidden * (q + 2 * kv) + q * self.hidden + 3 * self.hidden * self.intermediate
        )

    def base_params(self) -> int:
        """Every weight of the base (embeddings once if tied; norms included)."""
        norms = 2 * self.hidden + 2 * self.head_dim
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layer_params() + self.layers * norms + embeddings + self.hidden

    def lora_params(self, rank: int, targets: tuple[str, ...]) -> int:
        """One adapter's parameters: ``rank · (in + out)`` per targeted projection per layer."""
        q, kv, h, i = (
            self.heads * self.head_dim,
            self.kv_heads * self.head_dim,
            self.hidden,
            self.intermediate,
        )
        sizes = {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
                 "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}  # fmt: skip
        unknown = sorted(set(targets) - set(sizes))
        if unknown:
            raise ValueError(
                f"lora target_modules {unknown} are not projections of a Llama-family layer {sorted(sizes)}"
            )
        return self.layers * sum(rank * sum(sizes[t]) for t in targets)


@dataclass(frozen=True)
class Run:
    """The work of one step on one device.

    Attributes:
        prompts: P, problems per step on this device (the data batch divided among the devices).
        generations: N, samples per problem (each role samples P·N).
        prompt_tokens: Prompt length (longest, padded).
        new_tokens: T, ``max_new_tokens``.
        dtype: Base weights and activations: ``float32`` | ``bfloat16`` | ``float16``.
        rank: LoRA rank; ``targets`` the projections it adapts.
        micro_batch: Sequences per role per backward (0 = the whole step).
        checkpointing: Activation checkpointing (one layer's activations live at a time).
        logprob_chunk: Tokens per log-prob chunk (two ``chunk × V`` float32 tensors live).
        vllm_share: vLLM's ``gpu_memory_utilization`` (0 = sampling with the trained model).
        roles: Roles in one backward: 2 for ``game: agon`` (drafter and challenger), 1 for ``grpo``,
            the game's ``GameSpec.roles`` for another game.
        adapters: The game's policies: one LoRA adapter each (2 for Agon, 1 for GRPO and self-play).
    """

    prompts: int
    generations: int
    prompt_tokens: int
    new_tokens: int
    dtype: str = "bfloat16"
    rank: int = 16
    targets: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    micro_batch: int = 0
    checkpointing: bool = False
    logprob_chunk: int = 1024
    vllm_share: float = 0.0
    roles: int = 2
    adapters: int = 2

    def __post_init__(self) -> None:
        for name in ("prompts", "generations", "prompt_tokens", "new_tokens", "rank", "logprob_chunk"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.dtype not in DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(DTYPE_BYTES)}, got {self.dtype!r}")
        if self.roles < 1 or self.adapters < 1:
            raise ValueError(f"roles and adapters must be >= 1, got {self.roles} and {self.adapters}")
        if self.micro_batch < 0:
            raise ValueError(f"micro_batch must be >= 0, got {self.micro_batch}")
        if not 0 <= self.vllm_share < 1:
            raise ValueError(f"vllm_share (gpu_memory_utilization) must be in [0, 1), got {self.vllm_share}")


# ---------------------------------------------------------------------------- the parts, in bytes
def activation_bytes_per_token_layer(shape: Shape, dtype: str) -> float:
    """What one decoder layer keeps for its backward, per token, without checkpointing.

    The inputs of every product and norm and the outputs the backward reads: ``5 H + 3 q + 3 kv
    + 4 I`` values in the activation dtype; in low precision PEFT also keeps float32 copies of
    the adapted projections' inputs (``6 H + q + I``).
    """
    h, i = shape.hidden, shape.intermediate
    q, kv = shape.heads * shape.head_dim, shape.kv_heads * shape.head_dim
    width = DTYPE_BYTES[dtype]
    saved = width * (5 * h + 3 * q + 3 * kv + 4 * i)
    return saved + (4 * (6 * h + q + i) if width < 4 else 0)


def parts(shape: Shape, run: Run, strategy: str, devices: int) -> dict[str, float]:
    """Bytes per device of each part of a step under ``strategy`` on ``devices`` devices."""
    if strategy not in SHARDS:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    if strategy == "single" and devices != 1:
        raise ValueError(f"strategy 'single' runs on one device, got devices={devices}")
    base_s, adapter_s, grad_s, state_s = (devices if s else 1 for s in SHARDS[strategy])
    width = DTYPE_BYTES[run.dtype]
    base = shape.base_params() * width
    lora = shape.lora_params(run.rank, run.targets) * 4 * run.adapters  # float32 adapters
    rows = run.roles * (run.micro_batch or run.prompts * run.generations)  # every role in one backward
    tokens = rows * (run.prompt_tokens + run.new_tokens)
    per_layer = activation_bytes_per_token_layer(shape, run.dtype) * tokens
    layer_inputs = shape.layers * tokens * shape.hidden * width
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * width  # per token
    samples = run.prompts * run.generations
    out = {
        "base": base / base_s,
        "adapters": lora / adapter_s,
        "gradients": lora / grad_s,
        "optimizer": lora * ADAM_STATES / state_s,
        "activations": layer_inputs + per_layer if run.checkpointing else per_layer * shape.layers,
        "logprob_chunks": 2 * run.logprob_chunk * shape.vocab * 4,
        "kv_cache": 0.0 if run.vllm_share else samples * (run.prompt_tokens + run.new_tokens) * kv,
        # FSDP2/ZeRO-3 gather the whole base once per rollout for sampling with the trained model
        "gathered_for_sampling": base * (1 - 1 / base_s) if not run.vllm_share else 0.0,
        # the decode loop's fused (and, in float32, merged) copy of every layer's projections
        "sampling_copy": 0.0 if run.vllm_share else shape.layer_params() * width,
    }
    return out


def peak_bytes(p: dict[str, float], device_bytes: float = 0.0, vllm_share: float = 0.0) -> float:
    """The peak: the resident parts plus the larger of sampling and the update, plus vLLM's reservation."""
    resident = p["base"] + p["adapters"] + p["gradients"] + p["optimizer"]
    sampling = p["kv_cache"] + p["gathered_for_sampling"] + p["sampling_copy"]
    update = p["activations"] + p["logprob_chunks"]
    return resident + max(sampling, update) + vllm_share * device_bytes


# ---------------------------------------------------------------------------- the command
def _merged_yaml(paths: list[str]) -> dict[str, Any]:
    """The ``--config`` files merged in order, later keys over earlier ones (as the CLI merges them)."""
    import yaml

    def merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
        out = dict(a)
        for key, value in b.items():
            out[key] = (
                merge(out[key], value)
                if isinstance(value, dict) and isinstance(out.get(key), dict)
                else value
            )
        return out

    merged: dict[str, Any] = {}
    for path in paths:
        with open(path) as f:
            merged = merge(merged, yaml.safe_load(f) or {})
    return merged


def model_shape(source: str) -> Shape:
    """The shape of ``source``: a published Qwen3 shape by name (``qwen3-0.6b``, ``Qwen/Qwen3-0.6B``), else
    ``AutoConfig`` from a directory, ``agon:NAME`` or a Hub id (the config file only, no weights)."""
    from agon_lightning.infra.shapes import QWEN3, qwen3_config

    name = source.rsplit("/", 1)[-1].lower()
    if name in QWEN3:
        return Shape.of(qwen3_config(name))
    from transformers import AutoConfig

    from agon_lightning.infra.model_source import resolve_model_path

    return Shape.of(AutoConfig.from_pretrained(resolve_model_path(source)))


def run_of(config: dict[str, Any], devices: int, prompt_tokens: int) -> Run:
    """The per-device :class:`Run` of an ``agon fit`` config (the data batch divided among the devices)."""
    model = config.get("model", {})
    grpo, lora = model.get("grpo", {}) or {}, model.get("lora", {}) or {}
    rollout = (model.get("rollout", {}) or {}).get("init_args", {}) or {}
    data = (config.get("data", {}) or {}).get("init_args", {}) or {}
    targets = lora.get("target_modules") or Run.targets
    adapters, roles = game_shape(model)
    return Run(
        prompts=math.ceil(int(data.get("batch_size", 16)) / devices),
        generations=int(grpo.get("num_generations", 8)), prompt_tokens=prompt_tokens,
        new_tokens=int(rollout.get("max_new_tokens", 64)), dtype=model.get("dtype", "float32"),
        rank=int(lora.get("r", 16)), targets=tuple(targets), micro_batch=int(grpo.get("micro_batch_size", 0)),
        checkpointing=bool(model.get("gradient_checkpointing", False)),
        logprob_chunk=int(grpo.get("logprob_chunk_size", 1024)),
        vllm_share=float(rollout.get("gpu_memory_utilization", 0.3)) if "vllm" in str(
            (model.get("rollout") or {}).get("class_path", "")).lower() else 0.0,
        adapters=adapters, roles=roles,
    )  # fmt: skip


def plan_table(shape: Shape, run: Run, devices: int, device_gib: float, name: str) -> str:
    """A Markdown table: each part and the peak per device for every strategy, and whether it fits."""
    columns = ["strategy", "base", "adapters", "grads", "AdamW", "activations", "log-prob chunks",
               "KV cache", "gathered to sample", "sampling copy", "vLLM share", "peak GiB/device", f"fits {device_gib:g} GiB"]  # fmt: skip
    lines = [f"### {name} on {devices} × {device_gib:g} GiB: P={run.prompts}/device N={run.generations} "
             f"prompt {run.prompt_tokens} + T={run.new_tokens}, {run.dtype}, r={run.rank}, "
             f"checkpointing {'on' if run.checkpointing else 'off'}, micro-batch {run.micro_batch or 'all'}",
             "", "| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]  # fmt: skip
    for strategy in STRATEGIES:
        if (strategy == "single") != (devices == 1):
            continue
        p = parts(shape, run, strategy, devices)
        peak = peak_bytes(p, device_gib * GIB, run.vllm_share)
        cells = [p[k] / GIB for k in ("base", "adapters", "gradients", "optimizer", "activations",
                                      "logprob_chunks", "kv_cache", "gathered_for_sampling", "sampling_copy")]  # fmt: skip
        cells += [run.vllm_share * device_gib, peak / GIB]
        lines.append(
            "| "
            + " | ".join(
                [strategy, *(f"{c:.2f}" for c in cells), "yes" if peak <= device_gib * GIB else "**no**"]
            )
            + " |"
        )
    return "\n".join(lines)


def plan_main(argv: list[str]) -> None:
    """``agon plan``: predicted per-device memory of a config's step under every strategy."""
    parser = argparse.ArgumentParser(prog="agon plan", description=plan_main.__doc__)
    parser.add_argument("--config", action="append", required=True, help="an agon fit config (repeatable)")
    parser.add_argument("--gpus", type=int, default=1, help="devices the run spreads over")
    parser.add_argument("--gpu-memory-gib", type=float, default=80.0, help="memory of one device")
    parser.add_argument("--model", help="another model source or a Qwen3 shape name (qwen3-0.6b … qwen3-8b)")
    parser.add_argument("--prompt-tokens", type=int, default=256, help="longest prompt, in tokens")
    cli = parser.parse_args(argv)
    if cli.gpus < 1 or cli.gpu_memory_gib <= 0:
        parser.error(f"--gpus must be >= 1 and --gpu-memory-gib > 0, got {cli.gpus} and {cli.gpu_memory_gib}")
    config = _merged_yaml(cli.config)
    source = cli.model or config.get("model", {}).get("model_name_or_path") or "agon:tiny-qwen3"
    print(plan_table(model_shape(source), run_of(config, cli.gpus, cli.prompt_tokens), cli.gpus,
                     cli.gpu_memory_gib, source))  # fmt: skip
