"""The update with idle groups skipped against every row with a graph, on the same rollouts, in one process.

A group whose advantages are all 0 (its rewards all agree) adds nothing to a gradient when β = 0,
so the update runs its forward without autograd and skips it in the backward
(:func:`agon_lightning.training.update.trained_logprobs`). How much that saves depends on how many
groups are idle, which grows as training goes on: measure it on a trained run's checkpoint.

Each step of a Countdown run (``configs/countdown.yaml`` and any ``--config`` overlays, one
thread), the update runs twice on that step's rollouts from the same adapters and optimizer
state: once with every row's forward recorded by autograd (``plain``), once skipping idle groups
(``skip``); the side that goes first alternates from step to step, and the run goes on from the
second. Reported per step: the share of idle groups over the roles, each side's update seconds,
their ratio, and the largest difference between the two sides' adapters after the update.

    python -m benchmarks.bench_idle_groups --steps 8 \\
      --config configs/experiments/grpo.yaml --ckpt benchmarks/results/countdown/s3/pilot/grpo/seed_1000/checkpoints/best-step=480.ckpt \\
      -- --model.model_name_or_path=agon:tiny-countdown-s3
    python -m benchmarks.bench_idle_groups --smoke              # seconds: 2 problems x 2 drafts of 8 tokens

Writes ``idle_groups.json`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import add_results_dir, print_table, single_thread, write_json

ROOT = Path(__file__).resolve().parents[1]
SMOKE = (
    "--data.init_args.batch_size=2", "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=8",
)  # fmt: skip


def idle_share(roles: list[Any], num_generations: int) -> float:
    """The share of groups, over every role, whose advantages are all exactly 0."""
    from agon_lightning.adapters.shared_prompt import sample_groups
    from agon_lightning.training.update import idle_groups

    flags: list[bool] = []
    for r in roles:
        total = len(r.rollouts)
        groups = sample_groups(slice(0, total), total, r.group_size or num_generations)
        flags += idle_groups(r.advantages, groups).tolist()
    return sum(flags) / max(len(flags), 1)


def measure(config: list[str], ckpt: Path | None, steps: int, overrides: list[str]) -> list[dict[str, float]]:
    """One row per measured step (the first step is a warm-up and is not reported)."""
    import agon_lightning.training.module as module_file
    import agon_lightning.training.update as update
    from agon_lightning.cli.build import from_config

    plain_logprobs = update.trained_logprobs
    optimize = module_file.optimize
    rows: list[dict[str, float]] = []

    def plain(learner: Any, role: Any, rows_: slice, beta: float) -> Any:
        return update.policy_logprobs(learner, role.adapter, role.rollouts, rows_, role.group_size)

    def both(module: Any, roles: list[Any]) -> Any:
        params = [p for p in module.policy.parameters() if p.requires_grad]
        opt = module.optimizers()
        opt = getattr(opt, "optimizer", opt)
        start = [p.detach().clone() for p in params]
        state = copy.deepcopy(opt.state_dict())
        sides = ("plain", "skip") if len(rows) % 2 == 0 else ("skip", "plain")
        seconds: dict[str, float] = {}
        after: dict[str, list[torch.Tensor]] = {}
        result = None
        for i, side in enumerate(sides):
            if i:  # back to where the first side started
                with torch.no_grad():
                    for p, s in zip(params, start):
                        p.copy_(s)
                opt.load_state_dict(copy.deepcopy(state))
            update.trained_logprobs = plain if side == "plain" else plain_logprobs
            try:
                t = time.perf_counter()
                result = optimize(module, roles)
                seconds[side] = time.perf_counter() - t
            finally:
                update.trained_logprobs = plain_logprobs
            after[side] = [p.detach().clone() for p in params]
        diff = max(float((a - b).abs().max()) for a, b in zip(after["plain"], after["skip"]))
        rows.append({
            "idle_share": idle_share(roles, module.grpo.num_generations), "plain_s": seconds["plain"],
            "skip_s": seconds["skip"], "ratio": seconds["skip"] / seconds["plain"], "max_adapter_diff": diff,
            "first": sides[0],
        })  # fmt: skip
        return result

    module_file.optimize = both
    try:
        with tempfile.TemporaryDirectory() as root:
            args = ["--model.validate_at_start=false", "--trainer.limit_val_batches=0", "--trainer.logger=false",
                    "--trainer.enable_progress_bar=false", f"--trainer.default_root_dir={root}", *overrides]  # fmt: skip
            done = (
                0
                if ckpt is None
                else int(torch.load(ckpt, map_location="cpu", weights_only=False)["global_step"])
            )
            args.append(f"--trainer.limit_train_batches={done + steps + 1}")
            module, data, trainer = from_config(config, *args)
            trainer.fit(module, data, ckpt_path=None if ckpt is None else str(ckpt))
    finally:
        module_file.optimize = optimize
    return rows[1:]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8, help="measured steps, after one warm-up")
    parser.add_argument(
        "--config", type=Path, action="append", default=[], help="overlays on configs/countdown.yaml"
    )
    parser.add_argument(
        "--ckpt", type=Path, default=None, help="a Lightning checkpoint of that config to go on from"
    )
    parser.add_argument("--smoke", action="store_true", help="seconds: " + " ".join(SMOKE))
    add_results_dir(parser)
    cli, rest = parser.parse_known_args()
    overrides = [a for a in rest if a != "--"] + (list(SMOKE) if cli.smoke else [])
    if cli.steps < 1:
        parser.error(f"--steps must be >= 1, got {cli.steps}")
    if cli.ckpt is not None and not cli.ckpt.is_file():
        parser.error(f"--ckpt {cli.ckpt} is not a file")
    single_thread()
    config = [str(ROOT / "configs" / "countdown.yaml"), *map(str, cli.config)]
    rows = measure(config, cli.ckpt, cli.steps, overrides)
    table = print_table(
        f"The update on the same rollouts, idle groups skipped against every row with a graph ({len(rows)} steps)",
        ["step", "idle groups", "plain, s", "skip, s", "skip / plain", "max Δ adapter", "first"],
        [[i + 1, r["idle_share"], r["plain_s"], r["skip_s"], r["ratio"], r["max_adapter_diff"], r["first"]]
         for i, r in enumerate(rows)],
    )  # fmt: skip
    summary = {
        "median_ratio": statistics.median(r["ratio"] for r in rows),
        "median_idle_share": statistics.median(r["idle_share"] for r in rows),
        "max_adapter_diff": max(r["max_adapter_diff"] for r in rows),
    }
    print(
        f"median skip / plain {summary['median_ratio']:.3f} at a median idle share {summary['median_idle_share']:.2f}"
    )
    write_json(
        "idle_groups",
        {"config": config, "ckpt": None if cli.ckpt is None else str(cli.ckpt), "overrides": overrides,
         "steps": rows, "summary": summary, "table": table},
        cli.results_dir,
    )  # fmt: skip


if __name__ == "__main__":
    main()
