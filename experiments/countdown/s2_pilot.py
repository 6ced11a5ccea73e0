"""Countdown S2's GRPO-only pilot: the learning curve, and the training length its rule fixes.

Part 1 of ``benchmarks/results/countdown/s2/README.md`` (section 5) fixes the rule before the
pilot runs: T is the first evaluated step whose two-seed mean gain over step 0 (deployed, main
split) reaches 90% of the largest such gain; if the largest is at the cap and still rose by more
than 2 points over the last 20 steps, T is the cap (reported as capped); if GRPO's pass@1 at T is
above 0.90, the main split has no room and moves to 4 numbers::

    python -m experiments.countdown.s2_pilot benchmarks/results/countdown/s2/pilot

reads the pilot's archived runs (``archive/grpo/seed_N.tar.gz``), prints the curve and the rule's
reading, and writes ``pilot.json`` beside the archive.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

SHARE = 0.9  # T: the first step reaching this share of the largest gain
STILL_RISING = 0.02  # the last 20 steps' rise above which a curve has not stopped within the cap
NO_ROOM = 0.90  # GRPO's pass@1 at T above which the main split moves to 4 numbers


def curve(run_dir: Path, column: str) -> dict[int, float]:
    """step → ``column`` at each evaluation of the run (every sitting of a run the sweep resumed)."""
    from agon_lightning.experiments.sweep_report import logged_by_step

    return logged_by_step(run_dir, column)


def step_seconds(run_dir: Path) -> float:
    """A run's mean seconds per training step: sampling and update (``time/generate_s`` + ``time/update_s``),
    every sitting; evaluations are not in it."""
    generate, update = curve(run_dir, "time/generate_s"), curve(run_dir, "time/update_s")
    steps = sorted(set(generate) & set(update))
    if not steps:
        raise ValueError(f"{run_dir} logs no time/generate_s and time/update_s")
    return sum(generate[s] + update[s] for s in steps) / len(steps)


def training_length(mean_pass: dict[int, float], cap: int) -> dict:
    """The rule on a mean curve (step → pass@1): ``T``, whether it was capped, the gains, and the split."""
    steps = sorted(mean_pass)
    start = mean_pass[steps[0]]
    gain = {s: mean_pass[s] - start for s in steps}
    best = max(gain.values())
    best_step = max(steps, key=lambda s: (gain[s], -s))
    t = next(s for s in steps if gain[s] >= SHARE * best) if best > 0 else steps[-1]
    before = [s for s in steps if s < cap]
    capped = best_step == cap and bool(before) and gain[cap] - gain[before[-1]] > STILL_RISING
    if capped:
        t = cap
    return {
        "T": t, "capped": capped, "largest_gain": best, "largest_gain_step": best_step, "gain": gain,
        "pass_at_T": mean_pass[t], "main_split": "4 numbers" if mean_pass[t] > NO_ROOM else "3 numbers",
    }  # fmt: skip


def main(argv: list[str] | None = None, rule=training_length, default_cap: int = 120) -> None:
    """Read a pilot's archived GRPO runs, print the curve and ``rule``'s reading, write ``pilot.json``."""
    from agon_lightning.experiments.archive import unpack_all

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "pilot", type=Path, help="the pilot sweep's --out, holding archive/grpo/seed_N.tar.gz"
    )
    parser.add_argument(
        "--cap", type=int, default=default_cap, help=f"the pilot's steps (default {default_cap})"
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        runs = [d for d in unpack_all(args.pilot, Path(scratch)) if d.parent.name == "grpo"]
        if not runs:
            raise SystemExit(f"no archived grpo run under {args.pilot / 'archive'}")
        main_curves = [curve(d, "val/deployed/pass@1") for d in runs]
        hard_curves = [curve(d, "val/hard/deployed/pass@1") for d in runs]
        per_step = [step_seconds(d) for d in runs]
    steps = sorted(set.intersection(*(set(c) for c in main_curves)))
    mean_main = {s: sum(c[s] for c in main_curves) / len(main_curves) for s in steps}
    mean_hard = {s: sum(c.get(s, float("nan")) for c in hard_curves) / len(hard_curves) for s in steps}
    reading = rule(mean_main, args.cap)
    print(f"GRPO pilot, {len(runs)} seeds: deployed pass@1 against step (mean over seeds)\n")
    print(
        "| step | main | gain over step 0 | hard | "
        + " | ".join(d.name.replace("_", " ") for d in runs)
        + " |"
    )
    print("|---|---|---|---|" + "---|" * len(runs))
    for s in steps:
        seeds = " | ".join(f"{c[s]:.3f}" for c in main_curves)
        print(f"| {s} | {mean_main[s]:.3f} | {reading['gain'][s]:+.3f} | {mean_hard[s]:.3f} | {seeds} |")
    print(f"\nT = {reading['T']}{' (capped: still rising at the cap)' if reading['capped'] else ''}; "
          f"largest gain {reading['largest_gain']:+.3f} at step {reading['largest_gain_step']}; "
          f"pass@1 at T {reading['pass_at_T']:.3f}: main split of {reading['main_split']}")  # fmt: skip
    seconds = sum(per_step) / len(per_step)
    print(f"seconds per training step (sampling and update, evaluations excluded; mean over seeds): {seconds:.2f} "
          f"({', '.join(f'{s:.2f}' for s in per_step)})")  # fmt: skip
    record = {"runs": [d.parent.name + "/" + d.name for d in runs], "main": mean_main, "hard": mean_hard,
              "per_seed_main": main_curves, "seconds_per_step": seconds, "per_seed_seconds_per_step": per_step,
              **reading}  # fmt: skip
    (args.pilot / "pilot.json").write_text(json.dumps(record, indent=1) + "\n")
    print(f"written to {args.pilot / 'pilot.json'}")


if __name__ == "__main__":
    main()
