"""Sampling on running vLLM servers: both adapters pushed as versioned LoRAs after every update.

The in-process backend (:mod:`agon_lightning.rollout.vllm`) runs an engine inside each
training process. Past one machine, inference runs on its own devices: one or more vLLM
servers (``agon vllm-serve --config ...`` prints the command), reached over plain HTTP by
URL. :class:`VLLMServerRollout` is that backend.

**Keeping the servers current.** After an optimizer step the changed adapters are marked;
before the next ``generate``, every rank gathers only their LoRA tensors (a collective under
FSDP2 and ZeRO-3), and global rank 0 writes them in PEFT's layout to a directory the servers
read (``adapter_dir``: ``/dev/shm`` by default, a shared path across nodes), loads them on
every replica under *new* names (``alpha-v7``, ``beta-v7``: a same-name reload can serve
stale cached blocks), and only once every replica holds both does it unload the versions
they replace, so both adapters switch together. The other ranks wait for rank 0's word
(one broadcast), so a failed push stops every rank. At the first push of a process (a fresh
run, or one resumed with ``--ckpt_path last``) versions a previous process left on the
servers are unloaded and the numbering continues after them.

**Versions.** Every sample records the name of the adapter version that produced it (the
``model`` of the server's answer, :attr:`RolloutBatch.versions`); one that is not the version
the trainer expects fails the step with an :class:`AdapterVersionError` naming both.

**Log-probs.** The servers report each sampled token's log-prob after temperature when
started with ``--logprobs-mode processed_logprobs`` (the printed command has it); they fill
:attr:`RolloutBatch.logprobs` for ``train/logprob_mismatch`` and ``grpo.tis_cap``.

**Failures.** A server that is down, answers an error or times out raises a
:class:`~agon_lightning.rollout.server_http.ReplicaError`: one line naming the server, the
call and the adapter. The run stops; ``--ckpt_path last`` resumes from the last checkpoint
written (``every_n_train_steps: 1`` makes that the last finished step) and sends the
adapters again.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

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
from agon_lightning.rollout.server_http import (
    AdapterVersionError,
    Replica,
    ReplicaError,
    check_url,
    fan_out,
    replica_error,
    run_all,
)
from agon_lightning.rollout.vllm import adapter_state, write_adapter

TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")  # a token as the server names it (return_tokens_as_token_ids)


def version_name(adapter: str, version: int) -> str:
    """The name version ``version`` of ``adapter`` is served under: ``alpha-v7``."""
    return f"{adapter}-v{version}"


def version_of(name: str, adapter: str) -> int | None:
    """``7`` for ``alpha-v7`` and adapter ``alpha``; ``None`` for any other name."""
    match = re.fullmatch(re.escape(adapter) + r"-v(\d+)", name)
    return int(match.group(1)) if match else None


def check_versions(expected: Sequence[str], served: Sequence[str]) -> None:
    """Raise an AdapterVersionError naming both at the first row whose ``served`` differs from ``expected``."""
    for row, (want, got) in enumerate(zip(expected, served)):
        if want != got:
            raise AdapterVersionError(
                f"sample {row} came from {got!r}, but the trainer expects {want!r}: the server answered "
                "with another adapter version than the one it was asked for (is another run pushing "
                "adapters to the same servers?)"
            )


def shared_memory_dir() -> str | None:
    """``/dev/shm`` when it exists and is writable, else ``None`` (the system's temporary directory)."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


def _rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _from_rank_zero(value: Any) -> Any:
    """Rank 0's ``value`` on every rank (one broadcast; ``value`` itself without a process group)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _first_failure(failure: BaseException | None) -> BaseException | None:
    """The lowest rank's failure on every rank (one all-gather; ``failure`` itself without a process group)."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return failure
    everyone: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(everyone, failure)
    return next((f for f in everyone if f is not None), None)


class VLLMServerRollout(Rollout):
    """Samples on running vLLM servers (OpenAI-compatible API), both adapters pushed as versioned LoRAs.

    Start the servers first (``agon vllm-serve --config CONFIG`` prints the command line: LoRA
    on, room for both adapters twice, the base, runtime LoRA loading allowed). Prompts of each
    adapter are split evenly over the replicas, sent at once.

    Args:
        urls: The servers, ``http://HOST:PORT`` each; every one receives every push.
        max_new_tokens: Completion budget; longer completions are truncated.
        temperature: Sampling temperature.
        top_p: Nucleus sampling mass.
        top_k: Top-k cutoff (0 = off).
        adapter_dir: Directory the pushed adapters are written to, readable by every server
            (a shared filesystem across nodes); ``None``: ``/dev/shm`` when there is one. A
            private folder is made inside it and removed at exit.
        timeout_s: Seconds any one request may take before its server counts as gone.
        max_staleness: K >= 1 samples the next step's drafts while this step updates, with the
            versions the servers hold (one behind; needs ``grpo.tis_cap``); 0 = synchronous.
    """

    keeps_own_weights = True  # the servers hold the base; only the adapters are read from the model

    def __init__(
        self,
        urls: list[str],
        max_new_tokens: int = 64,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        adapter_dir: str | None = None,
        timeout_s: float = 600.0,
        max_staleness: int = 0,
    ) -> None:
        self._keep_sampling(max_new_tokens, temperature, top_p, top_k)
        self._keep_staleness(max_staleness)
        if isinstance(urls, str) or not urls:
            raise ValueError(f"urls must be a non-empty list of server URLs, got {urls!r}")
        urls = [check_url(u) for u in urls]
        if len(set(urls)) != len(urls):
            raise ValueError(f"urls names a server twice: {urls}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if adapter_dir is not None and not os.path.isdir(adapter_dir):
            raise ValueError(f"adapter_dir {adapter_dir!r} is not a directory")
        self.urls = urls
        self.adapter_dir = adapter_dir
        self.timeout_s = timeout_s
        self.transport: Any = None  # an httpx transport instead of the network (tests)
        self._replicas: list[Replica] | None = None
        self._base_name: str | None = None  # the base model's name on the servers
        self._model_ref: weakref.ref | None = None  # the PeftModel whose adapters the servers hold
        self._stale: set[str] = set()  # adapters changed since they were pushed
        self._current: dict[str, str] = {}  # adapter → the version name samples must come from
        self._dir: Path | None = None  # rank 0's folder of pushed adapters
        self._first_push = True

    # ------------------------------------------------------------------ the servers
    @property
    def replicas(self) -> list[Replica]:
        if self._replicas is None:
            self._replicas = [Replica(u, self.timeout_s, self.transport) for u in self.urls]
        return self._replicas

    def _base(self) -> str:
        """The name the servers serve the base under (the model listed without a parent), the same on all."""
        if self._base_name is None:
            names = fan_out(self.replicas, lambda r: _base_of(r, r.call("GET", "/v1/models", None)))
            if len(set(names)) > 1:
                raise ValueError(
                    "the vLLM servers serve different base models: "
                    + ", ".join(f"{r.url}: {n}" for r, n in zip(self.replicas, names))
                )
            self._base_name = names[0]
        return self._base_name

    def _sync(self, model: Any) -> None:
        """Push every stale adapter (all ranks call this; rank 0 talks to the servers)."""
        if self._model_ref is None or self._model_ref() is not model:
            self._model_ref = weakref.ref(model)
            self._stale = set(policies_of(model))  # snapshot slots stay in the trainer
        if not self._stale:
            return
        names = sorted(self._stale)
        states = {n: adapter_state(model, n) for n in names}  # every rank: a collective under sharding
        outcome: Any = None
        if _rank() == 0:
            try:
                outcome = self._push(model, states)
            except (ReplicaError, ValueError, OSError) as err:
                outcome = err
        outcome = _from_rank_zero(outcome)
        if isinstance(outcome, BaseException):
            raise outcome
        self._current.update(outcome)
        self._stale.difference_update(names)

    def _push(self, model: Any, states: dict[str, dict[str, torch.Tensor]]) -> dict[str, str]:
        """Rank 0: write, load on every replica, then unload the replaced versions; the new names by adapter."""
        if self._dir is None:
            self._dir = Path(
                tempfile.mkdtemp(prefix="agon-lora-", dir=self.adapter_dir or shared_memory_dir())
            )
            weakref.finalize(self, shutil.rmtree, str(self._dir), True)
        if self._first_push:  # versions left on the servers by an earlier process of this run
            held = self._leftovers(list(states))
        else:
            held = {n: [(i, v) for i in range(len(self.replicas))] for n, v in self._current.items()}
        new = {
            n: version_name(n, max((version_of(v, n) or 0 for _, v in held.get(n, [])), default=0) + 1)
            for n in states
        }
        for name, version in new.items():
            path = write_adapter(model, name, self._dir / version, states[name])
            body = {"lora_name": version, "lora_path": str(path)}
            fan_out(self.replicas, lambda r, b=body, v=version: r.call("POST", "/v1/load_lora_adapter", v, b))
        for name in new:  # every replica holds both new versions: the old ones can go
            gone = held.get(name, [])
            jobs = [
                lambda r=self.replicas[i], v=v: r.call("POST", "/v1/unload_lora_adapter", v, {"lora_name": v})
                for i, v in gone
            ]
            if jobs:
                run_all(jobs)
            for v in dict.fromkeys(v for _, v in gone):
                shutil.rmtree(self._dir / v, ignore_errors=True)
        self._first_push = False
        return new

    def _leftovers(self, adapters: list[str]) -> dict[str, list[tuple[int, str]]]:
        """``(replica index, version name)`` of every version of ``adapters`` the servers hold now."""
        held: dict[str, list[tuple[int, str]]] = {}
        for i, listing in enumerate(fan_out(self.replicas, lambda r: r.call("GET", "/v1/models", None))):
            for entry in (listing or {}).get("data", []):
                for a in adapters:
                    if version_of(str(entry.get("id")), a) is not None:
                        held.setdefault(a, []).append((i, str(entry["id"])))
        return held

    def on_weights_updated(self, model: Any, adapter_names: Sequence[str]) -> None:
        self._stale.update(adapter_names)

    # ------------------------------------------------------------------ sampling
    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        return self._generate(model, tokenizer, prompts, num_samples, greedy, adapter_names, together=True)

    def generate_ahead(self, model, tokenizer, prompts, num_samples, adapter_names):
        if self._stale or self._model_ref is None or self._model_ref() is not model:
            raise RuntimeError(
                "VLLMServerRollout samples ahead only with the adapter versions the servers hold, but adapters "
                f"{sorted(self._stale) or sorted(model.peft_config)} are not pushed yet (sample once first)"
            )
        return self._generate(model, tokenizer, prompts, num_samples, False, adapter_names, together=False)

    def _generate(
        self,
        model: Any,
        tokenizer: Any,
        prompts: list[str],
        num_samples: int,
        greedy: bool,
        adapter_names: list[str | None] | None,
        together: bool,
    ) -> RolloutBatch:
        """``generate``; ``together``: every rank learns of any rank's failure (a collective), else only this one."""
        check_generate_args(prompts, adapter_names)
        if not hasattr(model, "peft_config"):
            raise TypeError(
                f"VLLMServerRollout samples the adapters of a PeftModel; got a {type(model).__name__} without adapters"
            )
        self._sync(model)
        names = row_adapters(model, prompts, adapter_names, self._current, "on the servers")
        device = next(model.parameters()).device
        ids, attn = encode_prompts(tokenizer, prompts, num_samples, device)  # [B, P], left-padded
        eos_ids = stop_token_ids(model, tokenizer)
        tokens = [row[mask.bool()].tolist() for row, mask in zip(ids[::num_samples], attn[::num_samples])]
        body = dict(
            n=num_samples, max_tokens=self.max_new_tokens, temperature=0.0 if greedy else self.temperature,
            top_p=1.0 if greedy else self.top_p, top_k=-1 if greedy or not self.top_k else self.top_k,
            stop_token_ids=eos_ids, ignore_eos=False, logprobs=0, return_tokens_as_token_ids=True,
        )  # fmt: skip
        failure: BaseException | None = None
        try:
            served = [self._base() if n is None else self._current[n] for n in names]
            samples, versions = self._sample(served, tokens, num_samples, body)
            check_versions([s for s in served for _ in range(num_samples)], versions)
        except (ReplicaError, AdapterVersionError) as err:
            failure = err
        if together:  # any rank's failure stops every rank: none waits in a collective
            failure = _first_failure(failure)
        if failure is not None:
            raise failure
        width = max(1, max(len(t) for t, _ in samples))
        completion = torch.full((len(samples), width), tokenizer.pad_token_id, dtype=torch.long)
        logprobs = torch.zeros(len(samples), width)
        for i, (toks, lps) in enumerate(samples):
            completion[i, : len(toks)] = torch.tensor(toks, dtype=torch.long)
            logprobs[i, : len(toks)] = torch.tensor(lps)
        mask, truncated = completion_mask(completion, eos_ids)
        completion = completion.masked_fill(mask == 0, tokenizer.pad_token_id)
        texts = tokenizer.batch_decode(completion, skip_special_tokens=True)
        logprobs = logprobs * mask
        return RolloutBatch(
            ids, attn, completion.to(device), mask.to(device), texts, mask.sum(dim=1).to(device),
            truncated.to(device), logprobs.to(device), versions,
        )  # fmt: skip

    def _sample(
        self, served: list[str], tokens: list[list[int]], num_samples: int, body: dict[str, Any]
    ) -> tuple[list[tuple[list[int], list[float]]], list[str]]:
        """``num_samples`` completions of each prompt ``tokens[i]`` by version ``served[i]``; each row's version."""
        jobs, parts = [], []
        for name in dict.fromkeys(served):  # each version's prompts split evenly over the replicas
            rows = [i for i, s in enumerate(served) if s == name]
            for k, replica in enumerate(self.replicas):
                part = rows[k :: len(self.replicas)]
                if part:
                    request = {"model": name, "prompt": [tokens[i] for i in part], **body}
                    jobs.append(lambda r=replica, q=request: r.call("POST", "/v1/completions", q["model"], q))
                    parts.append((replica, name, part))
        samples: list[Any] = [None] * (len(served) * num_samples)
        versions: list[str] = [""] * len(samples)
        for (replica, name, part), answer in zip(parts, run_all(jobs)):
            choices = sorted(answer["choices"], key=lambda c: c["index"])
            if len(choices) != len(part) * num_samples:
                raise replica_error(
                    replica.url, "POST /v1/completions", name,
                    f"answered {len(choices)} completions for {len(part)} prompts x {num_samples}",
                )  # fmt: skip
            for j, prompt in enumerate(part):
                for k in range(num_samples):
                    row = prompt * num_samples + k
                    samples[row] = _tokens_and_logprobs(choices[j * num_samples + k], replica.url, name)
                    versions[row] = str(answer.get("model"))
        return samples, versions


def _base_of(replica: Replica, listing: Any) -> str:
    """The id of the model a server lists without a parent (its base)."""
    bases = [e["id"] for e in (listing or {}).get("data", []) if e.get("parent") is None]
    if len(bases) != 1:
        raise replica_error(
            replica.url, "GET /v1/models", None, f"lists {len(bases)} base models ({bases}), expected one"
        )
    return str(bases[0])


def _tokens_and_logprobs(choice: dict[str, Any], url: str, name: str) -> tuple[list[int], list[float]]:
    """The sampled token ids and their log-probs from one completion choice of the server."""
    lp = choice.get("logprobs") or {}
    names, values = lp.get("tokens"), lp.get("token_logprobs")
    if names is None or values is None or len(names) != len(values):
        raise replica_error(url, "POST /v1/completions", name, "answered without per-token log-probs")
    ids = []
    for token in names:
        match = TOKEN_ID.match(str(token))
        if match is None:
            raise replica_error(
                url, "POST /v1/completions", name, f"named a token {token!r}, not token_id:N (a vLLM server?)"
            )
        ids.append(int(match.group(1)))
    return ids, [float("-inf") if v is None else float(v) for v in values]
