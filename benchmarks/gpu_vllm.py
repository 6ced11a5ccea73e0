"""GPU: step time with each rollout backend on Qwen3-0.6B's architecture (random init, no download).

    python benchmarks/gpu_vllm.py [--steps 4] [--max-new-tokens 512] [--out benchmarks/results/gpu_vllm.json]

Needs one CUDA GPU and ``pip install -e ".[vllm]"``. Runs ``scripts/gpu_smoke.py``'s single-device
Agon run (bf16, P = 8 problems × N = 8, random Qwen3-0.6B weights saved once, the project's
character tokenizer) twice in fresh processes: with ``HFRollout`` and with ``--model.rollout=vllm``
(both adapters resident in one engine, pushed after every step). Random weights rarely sample
EOS, so both backends generate about ``max_new_tokens`` per completion: equal work. Prints step
time, generation tokens/s and peak GPU memory per backend; writes the JSON to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
from gpu_smoke import build_model  # noqa: E402

BACKENDS = {
    "hf": [],
    "vllm": ["--model.rollout=vllm", "--model.rollout.init_args.gpu_memory_utilization=0.35"],
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=512)
    parser.add_argument("--out", default=str(ROOT / "benchmarks/results/gpu_vllm.json"))
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available():
        sys.exit("gpu_vllm.py measures GPU step times and needs a CUDA GPU; on a CPU run "
                 "python -m benchmarks.bench_rollout_backends")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="agon-gpu-vllm-"))
    model_dir = work / "qwen3-0.6b-random"
    build_model(model_dir)
    rows = {}
    for backend, overrides in BACKENDS.items():
        out = work / f"{backend}.json"
        cmd = [
            sys.executable, str(ROOT / "scripts/gpu_smoke.py"), "--steps", str(args.steps), "--one", "single",
            str(model_dir), str(out), "--", *overrides,
            f"--model.rollout.init_args.max_new_tokens={args.max_new_tokens}",
        ]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            rows[backend] = {
                "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed"
            }
            continue
        rows[backend] = json.loads(out.read_text())
    print(f"{'backend':<10}{'step s (median)':>16}{'gen tok/s':>12}{'peak GiB':>10}")
    for backend, r in rows.items():
        if "error" in r:
            print(f"{backend:<10} FAILED: {r['error'][:120]}")
            continue
        steps = r["step_s"][1:] or r["step_s"]  # the first step includes vLLM's start-up
        step = sorted(steps)[len(steps) // 2]
        tps = sorted(r["gen_tokens_per_s"])[len(r["gen_tokens_per_s"]) // 2]
        print(f"{backend:<10}{step:>16.2f}{tps:>12.0f}{r['peak_gpu_gib']:>10.2f}")
    Path(args.out).write_text(json.dumps(rows, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
