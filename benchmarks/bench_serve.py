"""``agon serve`` under load: requests/s and p50/p95 latency at 1, 4 and 16 concurrent clients.

The shipped tiny Qwen3 with fresh adapters is served by the real command (``agon serve``, HF
backend, one torch thread) and asked greedy chat completions of the default cascade (draft,
summary, answer) by the ``openai`` client from 1, 4 or 16 threads, each sending its next
request when the last one is answered. The same requests run against a second server with
``--max-batch-size 1`` (no batching), started beside the first and measured in turn (A B B A,
each value the mean of its two rounds), so the table's ratio is batching's gain on this machine,
whatever else runs on it.

    python -m benchmarks.bench_serve
    python -m benchmarks.bench_serve --requests 96 --clients 1 4 16 32 --max-new-tokens 80
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import add_results_dir, print_table, write_json


def make_bundle(path: Path, max_new_tokens: int = 40) -> Path:
    """A bundle of the shipped tiny Qwen3 with fresh adapters (``beta`` Gaussian) and the default prompts."""
    import torch

    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.deploy.bundle import save_bundle
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule

    torch.manual_seed(0)
    module = AgonModule(
        model_name_or_path="agon:tiny-qwen3",
        lora=LoraOptions(r=4, beta_init_std=0.05),
        rollout=HFRollout(max_new_tokens=max_new_tokens),
        prompts=Prompts(challenge="{question}\nRival: {summary}"),
    )
    module.configure_model()
    return save_bundle(module, path)


def launch(bundle: Path, *args: str, timeout: float = 120) -> tuple[str, subprocess.Popen, list[str]]:
    """Start ``agon serve --bundle BUNDLE --port 0 ARGS`` and wait until it answers.

    Returns ``(base URL, process, output lines so far and to come)``.
    """
    agon = shutil.which("agon", path=str(Path(sys.executable).parent)) or shutil.which("agon")
    proc = subprocess.Popen(
        [agon, "serve", "--bundle", str(bundle), "--port", "0", "--threads", "1", "--log-level", "warning", *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    lines: list[str] = []
    url = None
    deadline = time.monotonic() + timeout
    while url is None and time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            break
        lines.append(line)
        if line.startswith("agon serve: http://"):
            url = line.split()[2]
    if url is None:
        proc.kill()
        raise RuntimeError("agon serve did not start:\n" + "".join(lines))
    threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True).start()
    for _ in range(200):
        try:
            if httpx.get(url.removesuffix("/v1") + "/health").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    return url, proc, lines


def load(url: str, questions: list[str], clients: int) -> dict[str, float]:
    """Send every question once, ``clients`` at a time; throughput and latency percentiles."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="unused", max_retries=0, timeout=600)
    latencies: list[float] = []

    def ask(question: str) -> None:
        start = time.perf_counter()
        client.chat.completions.create(
            model="cascade_ab", messages=[{"role": "user", "content": question}], temperature=0
        )
        latencies.append(time.perf_counter() - start)

    start = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        list(pool.map(ask, questions))
    wall = time.perf_counter() - start
    q = statistics.quantiles(latencies, n=20, method="inclusive")
    return {"requests_per_s": len(questions) / wall, "p50_s": statistics.median(latencies), "p95_s": q[18]}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=48, help="requests per measurement")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--max-new-tokens", type=int, default=40, help="each stage's budget")
    add_results_dir(parser)
    args = parser.parse_args()
    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule

    dm = ReasoningGymDataModule(train_size=4, val_size=args.requests, val_seed=21)
    questions = [p.question for p in dm.val_problems[: args.requests]]
    names = {"batched": "32", "one at a time": "1"}
    runs: dict[str, dict[int, list[dict[str, float]]]] = {
        name: {c: [] for c in args.clients} for name in names
    }
    with tempfile.TemporaryDirectory() as tmp:
        bundle = make_bundle(Path(tmp) / "bundle", args.max_new_tokens)
        servers = {name: launch(bundle, "--max-batch-size", batch) for name, batch in names.items()}
        try:
            for url, _, _ in servers.values():
                load(url, questions[:4], 2)  # warm-up
            for c in args.clients:  # A B B A: both servers see the same drift of a shared machine
                for name in [*names, *reversed(names)]:
                    runs[name][c].append(load(servers[name][0], questions, c))
        finally:
            for _, proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=60)
    results = {
        name: {c: {k: statistics.fmean(r[k] for r in rs) for k in rs[0]} for c, rs in by.items()}
        for name, by in runs.items()
    }
    rows: list[list[Any]] = []
    for c in args.clients:
        on, off = results["batched"][c], results["one at a time"][c]
        rows.append([c, on["requests_per_s"], on["p50_s"], on["p95_s"], off["requests_per_s"], off["p50_s"],
                     off["p95_s"], on["requests_per_s"] / off["requests_per_s"]])  # fmt: skip
    print_table(
        f"agon serve, HF backend, CPU, 1 torch thread: {args.requests} greedy chat requests of cascade_ab "
        f"(≤ {args.max_new_tokens} tokens a stage)",
        ["clients", "req/s", "p50 (s)", "p95 (s)", "req/s unbatched", "p50 unbatched", "p95 unbatched",
         "batched / unbatched"],
        rows,
    )  # fmt: skip
    write_json(
        "serve",
        {"requests": args.requests, "max_new_tokens": args.max_new_tokens,
         "results": {name: {str(c): r for c, r in by.items()} for name, by in results.items()}},
        args.results_dir,
    )  # fmt: skip


if __name__ == "__main__":
    main()
