"""Every benchmark script runs end to end at a smoke shape, so none goes stale.

Each script runs as ``python -m benchmarks.NAME`` in a fresh process from the repository root
(``benchmarks/`` is in the checkout, not in the installed package), on the tiny model with the
smallest work its options allow, and writes its JSON to a temporary folder: never to
``benchmarks/results/``, whose committed files each run leaves as they were. A script that
needs an optional package or a GPU skips, saying which; the vLLM ones carry the ``vllm`` marker
(tests/conftest.py) and run in CI after the vLLM install.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
# Modules the scripts import; none has a ``__main__`` (checked below), so there is nothing to run.
LIBRARIES = ("__init__", "common", "scale_flops")
TIMEOUT_S = 300  # a script that hangs fails instead of holding CI
# The smallest tiny-model work: P = 1 problem, N = 2 rollouts, T = 4 tokens, one measured step.
TINY = "--prompts 1 --generations 2 --max-new-tokens 4"
ONE_ROUND = "--rounds 1 --steps 1"
# The default job's step (bench_rollout_backends.py) at 2 problems × 2 drafts of 8 tokens.
SMALL_STEP = "--prompts 2 --generations 2 --max-new-tokens 8"
# `agon fit` of configs/agon.yaml shrunk to seconds: 2 problems × 2 rollouts of 8 tokens, no validation.
SMALL_FIT = (
    "--model.validate_at_start=false --trainer.limit_val_batches=0 --data.init_args.batch_size=2 "
    "--model.grpo.num_generations=2 --model.rollout.init_args.max_new_tokens=8"
)
INSTALLS = {"trl": "pip install -e '.[bench]'"}  # vllm's: tests/conftest.py EXTRA_MARKERS


def check_scale_paths(data: dict[str, Any]) -> None:
    """Both dtypes trained two steps, saved a checkpoint and a bundle, and answered from the cascade."""
    for dtype in ("float32", "bfloat16"):
        r = data["results"][dtype]
        assert r["cascade_answers"] == 2 and r["checkpoint_mb"] > 0 and r["skipped_steps"] == 0
        assert len(r["mismatch_per_step"]) == 2 and all(m < 0.05 for m in r["mismatch_per_step"])
    assert "| bfloat16 |" in data["table"]


@dataclass(frozen=True)
class Smoke:
    """One script's smoke run.

    Attributes:
        args: Its command line after the module name, split on spaces; ``{out}`` is the results folder.
        writes: The JSON file it writes there.
        keys: Top-level keys that JSON must hold (``environment`` is every ``write_json``'s).
        needs: An optional package (``trl``, ``vllm``) or ``cuda`` without which it is skipped.
        check: More assertions on the JSON.
    """

    args: str
    writes: str
    keys: tuple[str, ...]
    needs: str | None = None
    check: Callable[[dict[str, Any]], None] | None = None


OUT = "--results-dir {out}"
SMOKES: dict[str, Smoke] = {
    "bench_adapter_sync": Smoke(
        f"--tiny --rounds 1 --rank 2 {OUT}", "adapter_sync_tiny-qwen3.json", ("environment", "tables", "records")
    ),
    "bench_callbacks": Smoke(
        f"--steps 1 --repeats 1 {OUT} -- {SMALL_FIT}", "callbacks.json", ("environment", "wall_s", "hook_share_median")
    ),
    "bench_levers": Smoke(
        f"--beta 0.04 --repeats 1 {TINY} {OUT}", "levers_grpo.json", ("environment", "workload", "table", "results")
    ),
    "bench_decode_paths": Smoke(
        f"--smoke {OUT}", "decode_paths.json", ("environment", "results", "table", "gpu"),
        check=lambda d: all(r["same_tokens_as_loop"] for r in d["results"]),
    ),
    "readme_tables": Smoke(  # the README's performance tables are the results files' (rewrite: run it without --check)
        f"--check {OUT}", "readme_tables.json", ("environment", "tables", "stale"),
        check=lambda d: not d["stale"] and len(d["tables"]) >= 6,
    ),
    "bench_dynamic_sampling": Smoke(f"--smoke {OUT}", "dynamic_sampling.json", ("environment", "runs", "table")),
    "bench_idle_groups": Smoke(  # the two sides of every step end with the same adapters (float rounding)
        f"--smoke --steps 2 {OUT}", "idle_groups.json", ("environment", "steps", "summary", "table"),
        check=lambda d: len(d["steps"]) == 2 and d["summary"]["max_adapter_diff"] < 1e-5,
    ),
    "bench_projections": Smoke(  # the stacked products compute the same outputs and gradients
        f"--rows 64 --repeats 1 {OUT}", "projections.json", ("environment", "results", "table"),
        check=lambda d: d["results"][0]["max_rel_diff"] < 1e-5,
    ),
    "bench_logprobs": Smoke(
        f"--batch 1 --lengths 8 --vocab 256 --hidden 8 --chunk 4 {OUT}", "logprobs.json", ("environment", "results")
    ),
    "bench_math_verifier": Smoke(
        "--timeout-s 0.5 --workers 1 --repeats 1 --batch-copies 1 --json {out}/math_verifier.json",
        "math_verifier.json", ("startup_s", "adversarial", "worst_check_s", "batch"),
    ),
    "bench_memory": Smoke(
        f"{ONE_ROUND} {TINY} --summarizers hidden {OUT}", "memory.json", ("environment", "measured", "counted")
    ),
    "bench_overhead": Smoke(
        f"{ONE_ROUND} {TINY} --summarizers hidden --val-problems 2 {OUT}",
        "overhead.json", ("environment", "workload", "tables", "results", "validation"),
    ),
    "bench_plan": Smoke(OUT, "plan_check.json", ("environment", "table", "results")),
    "bench_rollout_backends": Smoke(
        f"--steps 1 --backends hf {SMALL_STEP} {OUT}", "rollout_backends.json",
        ("environment", "median_step_s", "results", "table"),
    ),
    "bench_sampler_precision": Smoke(
        f"--new-tokens 4 --dtypes bfloat16 {OUT}", "sampler_precision.json", ("environment", "table", "results")
    ),
    "bench_sandbox": Smoke(
        "--programs 2 --workers 1 --tests 1 --json {out}/sandbox.json",
        "sandbox.json", ("machine", "protections", "results"),
    ),
    "bench_scale": Smoke(
        f"--arch tiny {TINY} {OUT}", "scale_paths_tiny.json", ("environment", "table", "workload", "results"),
        check=check_scale_paths,
    ),
    "bench_scaling": Smoke(
        f"{ONE_ROUND} {TINY} --doublings T {OUT}", "scaling.json", ("environment", "game", "table", "runs")
    ),
    "bench_serve": Smoke(
        f"--requests 2 --clients 1 --max-new-tokens 4 {OUT}", "serve.json", ("environment", "requests", "results")
    ),
    "bench_sharded_generation": Smoke(
        f"--strategies fsdp2 --rounds 1 {TINY} {OUT}", "sharded_generation.json", ("environment", "workload", "rows")
    ),
    "bench_step_speed": Smoke(  # a side's own override and matmul precision reach that side only
        f"--smoke --rounds 1 --steps 1 --ours-override=--model.dtype=float32 --ours-matmul-precision medium {OUT}",
        "step_speed.json", ("environment", "summary", "ratio"),
        check=lambda d: d["overrides"]["ours"][-1] == "--model.dtype=float32"
        and "--model.dtype=float32" not in d["overrides"]["base"]
        and d["matmul_precision"] == {"base": None, "ours": "medium"},
    ),
    "bench_staleness": Smoke(
        f"--part speed --steps 3 {OUT} -- {SMALL_FIT}",
        "staleness_speed.json", ("environment", "tables", "command", "result"), needs="vllm",
    ),
    "bench_vs_trl": Smoke(
        f"{ONE_ROUND} {TINY} --betas 0.0 {OUT}", "vs_trl_p1_n2_t4.json", ("environment", "trl", "table", "results"),
        needs="trl",
    ),
    "gpu_vllm": Smoke(
        "--steps 1 --max-new-tokens 8 --out {out}/gpu_vllm.json", "gpu_vllm.json", ("hf", "vllm"), needs="cuda"
    ),
    "profile_countdown": Smoke(
        f"--smoke --steps 1 --threads 1 --val-problems 2 {OUT}", "profile_countdown.json",
        ("environment", "table", "results"),
    ),
    "profile_step": Smoke(
        f"--game agon --rows 5 {TINY} {OUT}", "profile_agon.json", ("environment", "game", "workload", "top")
    ),
}  # fmt: skip
# More runs of a script, where a path of it needs an optional package: id → (script, smoke).
VARIANTS: dict[str, tuple[str, Smoke]] = {
    "bench_rollout_backends-vllm": ("bench_rollout_backends", Smoke(
        f"--steps 1 --backends vllm {SMALL_STEP} {OUT}", "rollout_backends.json", ("median_step_s", "results"),
        needs="vllm",
    )),
    "bench_scale-vs-trl": ("bench_scale", Smoke(
        f"--vs-trl --arch tiny {TINY} {OUT}", "scale_vs_trl_tiny.json", ("environment", "table", "summary", "runs"),
        needs="trl",
    )),
}  # fmt: skip


def scripts_on_disk() -> set[str]:
    return {p.stem for p in BENCHMARKS.glob("*.py")} - set(LIBRARIES)


def run_script(name: str, args: str, out: Path) -> subprocess.CompletedProcess:
    """``python -m benchmarks.NAME ARGS`` from the repository root, one thread, offline."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}  # fmt: skip
    command = [sys.executable, "-m", f"benchmarks.{name}", *args.format(out=out).split()]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)


def committed_results() -> dict[Path, tuple[int, int]]:
    """Each ``benchmarks/results/*.json`` (where the scripts write by default): modified time and size."""
    return {p: (p.stat().st_mtime_ns, p.stat().st_size) for p in (BENCHMARKS / "results").glob("*.json")}


def smoke_param(name: str, script: str, smoke: Smoke) -> Any:
    """``(script, smoke)`` with the ``vllm`` marker where it needs vLLM, skipped where its package or GPU is missing."""
    needs, marks = smoke.needs, []
    if needs in ("vllm", "cuda"):  # gpu_vllm.py measures the vLLM backend too
        marks.append(pytest.mark.vllm)
    if needs == "trl" and importlib.util.find_spec("trl") is None:
        marks.append(pytest.mark.skip(reason=f"needs the trl package: {INSTALLS['trl']}"))
    if needs == "cuda" and not torch.cuda.is_available():
        marks.append(
            pytest.mark.skip(reason="needs a CUDA GPU (on a CPU: test_gpu_vllm_refuses_cleanly_on_a_cpu)")
        )
    return pytest.param(script, smoke, marks=marks, id=name)


def test_every_script_has_a_smoke_run():
    assert set(SMOKES) == scripts_on_disk(), (
        "each benchmarks/*.py script needs an entry in SMOKES (a library module, one in LIBRARIES)"
    )


@pytest.mark.parametrize("library", LIBRARIES)
def test_libraries_are_not_scripts(library):
    assert "__main__" not in (BENCHMARKS / f"{library}.py").read_text(), (
        f"benchmarks/{library}.py runs as a script: give it an entry in SMOKES instead of LIBRARIES"
    )


RUNS = [*((name, name, smoke) for name, smoke in SMOKES.items()), *((k, *v) for k, v in VARIANTS.items())]


@pytest.mark.parametrize(("name", "smoke"), [smoke_param(*run) for run in sorted(RUNS, key=lambda r: r[0])])
def test_script_runs_at_its_smoke_shape(name, smoke, tmp_path):
    before = committed_results()
    proc = run_script(name, smoke.args, tmp_path)
    assert proc.returncode == 0, f"benchmarks/{name}.py exited {proc.returncode}:\n{proc.stderr[-4000:]}"
    written = tmp_path / smoke.writes
    assert written.is_file(), f"benchmarks/{name}.py wrote no {smoke.writes}:\n{proc.stdout[-2000:]}"
    data = json.loads(written.read_text())
    assert set(smoke.keys) <= set(data), f"{smoke.writes} lacks {sorted(set(smoke.keys) - set(data))}"
    if smoke.check is not None:
        smoke.check(data)
    assert committed_results() == before, "a smoke run wrote into benchmarks/results/"


@pytest.mark.skipif(torch.cuda.is_available(), reason="a CUDA GPU is here: the smoke run measures on it")
def test_gpu_vllm_refuses_cleanly_on_a_cpu(tmp_path):
    proc = run_script("gpu_vllm", SMOKES["gpu_vllm"].args, tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines() == [
        "gpu_vllm.py measures GPU step times and needs a CUDA GPU; on a CPU run "
        "python -m benchmarks.bench_rollout_backends"
    ]
    assert not any(tmp_path.iterdir())
