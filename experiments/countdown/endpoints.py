"""The Countdown sweep's pre-registered endpoints and decisions, read from its runs.

Section 5 of ``benchmarks/results/countdown/README.md`` fixes, before the sweep's first run, the
primary endpoint (deployed held-out pass@1 on the main split after the last step, Agon − GRPO,
paired by seed and problem: mean and 95% two-level bootstrap interval), the secondary ones and
the decision rule. This script computes exactly those from whatever runs of the sweep have
finished, and says how many of the pre-registered seeds each figure rests on: a decision is
final only when every pre-registered seed of both rows has finished; before that it is interim::

    python -m experiments.countdown.endpoints benchmarks/results/countdown/sweep \\
        --out benchmarks/results/countdown/sweep/endpoints.md

It writes ``endpoints.md`` and, beside it, ``endpoints.json``.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from agon_lightning.experiments.stats import PairedDifference

# The seeds section 5 registers per row; every other row: 0, 1, 2.
SEEDS = {"grpo": 5, "cooperative": 5, "agon": 5, "zero_shot": 1, "moa_untrained": 1}
OTHER_SEEDS = 3
# (name, variant, reference): the primary endpoint first, then the secondary pass@1 differences.
DIFFERENCES = (
    ("primary: Agon − GRPO", "agon", "grpo"),
    ("the exchange step: cooperative − GRPO", "cooperative", "grpo"),
    ("the competition step: Agon − cooperative", "agon", "cooperative"),
    ("the summary's content: Agon − other_summary", "agon", "other_summary"),
)
SPLITS = (("", "main"), ("hard", "hard"))
LENGTH_STEPS = (0, 20, 40)  # the evaluations whose deployed answer-stage p50 the design lists
EQUAL_PASS = 0.03  # "at equal pass@1": the tiebreak − Agon pass@1 interval within ±3 points


def decide(d: PairedDifference | None) -> str:
    """The design's rule: *shown* when the interval's low end is above 0, *contradicted* when its
    high end is below 0, *not resolved* otherwise (and *not run* without a pair)."""
    if d is None:
        return "not run"
    if d.low > 0:
        return "shown"
    if d.high < 0:
        return "contradicted"
    return "not resolved"


def registered(variant: str) -> int:
    return SEEDS.get(variant, OTHER_SEEDS)


@dataclass
class Difference:
    name: str
    variant: str
    reference: str
    split: str
    mean: float | None
    low: float | None
    high: float | None
    seeds: int
    problems: int
    decision: str
    final: bool  # every registered seed of both rows has finished


def p50_curve(run_dir: Path, key: str = "deployed", split: str = "") -> dict[int, float]:
    """step → the p50 completion length of the answering stage of ``key`` at that evaluation."""
    from agon_lightning.experiments.sweep_report import logged_by_step

    return logged_by_step(run_dir, f"val/{split + '/' if split else ''}{key}/length/p50")


def load(out: Path):
    """Every finished run under ``out`` (``VARIANT/seed_N/`` with the sweep's marker):
    ``(results, {(variant, seed): run directory})``."""
    from agon_lightning.experiments.sweep import EVAL_ONLY, MARKER, marked_wall_s
    from agon_lightning.experiments.sweep_report import read_run

    results, dirs = [], {}
    for marker in sorted(out.glob(f"*/seed_*/{MARKER}")):
        run_dir = marker.parent
        variant, seed = run_dir.parent.name, int(run_dir.name.removeprefix("seed_"))
        wall = marked_wall_s(marker)
        results.append(read_run(run_dir, variant, seed, EVAL_ONLY.get(variant, "deployed"), wall))
        dirs[variant, seed] = run_dir
    return results, dirs


def seeds_of(results, variant: str) -> list[int]:
    return sorted(r.seed for r in results if r.variant == variant)


def differences(results) -> list[Difference]:
    from agon_lightning.experiments.sweep_report import paired

    rows = []
    for split, split_name in SPLITS:
        for name, variant, reference in DIFFERENCES:
            d = paired(results, variant, reference, split, method="bootstrap")  # as S1 registered
            final = all(len(seeds_of(results, v)) >= registered(v) for v in (variant, reference))
            rows.append(
                Difference(
                    name, variant, reference, split_name,
                    *((d.mean, d.low, d.high) if d else (None, None, None)),
                    d.seeds if d else 0, d.problems if d else 0, decide(d), final,
                )
            )  # fmt: skip
    return rows


def mean(values: Sequence[float]) -> float:
    """The mean of the values that are not ``nan`` (``nan`` when none is)."""
    from agon_lightning.experiments.sweep_report import mean_std

    return mean_std(values)[0]


def lengths(results, dirs) -> dict[str, dict]:
    """Per trained row: the deployed answer stage's p50 length at each evaluation step (mean over
    seeds) and its last − first change, on each split."""
    out: dict[str, dict] = {}
    for variant in dict.fromkeys(r.variant for r in results):
        seeds = seeds_of(results, variant)
        per_split = {}
        for split, split_name in SPLITS:
            curves = [p50_curve(dirs[variant, s], split=split) for s in seeds]
            steps = sorted(set.intersection(*(set(c) for c in curves))) if curves else []
            if not steps:
                continue
            per_split[split_name] = {
                "p50": {step: mean([c[step] for c in curves]) for step in steps},
                "change": mean([c[steps[-1]] - c[steps[0]] for c in curves]) if len(steps) > 1 else math.nan,
            }
        out[variant] = {"seeds": seeds, **per_split}
    return out


def tiebreak(results, length_table) -> dict | None:
    """tiebreak − Agon in p50 length (final evaluation, mean over seeds) beside their pass@1
    difference; ``equal_pass`` when that difference's interval lies within ±3 points."""
    from agon_lightning.experiments.sweep_report import paired

    if "tiebreak" not in length_table or "agon" not in length_table:
        return None
    d = paired(results, "tiebreak", "agon", "", method="bootstrap")
    final_p50 = {v: mean([r.length_p50 for r in results if r.variant == v]) for v in ("tiebreak", "agon")}
    return {
        "length_p50_difference": final_p50["tiebreak"] - final_p50["agon"],
        "pass_at_1_difference": None if d is None else asdict(d),
        "equal_pass": d is not None and d.low >= -EQUAL_PASS and d.high <= EQUAL_PASS,
    }


def cascades(results) -> dict[str, dict]:
    """Each cascade row's conversions and regressions at the final evaluation, mean over seeds."""
    out = {}
    for variant in dict.fromkeys(r.variant for r in results):
        rs = [r for r in results if r.variant == variant]
        conv, reg = mean([r.conversions for r in rs]), mean([r.regressions for r in rs])
        if not math.isnan(conv):
            out[variant] = {"seeds": len(rs), "conversions": conv, "regressions": reg}
    return out


def _fmt(v: float | None, spec: str = "+.3f") -> str:
    return "—" if v is None or (isinstance(v, float) and math.isnan(v)) else format(v, spec)


def markdown(results, diffs: list[Difference], length_table: dict, tie: dict | None, casc: dict) -> str:
    ran = {v: seeds_of(results, v) for v in dict.fromkeys(r.variant for r in results)}
    lines = [
        "# The Countdown sweep's pre-registered endpoints",
        "",
        "Computed by `python -m experiments.countdown.endpoints` from the runs finished so far, as section 5 "
        "of `README.md` defines them. A decision is *final* only when every pre-registered seed of both "
        "rows has finished; until then it is *interim*, and may change.",
        "",
        "Runs finished (seeds): "
        + "; ".join(f"`{v}` {len(s)}/{registered(v)}" for v, s in ran.items())
        + ".",
        "",
        "## pass@1 differences (paired by seed and problem; 95% two-level bootstrap)",
        "",
        "| endpoint | split | difference [95% interval] | seeds × problems | decision | final? |",
        "|---|---|---|---|---|---|",
    ]
    for d in diffs:
        cell = "—" if d.mean is None else f"{d.mean:+.3f} [{d.low:+.3f}, {d.high:+.3f}]"
        lines.append(
            f"| {d.name} | {d.split} | {cell} | {d.seeds} × {d.problems} | {d.decision} | "
            f"{'final' if d.final else 'interim'} |"
        )
    primary = next(d for d in diffs if d.split == "main" and d.variant == "agon" and d.reference == "grpo")
    content = next(d for d in diffs if d.split == "main" and d.reference == "other_summary")
    if primary.decision == "shown" and content.decision == "not run":
        lines += ["", "Agon − GRPO is shown and `other_summary` has not finished a run: whether the gain "
                  "is reading the rival is still open."]  # fmt: skip
    elif primary.decision == "shown" and content.decision != "shown":
        lines += ["", "Agon − GRPO is shown while Agon − `other_summary` is not: a gain the testbed cannot "
                  "attribute to reading the rival."]  # fmt: skip
    lines += [
        "",
        "## The deployed answer stage's p50 length (tokens, mean over seeds)",
        "",
        "| row | split | " + " | ".join(f"step {s}" for s in LENGTH_STEPS) + " | last − first |",
        "|---|---|" + "---|" * (len(LENGTH_STEPS) + 1),
    ]
    for variant, table in length_table.items():
        for split_name in ("main", "hard"):
            if split_name not in table:
                continue
            p50 = table[split_name]["p50"]
            cells = [_fmt(p50.get(s), ".1f") for s in LENGTH_STEPS]
            lines.append(
                f"| `{variant}` | {split_name} | "
                + " | ".join(cells)
                + f" | {_fmt(table[split_name]['change'], '+.1f')} |"
            )
    lines += ["", "## The tiebreak's length at equal pass@1", ""]
    if tie is None:
        lines.append("`tiebreak` or `agon` has not finished a run yet.")
    else:
        d = tie["pass_at_1_difference"]
        pass_cell = "—" if d is None else f"{d['mean']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"
        verdict = "within ±3 points, so the lengths compare at equal pass@1" if tie["equal_pass"] else (
            "not within ±3 points, so this is not a comparison at equal pass@1")  # fmt: skip
        lines.append(
            f"tiebreak − Agon: p50 length {tie['length_p50_difference']:+.1f} tokens; pass@1 {pass_cell}, {verdict}."
        )
    lines += ["", "## Conversions and regressions of each cascade row (final evaluation, share of problems, mean over seeds)",
              "", "| row | seeds | conversions | regressions |", "|---|---|---|---|"]  # fmt: skip
    for variant, c in casc.items():
        lines.append(f"| `{variant}` | {c['seeds']} | {c['conversions']:.3f} | {c['regressions']:.3f} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the sweep's --out, holding VARIANT/seed_N/")
    parser.add_argument(
        "--out", type=Path, default=None, help="endpoints.md to write (default: SWEEP/endpoints.md)"
    )
    args = parser.parse_args(argv)
    results, dirs = load(args.sweep)
    if not results:
        raise SystemExit(f"no finished run under {args.sweep} (VARIANT/seed_N/ with the sweep's marker)")
    diffs, length_table = differences(results), lengths(results, dirs)
    tie, casc = tiebreak(results, length_table), cascades(results)
    out = args.out or args.sweep / "endpoints.md"
    text = markdown(results, diffs, length_table, tie, casc)
    out.write_text(text)
    record = {
        "runs": {v: seeds_of(results, v) for v in dict.fromkeys(r.variant for r in results)},
        "differences": [asdict(d) for d in diffs], "lengths": length_table, "tiebreak": tie, "cascades": casc,
    }  # fmt: skip
    out.with_suffix(".json").write_text(json.dumps(record, indent=1) + "\n")
    print(text)
    print(f"written to {out} and {out.with_suffix('.json')}")


if __name__ == "__main__":
    main()
