"""What one step of staleness buys and costs: ``rollout.max_staleness`` 0 against 1 on a vLLM server.

With K = 1 the next step's drafts are sampled on the server while the trainer updates
(:mod:`agon_lightning.rollout.prefetch`); with K = 0 each waits for the other. On this
2-core machine one vLLM CPU server is pinned to core 1 (``taskset -c 1``) and training to
core 0 (``taskset -c 0``, ``--threads 1``), so the two can really run at once.

``--part speed`` (issue 35, 6b): the default config (``configs/agon.yaml``: P = 16 problems,
N = 8, 80 new tokens) on the ``vllm_server`` rollout, ``--steps`` steps at K = 0 then at
K = 1 against the same server, validation off, ``grpo.tis_cap=2`` in both (K = 1 needs it;
at K = 0 it only re-weights tokens). A step's time is the module's ``time/generate_s`` +
``time/update_s``; steps/s is over the steady steps — all but the first (both modes sample
it in the step, and the server warms up) and the last (K = 1 samples nothing ahead there) —
and the ratio is K = 1's over K = 0's, from one run.

``--part accuracy`` (6c): the default run (60 steps, validated every 20) at K = 0 and K = 1
for each of ``--seeds``, on the same pinned server; its final ``val/deployed/pass@1``. About
a quarter of an hour per run per seed and K here; each call writes ``staleness_accuracy_seeds…``.
The endpoint is that final pass@1 (200 held-out problems), compared per seed as K = 1 − K = 0.
A run's binomial SE there is about 0.035 (p ≈ 0.4), so one seed's difference has an SE of about
0.05: a mean difference within ±2 of its SE (0.1 for one seed, 0.1/√n for n) is read as no
measurable cost of one step of staleness, and nothing smaller is claimed.

    python -m benchmarks.bench_staleness --part speed --steps 8
    python -m benchmarks.bench_staleness --part accuracy --seeds 0 1 2
    python -m benchmarks.bench_staleness --part speed --steps 3 -- --data.init_args.batch_size=2   # a quick look

Arguments after ``--`` are more ``agon fit`` overrides for every run (the server is the same).
"""

from __future__ import annotations

import argparse
import csv
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

from benchmarks.common import add_results_dir, median, print_table, write_json

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/agon.yaml"
SERVER_CORE, TRAIN_CORE = "1", "0"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(workdir: Path, timeout_s: float = 600) -> tuple[subprocess.Popen, str]:
    """``agon vllm-serve --run`` for the default config, pinned to SERVER_CORE; up when it answers /health."""
    port = free_port()
    log = (workdir / "server.log").open("w")
    proc = subprocess.Popen(
        ["taskset", "-c", SERVER_CORE, sys.executable, "-m", "agon_lightning.cli", "vllm-serve", "--config",
         str(CONFIG), "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--max-model-len", "512", "--run"],
        cwd=workdir, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
    )  # fmt: skip
    url, deadline = f"http://127.0.0.1:{port}", time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the vLLM server exited with {proc.returncode}; see {workdir / 'server.log'}")
        try:
            if httpx.get(f"{url}/health", timeout=2).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(1)
    stop_server(proc)
    raise RuntimeError(f"the vLLM server was not up in {timeout_s:.0f} s; see {workdir / 'server.log'}")


def stop_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(30)


def fit_command(url: str, staleness: int, root: Path, extra: list[str]) -> list[str]:
    """The default config on the server at ``staleness``, pinned to TRAIN_CORE, one thread."""
    return [
        "taskset", "-c", TRAIN_CORE, sys.executable, "-m", "agon_lightning.cli", "fit", "--config", str(CONFIG),
        "--model.rollout=vllm_server", f'--model.rollout.init_args.urls=["{url}"]',
        "--model.rollout.init_args.max_new_tokens=80", "--model.rollout.init_args.temperature=1.0",
        f"--model.rollout.init_args.max_staleness={staleness}", "--model.grpo.tis_cap=2.0",
        f"--trainer.default_root_dir={root}", *extra, "--threads", "1",
    ]  # fmt: skip


def run_fit(url: str, staleness: int, root: Path, extra: list[str]) -> list[dict[str, str]]:
    """Run one fit; the rows of its metrics.csv."""
    command = fit_command(url, staleness, root, extra)
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(
            f"the fit failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
        )
    return [r for f in sorted(root.rglob("metrics.csv")) for r in csv.DictReader(f.open())]


def speed(url: str, steps: int, scratch: Path, overrides: list[str]) -> dict[str, Any]:
    """Steady steps/s at K = 0 and K = 1 (the default config, ``steps`` steps each)."""
    extra = [f"--trainer.limit_train_batches={steps}", "--trainer.limit_val_batches=0",
             "--model.validate_at_start=false", "--trainer.callbacks=[]", *overrides]  # fmt: skip
    runs: dict[str, Any] = {}
    for k in (0, 1):
        rows = [r for r in run_fit(url, k, scratch / f"speed-k{k}", extra) if r.get("train/drafter")]
        seconds = [float(r["time/generate_s"]) + float(r["time/update_s"]) for r in rows]
        steady = seconds[1:-1]
        runs[f"K={k}"] = {
            "step_seconds": seconds,
            "generate_seconds": [float(r["time/generate_s"]) for r in rows],
            "update_seconds": [float(r["time/update_s"]) for r in rows],
            "staleness": [float(r["rollout/staleness"]) for r in rows] if k else None,
            "steady_steps_per_s": len(steady) / sum(steady),
            "steady_median_step_s": median(steady),
        }
    runs["ratio"] = runs["K=1"]["steady_steps_per_s"] / runs["K=0"]["steady_steps_per_s"]
    return runs


def accuracy(url: str, seeds: list[int], scratch: Path, overrides: list[str]) -> dict[str, Any]:
    """Final ``val/deployed/pass@1`` of the default run at K = 0 and K = 1 for each seed."""
    out: dict[str, Any] = {}
    for seed in seeds:
        for k in (0, 1):
            rows = run_fit(url, k, scratch / f"acc-s{seed}-k{k}", [f"--seed_everything={seed}", *overrides])
            final = [float(r["val/deployed/pass@1"]) for r in rows if r.get("val/deployed/pass@1")]
            out[f"seed={seed} K={k}"] = {"final_deployed_pass@1": final[-1], "curve": final}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--part", choices=["speed", "accuracy"], required=True)
    parser.add_argument(
        "--steps", type=int, default=8, help="speed: steps per mode (steady: all but first and last)"
    )
    parser.add_argument(
        "--seeds", type=int, nargs="+", default=[0, 1, 2], help="accuracy: seed_everything values"
    )
    add_results_dir(parser)
    parser.add_argument("extra", nargs="*", help="more `agon fit` overrides for every run, after --")
    cli = parser.parse_args()
    if cli.steps < 3:
        parser.error(
            f"--steps must be >= 3 (one steady step between the first and the last), got {cli.steps}"
        )
    scratch = Path(tempfile.mkdtemp(prefix="agon-bench-staleness-"))
    load_before = os.getloadavg()
    proc, url = start_server(scratch)
    try:
        if cli.part == "speed":
            result = speed(url, cli.steps, scratch, cli.extra)
        else:
            result = accuracy(url, cli.seeds, scratch, cli.extra)
    finally:
        stop_server(proc)
    pinning = f"server on core {SERVER_CORE}, training on core {TRAIN_CORE}"
    if cli.part == "speed":
        rows = [
            (k, result[k]["steady_median_step_s"], result[k]["steady_steps_per_s"],
             f"{median(result[k]['generate_seconds'][1:-1]):.3g} / {median(result[k]['update_seconds'][1:-1]):.3g}")
            for k in ("K=0", "K=1")
        ]  # fmt: skip
        rows.append(("K=1 / K=0", "", result["ratio"], ""))
        title = (
            f"configs/agon.yaml on one vLLM CPU server ({pinning}), {cli.steps} steps per mode, "
            f"steady steps 2..{cli.steps - 1}"
        )
        columns = ["max_staleness", "median step s", "steps/s", "median generate / update s"]
    else:
        rows = [
            (key, v["final_deployed_pass@1"], " ".join(f"{x:.3f}" for x in v["curve"]))
            for key, v in result.items()
        ]
        title = f"configs/agon.yaml, final val/deployed/pass@1 at K=0 and K=1 ({pinning})"
        columns = ["run", "final deployed pass@1", "validations"]
    table = print_table(title, columns, rows)
    command = f"python -m benchmarks.bench_staleness --part {cli.part} " + (
        f"--steps {cli.steps}" if cli.part == "speed" else "--seeds " + " ".join(map(str, cli.seeds))
    )
    if cli.extra:
        command += " -- " + " ".join(cli.extra)
    name = (
        "staleness_speed"
        if cli.part == "speed"
        else "staleness_accuracy_seeds" + "-".join(map(str, cli.seeds))
    )
    write_json(name, {
        "tables": [table], "command": command, "pinning": pinning, "result": result,
        "loadavg_before": load_before, "loadavg_after": os.getloadavg(),
    }, cli.results_dir)  # fmt: skip


if __name__ == "__main__":
    main()
