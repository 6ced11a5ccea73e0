"""GPU smoke check: the Qwen3-0.6B architecture (random init, no download) under each strategy.

    python scripts/gpu_smoke.py --steps 3 --out smoke.json [-- --model.gradient_checkpointing=true ...]

For each of single-device, DeepSpeed ZeRO-2 and FSDP it runs ``--steps`` Agon steps in a
fresh process and prints step time, generation tokens/s, peak GPU memory and the adapters'
memory against the base, the steps skipped as non-finite, and whether both adapters moved
(each role must update its own adapter under every option). What follows ``--`` is passed to
every run as LightningCLI overrides. The tokenizer is the project's character tokenizer (ids fit in
Qwen3's 151,936-entry vocabulary), so nothing is fetched from a hub.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QWEN3_06B = dict(
    vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
    num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rope_theta=1_000_000.0,
    rms_norm_eps=1e-6, tie_word_embeddings=True,
)  # fmt: skip
STRATEGIES = {
    "single": None,
    "deepspeed_zero2": "configs/strategy/deepspeed_zero2.yaml",
    "fsdp": "configs/strategy/fsdp.yaml",
}


def build_model(path: Path) -> None:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from agon_lightning.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    config = Qwen3Config(
        **QWEN3_06B, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    torch.manual_seed(0)
    Qwen3ForCausalLM(config).to(torch.bfloat16).save_pretrained(path)
    tokenizer.save_pretrained(path)


def run_one(name: str, model_dir: str, steps: int, out: str, extra: list[str]) -> None:
    """Runs inside a fresh process: one strategy, ``steps`` steps, stats to ``out``."""
    import lightning as L
    import torch

    from agon_lightning.cli import AgonCLI

    args = ["--config", str(ROOT / "configs/agon.yaml")]
    if STRATEGIES[name]:
        args += ["--config", str(ROOT / STRATEGIES[name])]
    args += [
        f"--model.model_name_or_path={model_dir}", "--model.dtype=bfloat16", "--trainer.accelerator=gpu",
        "--trainer.devices=1", f"--trainer.limit_train_batches={steps}", "--trainer.max_epochs=1",
        "--trainer.limit_val_batches=0", "--model.validate_at_start=false", "--model.grpo.num_generations=8",
        "--model.rollout.init_args.max_new_tokens=256", "--data.init_args.batch_size=8",
        f"--trainer.default_root_dir={Path(out).parent / name}", *extra,
    ]  # fmt: skip
    if name == "single":
        args += ["--trainer.precision=bf16-true"]
    stats: dict = {"strategy": name, "step_s": [], "gen_tokens_per_s": []}

    class Stats(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            torch.cuda.synchronize()
            self.t0 = time.perf_counter()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            torch.cuda.synchronize()
            rec = pl_module.last_record
            tokens = int(rec.draft.rollouts.lengths.sum()) + int(rec.challenge.rollouts.lengths.sum())
            gen_s = float(trainer.callback_metrics["time/generate_s"])
            stats["step_s"].append(time.perf_counter() - self.t0)
            stats["gen_tokens_per_s"].append(tokens / gen_s)

    torch.cuda.reset_peak_memory_stats()
    cli = AgonCLI(args=args, run=False)
    cli.model.configure_model()
    start = {n: p.detach().float().clone() for n, p in cli.model.policy.named_parameters() if "lora_" in n}
    cli.trainer.callbacks.append(Stats())
    cli.trainer.fit(cli.model, cli.datamodule)
    base = sum(p.numel() for n, p in cli.model.policy.named_parameters() if "lora_" not in n)
    adapters = sum(p.numel() for n, p in cli.model.policy.named_parameters() if "lora_" in n)
    moved = {
        a: max(float((p.detach().float() - start[n]).abs().max()) for n, p in cli.model.policy.named_parameters()
               if n in start and f".{a}." in n)
        for a in cli.model.adapter_names
    }  # fmt: skip
    stats.update(peak_gpu_gib=torch.cuda.max_memory_allocated() / 2**30, base_params=base, adapter_params=adapters,
                 adapter_share=adapters / base, moved=moved, skipped_steps=cli.model.skipped_steps)  # fmt: skip
    Path(out).write_text(json.dumps(stats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--out", default="gpu_smoke.json")
    parser.add_argument("--one", nargs=3, metavar=("NAME", "MODEL_DIR", "OUT"), help=argparse.SUPPRESS)
    argv = sys.argv[1:]
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    args = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    if args.one:
        run_one(args.one[0], args.one[1], args.steps, args.one[2], extra)
        return
    work = Path(tempfile.mkdtemp(prefix="agon-smoke-"))
    build_model(work / "qwen3-0.6b-random")
    rows = []
    for name in args.strategies:
        out = work / f"{name}.json"
        cmd = [
            sys.executable,
            __file__,
            "--steps",
            str(args.steps),
            "--one",
            name,
            str(work / "qwen3-0.6b-random"),
            str(out),
            "--",
            *extra,
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 or not out.exists():
            rows.append(
                {
                    "strategy": name,
                    "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else "failed",
                }
            )
            continue
        rows.append(json.loads(out.read_text()))
    print(f"{'strategy':<18}{'step s (median)':>16}{'gen tok/s':>12}{'peak GiB':>10}{'adapters/base':>15}"
          f"{'skipped':>9}  moved (max |Δ|)")  # fmt: skip
    for r in rows:
        if "error" in r:
            print(f"{r['strategy']:<18} FAILED: {r['error'][:100]}")
            continue
        step = sorted(r["step_s"])[len(r["step_s"]) // 2]
        tps = sorted(r["gen_tokens_per_s"])[len(r["gen_tokens_per_s"]) // 2]
        moved = " ".join(f"{a}={v:.1e}" for a, v in r["moved"].items())
        print(
            f"{r['strategy']:<18}{step:>16.2f}{tps:>12.0f}{r['peak_gpu_gib']:>10.2f}{r['adapter_share']:>14.2%}"
            f"{r['skipped_steps']:>9}  {moved}"
        )
    Path(args.out).write_text(json.dumps(rows, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
