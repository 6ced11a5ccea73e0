"""What one weight sync costs: both adapters only (``vllm_server``) against merged full weights.

After every update the servers must sample the new policies. ``VLLMServerRollout`` sends
``alpha`` and ``beta`` as two PEFT adapter folders (only their LoRA tensors); the usual
alternative for one policy, merging the adapter into the base and pushing every weight
(TRL's server mode), needs one full model per policy: two for Agon. This measures, at the
Qwen3-0.6B architecture with random weights and LoRA rank 16 on all seven projections, the
bytes each way puts on the wire and the seconds the trainer spends producing them, written
as safetensors to ``/dev/shm`` (adapters: :func:`agon_lightning.rollout.vllm.adapter_state`
and :func:`~agon_lightning.rollout.vllm.write_adapter`, exactly what a push writes; merged:
PEFT's ``merge_adapter``, the base's state dict saved, ``unmerge_adapter``). The transfer and
the server's load come on top of both and grow with the bytes; they are not measured here.

    python -m benchmarks.bench_adapter_sync            # Qwen3-0.6B shape, bf16 and fp32
    python -m benchmarks.bench_adapter_sync --tiny     # the shipped tiny model's shape (seconds)
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.bench_memory import qwen3_0_6b_config
from benchmarks.common import LORA_TARGETS, add_results_dir, median, print_table, write_json

ADAPTERS = ("alpha", "beta")


def lora_model(config: Any, rank: int, dtype: torch.dtype) -> Any:
    """A random-weight causal LM of ``config`` in ``dtype`` with both adapters, every LoRA B random too."""
    from transformers import AutoModelForCausalLM

    from agon_lightning.adapters.policy import LoraOptions, attach_adapters

    torch.manual_seed(0)
    base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model = attach_adapters(base, ADAPTERS, LoraOptions(r=rank, alpha=2 * rank, target_modules=LORA_TARGETS))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.01)  # a trained adapter: a merge really changes every adapted weight
    return model


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def adapters_only(model: Any, root: Path) -> int:
    """Write both adapters as a push does; the bytes written."""
    from agon_lightning.rollout.vllm import adapter_state, write_adapter

    for name in ADAPTERS:
        write_adapter(model, name, root / name, adapter_state(model, name))
    return folder_bytes(root)


def merged_weights(model: Any, root: Path) -> int:
    """One full merged model per adapter, as a merge-and-push sync needs for two policies; the bytes written."""
    from safetensors.torch import save_model

    root.mkdir(parents=True)
    for name in ADAPTERS:
        model.set_adapter(name)
        model.merge_adapter()
        base = model.get_base_model()
        with torch.no_grad():
            plain = {k: v for k, v in base.state_dict().items() if "lora_" not in k}
        module = torch.nn.Module()  # save_model handles the tied embedding once, as a checkpoint has it
        for i, v in enumerate(plain.values()):
            module.register_buffer(f"t{i}", v)
        save_model(module, str(root / f"{name}.safetensors"))
        model.unmerge_adapter()
    return folder_bytes(root)


def sync_costs(config: Any, rank: int, dtype: torch.dtype, rounds: int) -> dict[str, Any]:
    """Median seconds and bytes of both syncs over ``rounds`` rounds (one model, fresh folders each time)."""
    model = lora_model(config, rank, dtype)
    scratch = "/dev/shm" if Path("/dev/shm").is_dir() else None
    results: dict[str, Any] = {}
    for label, write in (("adapters only", adapters_only), ("merged full weights", merged_weights)):
        seconds, size = [], 0
        for _ in range(rounds):
            root = Path(tempfile.mkdtemp(prefix="agon-sync-", dir=scratch))
            try:
                start = time.perf_counter()
                size = write(model, root / "out")
                seconds.append(time.perf_counter() - start)
            finally:
                shutil.rmtree(root, ignore_errors=True)
        results[label] = {"bytes": size, "seconds": median(seconds), "all_seconds": seconds}
    params = sum(p.numel() for n, p in model.named_parameters() if "lora_" not in n)
    del model
    ratio = results["merged full weights"]["bytes"] / results["adapters only"]["bytes"]
    return {
        "dtype": str(dtype).removeprefix("torch."),
        "rank": rank,
        "base_params": params,
        "byte_ratio": ratio,
        **results,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument(
        "--tiny", action="store_true", help="the shipped tiny model's shape instead of Qwen3-0.6B's"
    )
    add_results_dir(parser)
    cli = parser.parse_args()
    torch.set_num_threads(1)
    if cli.tiny:
        from transformers import AutoConfig

        from agon_lightning.infra.model_source import resolve_model_path

        config, shape = AutoConfig.from_pretrained(resolve_model_path("agon:tiny-qwen3")), "tiny-qwen3"
    else:
        config, shape = qwen3_0_6b_config(), "qwen3-0.6b"
    records = [sync_costs(config, cli.rank, dtype, cli.rounds) for dtype in (torch.bfloat16, torch.float32)]
    rows = [
        (r["dtype"], way, f"{r[way]['bytes'] / 2**20:,.1f}", r[way]["seconds"])
        for r in records
        for way in ("adapters only", "merged full weights")
    ]
    table = print_table(
        f"One sync of both policies, {shape} (random weights), LoRA r={cli.rank} on 7 projections; "
        f"median of {cli.rounds}, one thread, written to /dev/shm",
        ["dtype", "what is sent", "MiB", "seconds to produce"],
        rows,
    )
    write_json(f"adapter_sync_{shape}", {"tables": [table], "records": records, "command": " ".join(
        ["python -m benchmarks.bench_adapter_sync", *(["--tiny"] if cli.tiny else []), f"--rounds {cli.rounds}"]
    )}, cli.results_dir)  # fmt: skip


if __name__ == "__main__":
    main()
