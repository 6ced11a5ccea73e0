"""Each strategy against DDP on the same games: update difference, checkpoint round trip, exact resume.

What ``tests/test_strategies.py`` asserts, printed as numbers: 2 gloo processes on CPU, the
tests' tiny Qwen3 and scripted rollouts (``tests/ddp_worker.py``: 2 steps, SGD with momentum,
gradient clipping active, a checkpoint after each step), for DDP and each sharded strategy;
then a fresh pair of processes resumes each from its step-1 checkpoint::

    python scripts/check_strategies.py [--out benchmarks/results/strategies.json]
    python scripts/check_strategies.py --strategies fsdp2 --dtype bfloat16
    python scripts/check_strategies.py --rank-cases   # the rank-dependent cases instead


Per strategy: the largest |weight difference| from DDP after each step (both adapters), the
largest update, whether the restored adapters and optimizer state are bit-identical to the
saved ones, whether resumed step 2 equals the unbroken step 2 bit for bit, and the checkpoint
(format, bytes, tensors held).

``--rank-cases`` runs ``tests/rank_cases_worker.py`` instead (one launch per strategy, every
case of work that differs between the ranks: lengths, prompt lengths, zero-variance groups,
drafts without answers, a non-finite loss on one rank, an uneven last batch, a validation set
that does not divide by the ranks) and prints, per case and strategy, the largest |adapter
difference| from DDP's, or the first call at which the ranks' collectives or ZeRO-3-hooked
module calls differed, or the error the case stopped with.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "ddp_worker.py"
RANK_WORKER = ROOT / "tests" / "rank_cases_worker.py"
RANK_STRATEGIES = {"ddp": "ddp", "fsdp2": "fsdp2", "deepspeed_zero2": "zero2", "deepspeed_zero3": "zero3"}
CASES = {
    "fsdp2": ("fsdp2", ["--no-checkpointing"]),
    "fsdp2_one_file": ("fsdp2", ["--format", "file"]),
    "deepspeed_zero2": ("zero2", []),
    "deepspeed_zero3": ("zero3", ["--no-checkpointing"]),
}


def run(strategy: str, out: Path, model_dir: Path, *extra: str) -> list[dict]:
    out.mkdir(parents=True)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    cmd = [sys.executable, str(WORKER), strategy, "2", str(out), str(model_dir), *extra]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(f"{strategy} failed:\n{proc.stderr[-4000:]}")
    return [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]


def rank_cases(model_dir: Path, work: Path) -> None:
    """The table of rank-dependent cases × strategies: largest |adapter difference| from DDP's."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(WORKER.parent)}
    results = {}
    for name, strategy in RANK_STRATEGIES.items():
        out = work / f"rank-{name}"
        out.mkdir(parents=True)
        proc = subprocess.run([sys.executable, str(RANK_WORKER), strategy, str(out), str(model_dir)],
                              env=env, capture_output=True, text=True, timeout=1800)  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"{name} failed:\n{proc.stderr[-4000:]}")
        results[name] = [torch.load(out / f"rank{r}.pt", weights_only=False) for r in range(2)]
    from rank_cases_worker import CASES

    print("\n### Rank-dependent work: largest |adapter difference| from DDP (2 gloo processes)\n")
    print("| case | " + " | ".join(RANK_STRATEGIES) + " |")
    print("|---|" + "---|" * len(RANK_STRATEGIES))
    ddp = results["ddp"][0]
    for case, what in CASES.items():
        cells = []
        for name in RANK_STRATEGIES:
            ours, other = results[name][0][case], results[name][1][case]
            if ours["error"] or other["error"]:
                cells.append(f"stopped: {ours['error'] or other['error']}")
            elif ours["divergence"]:
                cells.append(f"ranks diverged, stopped: {ours['divergence']}")
            else:
                same = all(torch.equal(v, other["weights"][n]) for n, v in ours["weights"].items())
                cells.append(
                    f"{max_diff(ours['weights'], ddp[case]['weights']):.1e}"
                    + ("" if same else " (ranks differ)")
                )
        print(f"| {case}: {what} | " + " | ".join(cells) + " |")


def max_diff(a: dict, b: dict) -> float:
    return max(float((a[n].float() - b[n].float()).abs().max()) for n in a)


def size(path: Path) -> int:
    return (
        path.stat().st_size
        if path.is_file()
        else sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    )


def compare(name: str, runs: list[dict], resumed: list[dict], ddp: list[dict], ckpt: Path) -> dict:
    first = runs[0]
    steps = [
        max_diff(ours, theirs) for (_, _, ours), (_, _, theirs) in zip(first["recorded"], ddp[0]["recorded"])
    ]
    updates = [max_diff(after, before) for before, _, after in first["recorded"]]
    restored = all(
        all(torch.equal(b["restored"][0][n], v) for n, v in a["recorded"][0][2].items())
        for a, b in zip(runs, resumed)
    )
    optimizer = all(
        len(a["optimizer"][0]["state"]) == len(b["restored"][1]["state"]) > 0
        and all(torch.equal(x, y) for x, y in zip(a["optimizer"][0]["state"], b["restored"][1]["state"]))
        for a, b in zip(runs, resumed)
    )
    resume = all(
        all(torch.equal(b["weights"][n], v) for n, v in a["weights"].items()) for a, b in zip(runs, resumed)
    )
    init = all(torch.equal(first["restored"][0][n], v) for n, v in ddp[0]["restored"][0].items())
    return {
        "strategy": name, "init_equals_ddp": init, "max_diff_vs_ddp_per_step": steps, "max_update_per_step": updates,
        "restored_bit_identical": restored, "optimizer_state_bit_identical": optimizer, "resume_exact": resume,
        "checkpoint": {"path": ckpt.name, "kind": "folder" if ckpt.is_dir() else "file", "bytes": size(ckpt)},
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--strategies", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--out", default=None, help="JSON file (default: print only)")
    parser.add_argument(
        "--rank-cases", action="store_true", help="the rank-dependent cases × strategies table"
    )
    args = parser.parse_args()
    sys.path.insert(0, str(WORKER.parent))
    from conftest import build_char_tokenizer, build_tiny_model

    work = Path(tempfile.mkdtemp(prefix="agon-strategies-"))
    model_dir = work / "tiny"
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    if args.rank_cases:
        rank_cases(model_dir, work)
        return
    dtype = ["--dtype", args.dtype]
    ddp = run("ddp", work / "ddp", model_dir, *dtype)
    rows = []
    for name in args.strategies:
        strategy, extra = CASES[name]
        runs = run(strategy, work / name, model_dir, *extra, *dtype)
        ckpt = work / name / "checkpoints" / "epoch-epoch=0.ckpt"
        resumed = run(strategy, work / f"{name}-resumed", model_dir, *extra, *dtype, "--resume", str(ckpt))
        rows.append(compare(name, runs, resumed, ddp, ckpt))
    print(f"\n### Strategies against DDP ({args.dtype} base, 2 gloo processes, 2 steps)\n")
    print("| strategy | init = DDP's | max abs diff vs DDP (step 1, 2) | max update | restored bit-identical "
          "(adapters, optimizer) | resume exact | checkpoint |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        diffs = ", ".join(f"{d:.1e}" for d in r["max_diff_vs_ddp_per_step"])
        c = r["checkpoint"]
        print(f"| {r['strategy']} | {r['init_equals_ddp']} | {diffs} | {max(r['max_update_per_step']):.1e} | "
              f"{r['restored_bit_identical']}, {r['optimizer_state_bit_identical']} | {r['resume_exact']} | "
              f"{c['kind']}, {c['bytes'] / 1024:.0f} KiB |")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps({"dtype": args.dtype, "rows": rows}, indent=2))
        print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
