"""The games on Countdown: the exploratory table of ``benchmarks/results/countdown/games/README.md``.

Reads the sweep's committed archive (``archive/VARIANT/seed_N.tar.gz``: each finished run's
outcomes and metrics) and writes, per row, what the design fixed before the runs: the deployed
held-out pass@1 at the last evaluation (main and hard split; each row's deployment is the one its
game declares, as the run's ``outcomes.jsonl`` names it), each seed's value and the mean, the
seconds per training step, and each row minus ``grpo`` paired by seed and problem with the crossed
t interval and the smallest difference it could detect with 80% power. Nothing is called better
or worse: the table is exploratory::

    python -m experiments.countdown.games_table benchmarks/results/countdown/games/sweep

It writes ``table.md`` and ``table.json`` beside the archive; rows whose seeds are not all
archived yet are marked partial.
"""

from __future__ import annotations

import json
from pathlib import Path

from agon_lightning.experiments.stats import crossed_t
from experiments.countdown.s2_endpoints import (
    archive_parser,
    archived_runs,
    minimum_detectable,
    outcomes_of,
    table,
)

ROWS = ("grpo", "agon", "prover_verifier", "debate", "challenger_solver", "zero_sum")
REFERENCE = "grpo"
SEEDS = (0, 1, 2)
SPLITS = (("", "main"), ("hard", "hard"))


def seconds_per_step(run_dir: Path) -> float | None:
    """Mean ``time/generate_s + time/update_s`` over the run's training steps."""
    from agon_lightning.experiments.sweep_report import run_rows

    rows, _ = run_rows(run_dir)  # every sitting of a run the sweep resumed
    steps = [float(r["time/generate_s"]) + float(r["time/update_s"]) for r in rows if r.get("time/update_s")]
    return sum(steps) / len(steps) if steps else None


def deployed_key(run_dir: Path) -> str:
    from agon_lightning.experiments.sweep_report import latest_metrics, resolve_key

    return resolve_key(latest_metrics(run_dir).parent, "deployed")


def compute(runs: dict) -> list[dict]:
    out = []
    for row in ROWS:
        seeds = sorted(s for (v, s) in runs if v == row)
        record: dict = {"row": row, "seeds": seeds, "partial": seeds != list(SEEDS)}
        if not seeds:
            out.append(record)
            continue
        record["deployed"] = sorted({deployed_key(runs[(row, s)]) for s in seeds})
        record["seconds_per_step"] = {s: seconds_per_step(runs[(row, s)]) for s in seeds}
        for tag, split in SPLITS:
            per_seed = {}
            for s in seeds:
                outcomes = outcomes_of(runs[(row, s)], "deployed", tag)
                per_seed[s] = sum(outcomes.values()) / len(outcomes) if outcomes else None
            values = [v for v in per_seed.values() if v is not None]
            record[split] = {"per_seed": per_seed, "mean": sum(values) / len(values) if values else None}
            if row == REFERENCE:
                continue
            pair = table(runs, (row, "deployed"), (REFERENCE, "deployed"), tag, {})
            if pair is None or pair[0].shape[0] < 2 or pair[0].shape[1] < 2:
                continue  # one seed: no interval over new seeds can be drawn
            d = crossed_t(*pair)
            mde = minimum_detectable(d.se, d.df) if d.se > 0 and d.df >= 1 else None
            record[split]["minus_grpo"] = {"mean": d.mean, "low": d.low, "high": d.high, "seeds": d.seeds,
                                           "problems": d.problems, "mde": mde}  # fmt: skip
        out.append(record)
    return out


def markdown(records: list[dict]) -> str:
    lines = [
        "| row | deployed | seeds | main pass@1: mean (each seed) | − grpo [95% interval], MDE | "
        "hard pass@1: mean | − grpo [95% interval], MDE | s/step |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        if not r["seeds"]:
            lines.append(f"| {r['row']} | — | not run | | | | | |")
            continue
        cells = []
        for split in ("main", "hard"):
            part = r[split]
            each = ", ".join("—" if v is None else f"{v:.3f}" for v in part["per_seed"].values())
            mean = "—" if part["mean"] is None else f"{part['mean']:.3f}"
            cells.append(f"{mean} ({each})" if split == "main" else mean)
            diff = part.get("minus_grpo")
            if r["row"] == REFERENCE:
                cells.append("reference")
            elif diff is None:
                cells.append("— (needs 2 seeds of both)")
            else:
                mde = "—" if diff["mde"] is None else f"{diff['mde']:.3f}"
                cells.append(f"{diff['mean']:+.3f} [{diff['low']:+.3f}, {diff['high']:+.3f}], {mde}")
        secs = [v for v in r["seconds_per_step"].values() if v is not None]
        seeds = ", ".join(map(str, r["seeds"])) + (" (partial)" if r["partial"] else "")
        lines.append(
            f"| {r['row']} | {', '.join(r['deployed'])} | {seeds} | {cells[0]} | {cells[1]} | {cells[2]} | "
            f"{cells[3]} | {sum(secs) / len(secs):.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = archive_parser(__doc__)
    args = parser.parse_args(argv)
    with archived_runs(args.sweep) as runs:
        records = compute(runs)
    text = markdown(records)
    (args.sweep / "table.md").write_text(text)
    (args.sweep / "table.json").write_text(json.dumps(records, indent=1) + "\n")
    print(text)
    print(f"written to {args.sweep / 'table.md'} and .json")


if __name__ == "__main__":
    main()
