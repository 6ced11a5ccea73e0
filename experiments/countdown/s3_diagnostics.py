"""Countdown S3's diagnostics per row over training: what each row's challenger learned, read beside the endpoints.

Part 2 of ``benchmarks/results/countdown/s3/README.md`` registers these reads (no test, no
decision). At every evaluation of a trained row, the mean over its archived seeds of:

- **conversion, training**: ``train/conversion_rate`` (the challenger right where the draft it read
  was wrong), averaged over the training steps since the previous evaluation;
- **conversion, held out**: the row's cascade on each held-out split (``deployed`` for a
  two-adapter row, ``cascade_aa`` for GRPO reading its own drafts);
- **zero-variance groups**: ``train/frac_zero_std_groups`` over the same steps (groups whose
  rewards all agree, which teach nothing);
- **each adapter alone**: ``alpha`` and ``beta``'s greedy pass@1 on each split;

and, where ``ablation/ROW/seed_N.json`` holds a trained bundle's summary ablation (the testbed's
preconditions run on the run's last bundle, its drafter drafting and its answerer reading)::

    python -m agon_lightning.testbeds.countdown.preconditions \\
      --bundle SWEEP/ROW/seed_N/checkpoints/last --threads 2 --out SWEEP/ablation/ROW/seed_N.json

the answerer's accuracy on failed drafts with the real summary, another problem's and an empty
one, per split, mean over the seeds measured. It reads the sweep's committed archive::

    python -m experiments.countdown.s3_diagnostics benchmarks/results/countdown/s3/sweep

and writes ``diagnostics.md`` and ``diagnostics.json`` beside it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from agon_lightning.experiments.sweep_report import run_rows
from experiments.countdown.s2_endpoints import SPLITS, archive_parser, archived_runs

#: the trained rows and the cascade each is read as
ROWS = {"agon": "deployed", "cooperative": "deployed", "grpo": "cascade_aa"}
#: (column, training metric): averaged over the steps since the previous evaluation
TRAINING = (
    ("conversion, training", "train/conversion_rate"),
    ("zero-variance groups", "train/frac_zero_std_groups"),
)
#: (column, metric under val/[hard/]): ``{key}`` is the row's cascade
HELD_OUT = (("conversion, held out", "{key}/conversion_rate"), ("alpha alone", "alpha/pass@1"),
            ("beta alone", "beta/pass@1"), ("cascade", "{key}/pass@1"))  # fmt: skip
#: the summary ablation's reads of a bundle's preconditions, per split
ABLATION = (("failed drafts", "failed_drafts"), ("real summary", "failed_real"),
            ("another problem's", "failed_other"), ("empty", "failed_empty"),
            ("real − other", "real_minus_other"), ("real − empty", "real_minus_empty"))  # fmt: skip


def window_means(by_step: dict[int, float], evaluations: list[int]) -> dict[int, float]:
    """At each evaluation step, the mean of ``by_step`` over the steps after the previous evaluation up to it.

    A step with no logged value in its window (step 0, or a metric the row does not log) is left out.
    """
    out, previous = {}, -1
    for step in sorted(evaluations):
        values = [v for s, v in by_step.items() if previous < s <= step]
        if values:
            out[step] = sum(values) / len(values)
        previous = step
    return out


def run_diagnostics(run_dir: Path, key: str) -> dict[int, dict[str, float]]:
    """``{evaluation step: {column: value}}`` of one run (every sitting of a resumed one)."""
    rows, _ = run_rows(run_dir)
    evaluations = sorted({int(r["step"]) for r in rows if r.get(f"val/{key}/pass@1")})
    out: dict[int, dict[str, float]] = {s: {} for s in evaluations}
    for column, metric in TRAINING:
        by_step = {int(r["step"]): float(r[metric]) for r in rows if r.get(metric)}
        for step, value in window_means(by_step, evaluations).items():
            out[step][column] = value
    for tag, split in SPLITS:
        prefix = "val/" + (f"{tag}/" if tag else "")
        for r in rows:
            step = int(r["step"])
            if step not in out:
                continue
            for column, metric in HELD_OUT:
                name = prefix + metric.format(key=key)
                if r.get(name):
                    out[step][f"{column} ({split})"] = float(r[name])
    return out


def row_curve(per_seed: list[dict[int, dict[str, float]]]) -> dict[int, dict[str, tuple[float, int]]]:
    """``{step: {column: (mean over the seeds that logged it, how many)}}``."""
    out: dict[int, dict[str, tuple[float, int]]] = {}
    for step in sorted({s for run in per_seed for s in run}):
        columns = {c for run in per_seed for c in run.get(step, {})}
        out[step] = {}
        for column in sorted(columns):
            values = [run[step][column] for run in per_seed if column in run.get(step, {})]
            out[step][column] = (sum(values) / len(values), len(values))
    return out


def ablation(sweep: Path, row: str) -> dict[str, dict[str, tuple[float, int]]]:
    """``{split: {column: (mean over the measured seeds, how many)}}`` from ``ablation/ROW/seed_N.json``."""
    files = sorted((sweep / "ablation" / row).glob("seed_*.json"))
    out: dict[str, dict[str, tuple[float, int]]] = {}
    for _, split in SPLITS:
        values = [json.loads(f.read_text())["values"]["by_split"].get(split) for f in files]
        values = [v for v in values if v]
        if values:
            out[split] = {
                column: (sum(v[name] for v in values) / len(values), len(values)) for column, name in ABLATION
            }
    return out


def _cell(value: tuple[float, int] | None, spec: str = ".3f") -> str:
    return "—" if value is None or math.isnan(value[0]) else format(value[0], spec)


def markdown(curves: dict[str, dict], ablations: dict[str, dict], seeds: dict[str, list[int]]) -> str:
    lines = ["# Countdown S3: diagnostics per row over training", "",
             "Means over each row's archived seeds (registered in part 2; no test, no decision). "
             "Training columns average the steps since the previous evaluation.", ""]  # fmt: skip
    for row, curve in curves.items():
        columns = [c for c, _ in TRAINING] + [f"{c} ({split})" for _, split in SPLITS for c, _ in HELD_OUT]
        columns = [c for c in columns if any(c in v for v in curve.values())]
        lines += [f"## {row} ({ROWS[row]}; seeds {', '.join(map(str, seeds[row]))})", "",
                  "| step | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]  # fmt: skip
        for step, values in curve.items():
            lines.append(f"| {step} | " + " | ".join(_cell(values.get(c)) for c in columns) + " |")
        lines.append("")
    lines += ["## Summary ablation on the trained adapters", ""]
    measured = {row: a for row, a in ablations.items() if a}
    if not measured:
        lines.append("No bundle measured yet (`ablation/ROW/seed_N.json`).")
    else:
        lines += ["| row | split | seeds | " + " | ".join(c for c, _ in ABLATION) + " |",
                  "|---|---|---|" + "---|" * len(ABLATION)]  # fmt: skip
        for row, splits in measured.items():
            for split, values in splits.items():
                n = next(iter(values.values()))[1]
                cells = [_cell(values[c], ".0f" if c == "failed drafts" else ".3f") for c, _ in ABLATION]
                lines.append(f"| {row} | {split} | {n} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = archive_parser(__doc__)
    args = parser.parse_args(argv)
    with archived_runs(args.sweep) as runs:
        seeds = {row: sorted(s for v, s in runs if v == row) for row in ROWS}
        curves = {
            row: row_curve([run_diagnostics(runs[(row, s)], key) for s in seeds[row]])
            for row, key in ROWS.items()
            if seeds[row]
        }
    ablations = {row: ablation(args.sweep, row) for row in curves}
    text = markdown(curves, ablations, seeds)
    (args.sweep / "diagnostics.md").write_text(text)
    payload = {
        "curves": {row: {str(s): {c: v[0] for c, v in cols.items()} for s, cols in c.items()} for row, c in curves.items()},
        "seeds": seeds,
        "ablation": {row: {sp: {c: v[0] for c, v in cols.items()} for sp, cols in a.items()} for row, a in ablations.items()},
    }  # fmt: skip
    (args.sweep / "diagnostics.json").write_text(json.dumps(payload, indent=1) + "\n")
    print(text)
    print(f"written to {args.sweep / 'diagnostics.md'} and .json")


if __name__ == "__main__":
    main()
