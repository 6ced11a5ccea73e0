"""GPU acceptance: the Qwen3-0.6B architecture (random weights, no download) under every strategy and rollout.

    python scripts/gpu_smoke.py --out gpu_smoke.json [-- LightningCLI overrides ...]
    python scripts/gpu_smoke.py --cpu-dry-run        # the same matrix on the tiny model, on CPU
    python scripts/gpu_smoke.py --variant league --strategies single --model-dir /tmp/qwen3 ...

For each strategy (one device, FSDP2, DeepSpeed ZeRO-2, ZeRO-3) and each rollout backend (our
HF decode loop, vLLM; ``--rollouts hf_static`` adds the decode loop with a static cache and its
step compiled, CUDA graphs on a GPU), a fresh process runs ``--steps`` Agon steps of the default config
(``configs/agon.yaml``, callbacks included) with the strategy's shipped overlay, bf16 base
weights, and prints one table (step time, generation tokens/s, peak memory, adapters/base,
steps skipped as non-finite, how far each adapter moved, the engine/trainer log-prob
mismatch under vLLM, and the last league and KL metrics a variant logs) and writes it as JSON.
Every cell must say ``ok``: a crash is a row with its error, and the exit status is 1. What
follows ``--`` goes to every run. ``--variant NAME`` runs every cell as that shipped variant
(``configs/experiments/NAME.yaml``, after the strategy's overlay); ``--model-dir`` builds the
random model there once and reuses it in later invocations.

The ``rank_lengths`` case (``--cases``) runs each multi-process strategy (DDP, FSDP2, ZeRO-2,
ZeRO-3) on 2 devices with rank 1 decoding more new tokens than rank 0 (a callback sets each
rank's budget before its step): ranks that sample different lengths must still call the same
collectives and, under ZeRO-3, the same hooked modules in each step. ``tests/call_trace.py``'s
recorder compares them across the ranks at each step's end; a difference fails the cell with
the first differing call named. It needs 2 GPUs (a cell on a machine with one says so and is
skipped); ``--cpu-dry-run`` runs it on 2 gloo processes.

The tokenizer is the project's character tokenizer (its ids fit in Qwen3's 151,936-entry
vocabulary), so nothing is fetched from a hub. Sized for one GPU in under ten minutes:
P=4 problems, N=4 rollouts, 128 new tokens, eager vLLM (no CUDA graphs to capture).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

ROOT = Path(__file__).resolve().parents[1]
QWEN3_06B = dict(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0,
    rms_norm_eps=1e-6, tie_word_embeddings=True,
)  # fmt: skip
STRATEGIES = {
    "single": None,
    "fsdp2": "configs/strategy/fsdp2.yaml",
    "deepspeed_zero2": "configs/strategy/deepspeed_zero2.yaml",
    "deepspeed_zero3": "configs/strategy/deepspeed_zero3.yaml",
}
# The rank-dependent-lengths case: every strategy that runs more than one process.
RANK_LENGTHS = {
    "ddp": "configs/strategy/ddp.yaml",
    "fsdp2": "configs/strategy/fsdp2.yaml",
    "deepspeed_zero2": "configs/strategy/deepspeed_zero2.yaml",
    "deepspeed_zero3": "configs/strategy/deepspeed_zero3.yaml",
}
ROLLOUTS = ("hf", "vllm")
# Also runnable by name: the HF decode loop with a static cache and its step compiled (CUDA graphs on a GPU).
EXTRA_ROLLOUTS = ("hf_static",)
CASES = ("plain", "rank_lengths")


def build_model(path: Path, cpu_dry_run: bool) -> None:
    """Qwen3-0.6B's architecture with random weights in bf16 (the tiny Qwen3 for a CPU dry run)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from agon_lightning.infra.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    shape = dict(QWEN3_06B)
    if cpu_dry_run:  # same family and vocabulary handling, a few MB
        shape.update(hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, head_dim=32, vocab_size=len(tokenizer), max_position_embeddings=512)  # fmt: skip
    config = Qwen3Config(**shape, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)


class EvenLength(Verifier):
    """Correct when the completion has an even number of characters: rewards that vary on a random model."""

    def verify(self, completion: str, problem: Problem) -> Verdict:
        return Verdict(correct=len(completion) % 2 == 0)


def cells(strategies: list[str], rollouts: list[str], cases: list[str]) -> list[tuple[str, str, str]]:
    """``(strategy, rollout, case)`` of every cell: the plain matrix, then rank_lengths per multi-process strategy."""
    out = [(s, r, "plain") for s in strategies for r in rollouts] if "plain" in cases else []
    if "rank_lengths" in cases:
        multi = [s for s in strategies if s in RANK_LENGTHS] + (["ddp"] if "single" in strategies else [])
        out += [
            (s, r, "rank_lengths") for s in sorted(set(multi), key=list(RANK_LENGTHS).index) for r in rollouts
        ]
    return out


def variant_overlay(variant: str) -> Path:
    """The shipped variant's overlay; an unknown name is refused with the names there are."""
    path = ROOT / "configs/experiments" / f"{variant}.yaml"
    if not path.is_file():
        names = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise SystemExit(f"--variant {variant!r} is not a shipped variant; one of {names}")
    return path


def cli_args(
    strategy: str, rollout: str, model_dir: str, steps: int, root: Path, cpu: bool, case: str = "plain",
    variant: str = "agon",
) -> list[str]:  # fmt: skip
    args = ["--config", str(ROOT / "configs/agon.yaml")]
    overlay = RANK_LENGTHS[strategy] if case == "rank_lengths" else STRATEGIES[strategy]
    if overlay:
        args += ["--config", str(ROOT / overlay)]
    args += ["--config", str(variant_overlay(variant))]
    args += [
        f"--model.model_name_or_path={model_dir}", "--model.dtype=bfloat16",
        f"--trainer.accelerator={'cpu' if cpu else 'gpu'}", f"--trainer.devices={2 if case == 'rank_lengths' else 1}",
        f"--trainer.limit_train_batches={steps}", "--trainer.max_epochs=1", "--trainer.limit_val_batches=0",
        "--model.validate_at_start=false", "--model.grpo.num_generations=4", "--data.init_args.batch_size=4",
        f"--trainer.default_root_dir={root}",
    ]  # fmt: skip
    if rollout == "hf_static":
        mode = "default" if cpu else "reduce-overhead"
        args += [
            "--model.rollout.init_args.static_cache=true",
            f"--model.rollout.init_args.compile_mode={mode}",
        ]
    if rollout == "vllm":
        args += ["--model.rollout=vllm", "--model.rollout.init_args.enforce_eager=true"]
        args += ["--model.rollout.init_args.kv_cache_memory_gib=0.25"] if cpu else [
            "--model.rollout.init_args.gpu_memory_utilization=0.25"]  # fmt: skip
    args += [f"--model.rollout.init_args.max_new_tokens={16 if cpu else 128}"]
    return args


def rank_lengths_callback(extra_tokens: int) -> object:
    """A callback giving rank r ``r · extra_tokens`` more new tokens during each training step."""
    import lightning as L

    class RankLengths(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.budget = pl_module.rollout.max_new_tokens
            pl_module.rollout.max_new_tokens = self.budget + extra_tokens * trainer.global_rank

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            pl_module.rollout.max_new_tokens = self.budget

    return RankLengths()


def run_one(
    strategy: str, rollout: str, model_dir: str, steps: int, out: Path, cpu: bool, extra: list[str],
    case: str = "plain", variant: str = "agon",
) -> None:  # fmt: skip
    """Inside a fresh process (each rank of a rank_lengths cell): one cell of the matrix, its stats to ``out``."""
    import resource

    import lightning as L
    import torch

    from agon_lightning.cli import AgonCLI
    from agon_lightning.strategies import full_tensors

    cuda = torch.cuda.is_available() and not cpu
    stats: dict = {
        "strategy": strategy,
        "rollout": rollout,
        "case": case,
        "variant": variant,
        "step_s": [],
        "gen_tokens_per_s": [],
        "mismatch": [],
    }

    class Stats(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            if cuda:
                torch.cuda.synchronize()
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if cuda:
                torch.cuda.synchronize()
            rec = pl_module.last_record
            tokens = int(rec.draft.rollouts.lengths.sum()) + int(rec.challenge.rollouts.lengths.sum())
            metrics = trainer.callback_metrics
            stats["step_s"].append(time.perf_counter() - self.t0)
            stats["gen_tokens_per_s"].append(tokens / float(metrics["time/generate_s"]))
            if "train/logprob_mismatch" in metrics:
                stats["mismatch"].append(float(metrics["train/logprob_mismatch"]))
            for key, value in metrics.items():  # the league's and the KL terms' last values
                if key.startswith("league/") or key == "train/kl":
                    stats.setdefault("variant_metrics", {}).setdefault(key, []).append(float(value))

        def on_train_start(self, trainer, pl_module):
            self.start = full_tensors(pl_module.policy)

        def on_train_end(self, trainer, pl_module):
            now = full_tensors(pl_module.policy)
            stats["moved"] = {
                a: max(
                    float((now[n].float() - self.start[n].float()).abs().max()) for n in now if f".{a}." in n
                )
                for a in pl_module.adapter_names
            }

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    root = out.parent / f"{strategy}-{rollout}-{case}-{variant}"
    args = cli_args(strategy, rollout, model_dir, steps, root, cpu, case, variant) + extra
    cli = AgonCLI(args=args, run=False)
    # Random weights answer nothing right: a verifier with a signal on any text, so both adapters must move.
    cli.model.verifier = EvenLength()
    cli.trainer.callbacks.append(Stats())
    trace = None
    if case == "rank_lengths":
        sys.path.insert(0, str(ROOT / "tests"))
        from call_trace import CallTrace

        trace = CallTrace()
        cli.trainer.callbacks += [rank_lengths_callback(4 if cpu else 32), trace]
    cli.model.configure_model()  # counted whole, before a strategy shards it
    base = sum(p.numel() for n, p in cli.model.policy.named_parameters() if "lora_" not in n)
    adapters = sum(p.numel() for n, p in cli.model.policy.named_parameters() if "lora_" in n)
    cli.trainer.fit(cli.model, cli.datamodule)
    if trace is not None:
        if trace.divergence is not None:
            raise RuntimeError(f"the ranks diverged: {trace.divergence}")
        stats["steps_compared"] = trace.steps
    peak = (
        torch.cuda.max_memory_allocated() / 2**30
        if cuda
        else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    )
    stats.update(peak_gib=peak, peak_kind="GPU allocated" if cuda else "host RSS", adapter_share=adapters / base,
                 skipped_steps=cli.model.skipped_steps, base_params=base)  # fmt: skip
    if cli.trainer.is_global_zero:  # every rank of a rank_lengths cell runs this; one writes
        out.write_text(json.dumps(stats))


def table(rows: list[dict]) -> str:
    lines = [
        "| strategy | rollout | case | variant | status | step s (median) | gen tok/s | peak GiB | adapters/base | skipped | moved (max abs) | logp mismatch |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        head = f"| {r['strategy']} | {r['rollout']} | {r.get('case', 'plain')} | {r.get('variant', 'agon')} |"
        if "error" in r:
            lines.append(f"{head} FAILED: {r['error'][:120]} | | | | | | | |")
            continue
        if "skipped" in r:
            lines.append(f"{head} skipped: {r['skipped']} | | | | | | | |")
            continue
        moved = " ".join(f"{a}={v:.1e}" for a, v in r["moved"].items())
        mismatch = f"{max(r['mismatch']):.1e}" if r["mismatch"] else "-"
        lines.append(
            f"{head} ok | {statistics.median(r['step_s']):.2f} | "
            f"{statistics.median(r['gen_tokens_per_s']):.0f} | {r['peak_gib']:.2f} | {r['adapter_share']:.2%} | "
            f"{r['skipped_steps']} | {moved} | {mismatch} |"
        )
    return "\n".join(lines)


def _gpus() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--rollouts", nargs="+", default=list(ROLLOUTS), choices=ROLLOUTS + EXTRA_ROLLOUTS)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=CASES)
    parser.add_argument("--variant", default="agon", help="a shipped variant (configs/experiments/NAME.yaml)")
    parser.add_argument("--model-dir", help="build the random model here once; reuse it when it is there")
    parser.add_argument("--out", default="gpu_smoke.json")
    parser.add_argument("--cpu-dry-run", action="store_true", help="the same matrix on a tiny Qwen3, on CPU")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per cell")
    parser.add_argument(
        "--one", nargs=5, metavar=("STRATEGY", "ROLLOUT", "CASE", "MODEL_DIR", "OUT"), help=argparse.SUPPRESS
    )
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.one:
        strategy, rollout, case, model_dir, out = args.one
        run_one(
            strategy, rollout, model_dir, args.steps, Path(out), args.cpu_dry_run, extra, case, args.variant
        )
        return
    variant_overlay(args.variant)  # an unknown variant stops before the model is built
    work = Path(tempfile.mkdtemp(prefix="agon-smoke-"))
    model_dir = (
        Path(args.model_dir)
        if args.model_dir
        else work / ("tiny-qwen3-random" if args.cpu_dry_run else "qwen3-0.6b-random")
    )
    if not (model_dir / "config.json").is_file():
        build_model(model_dir, args.cpu_dry_run)
    rows = []
    devices = 2 if args.cpu_dry_run else _gpus()
    for strategy, rollout, case in cells(args.strategies, args.rollouts, args.cases):
        name = f"{strategy}-{rollout}-{case}"
        if case == "rank_lengths" and devices < 2:
            rows.append({"strategy": strategy, "rollout": rollout, "case": case, "variant": args.variant,
                         "skipped": f"needs 2 GPUs, {devices} visible (--cpu-dry-run runs it on 2 CPU processes)"})  # fmt: skip
            print(f"{strategy:>16} {rollout:>5} {case}: skipped ({rows[-1]['skipped']})", flush=True)
            continue
        out = work / f"{name}.json"
        cmd = [sys.executable, __file__, "--steps", str(args.steps), "--variant", args.variant, "--one", strategy,
               rollout, case, str(model_dir), str(out)]  # fmt: skip
        cmd += ["--cpu-dry-run"] if args.cpu_dry_run else []
        cmd += ["--", *extra] if extra else []
        started = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=ROOT)
            failed = proc.returncode != 0 or not out.exists()
            error = (proc.stderr.strip().splitlines() or ["failed"])[-1] if failed else None
            (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
        except subprocess.TimeoutExpired:
            error = f"timed out after {args.timeout:g} s"
        row = (
            {"strategy": strategy, "rollout": rollout, "case": case, "variant": args.variant, "error": error}
            if error
            else json.loads(out.read_text())
        )
        row["wall_s"] = time.perf_counter() - started
        rows.append(row)
        status = "FAILED " + error if error else "ok"
        print(
            f"{strategy:>16} {rollout:>5} {case} {args.variant}: {status} ({row['wall_s']:.0f} s)", flush=True
        )
        if row.get("variant_metrics"):
            last = {k: round(v[-1], 4) for k, v in sorted(row["variant_metrics"].items())}
            print(f"{'':>16} last {args.variant} metrics: {last}", flush=True)
    kind = (
        "CPU dry run, tiny Qwen3" if args.cpu_dry_run else "one GPU, Qwen3-0.6B architecture (random weights)"
    )
    print(f"\n### GPU smoke: {kind}, {args.steps} steps per cell, logs in {work}\n\n{table(rows)}")
    Path(args.out).write_text(
        json.dumps({"kind": kind, "steps": args.steps, "variant": args.variant, "rows": rows}, indent=2)
    )
    print(f"wrote {args.out}")
    sys.exit(1 if any("error" in r for r in rows) else 0)


if __name__ == "__main__":
    main()
