"""The sweep's results: read each finished run, then the tables, the paired comparisons and the plots.

Results come from each run's ``metrics.csv``: the final held-out pass@1 and length of the
deployed policy (``val/deployed/*``, and ``val/hard/deployed/*`` when the data module has a
hard split), the whole cascade's cost and what it converted and broke (``val/KEY/cost/*``,
``…/conversions``, ``…/regressions``), the adapters' error overlap at the first and the last
evaluation (``val/overlap/*``), and the rollout budget: per step ``(train/draft/length +
train/challenge/length) × N × P``, with N and P from the run's saved ``config.yaml``, summed
over steps. Paired comparisons (Agon against GRPO, each ablation against Agon) give the difference in
pass@1 over seeds × problems from each run's ``outcomes.jsonl`` with an interval over new seeds and
new problems
(:mod:`agon_lightning.experiments.stats`); the paper's table is :mod:`agon_lightning.experiments.paper_table`'s.
Running the grid is :mod:`agon_lightning.experiments.sweep`'s job.
"""

from __future__ import annotations

import csv
import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import yaml

from agon_lightning.game.names import ALPHA, BASE

# (variant, reference): each row of the paired-comparison table is variant − reference.
COMPARISONS = (
    ("agon", "grpo"), ("agon", "grpo_n"), ("cooperative", "grpo"), ("cooperative", "agon"),
    ("no_exchange", "agon"), ("shared_opponent", "agon"), ("margin", "agon"), ("fixed_roles", "agon"),
    ("tiebreak", "agon"), ("self_play", "agon"), ("self_refine", "agon"), ("grpo_self_cascade", "grpo"),
    ("moa_untrained", "agon"), ("zero_shot", "agon"), ("other_summary", "agon"),
)  # fmt: skip
SPLITS = (("", "held-out"), ("hard", "hard split"))
# Variants that train nothing → the evaluator key they report instead of ``deployed``.
EVAL_ONLY = {"moa_untrained": "moa", "zero_shot": BASE}
# Variants read from another variant's runs (same training) → (that variant, the key they report).
DERIVED = {"grpo_self_cascade": ("grpo", "cascade_aa")}
# RunResult field → the metric it reads at the last evaluation, ``{key}`` the run's policy.
FINAL_METRICS = {
    "total_tokens": "val/{key}/cost/total_tokens", "draft_tokens": "val/{key}/cost/draft_tokens",
    "challenger_prompt_tokens": "val/{key}/cost/challenger_prompt_tokens",
    "challenger_tokens": "val/{key}/cost/challenger_tokens", "wall_s_per_problem": "val/{key}/cost/wall_s",
    "conversions": "val/{key}/conversions", "regressions": "val/{key}/regressions",
    "length_p50": "val/{key}/length/p50", "length_p90": "val/{key}/length/p90", "cap_hit": "val/{key}/cap_hit",
    "draft_length_p50": "val/{key}/draft/length/p50", "draft_length_p90": "val/{key}/draft/length/p90",
    "draft_cap_hit": "val/{key}/draft/cap_hit",
    "jaccard_end": "val/overlap/jaccard", "beta_wrong_given_alpha_wrong_end": "val/overlap/beta_wrong_given_alpha_wrong",
}  # fmt: skip
FIRST_METRICS = {"jaccard_start": "val/overlap/jaccard",
                 "beta_wrong_given_alpha_wrong_start": "val/overlap/beta_wrong_given_alpha_wrong"}  # fmt: skip


@dataclass
class RunResult:
    """What one finished run measured (``curve``: ``(step, pass@1, length)`` per evaluation)."""

    variant: str
    seed: int
    pass_at_1: float
    length: float
    base_pass_at_1: float
    steps: int
    rollout_tokens: float  # nan where the game's roles are not drafts and challenges
    train_s: float
    wall_s: float
    hard_pass_at_1: float = math.nan
    hard_length: float = math.nan
    total_tokens: float = math.nan
    draft_tokens: float = math.nan
    challenger_prompt_tokens: float = math.nan
    challenger_tokens: float = math.nan
    wall_s_per_problem: float = math.nan
    conversions: float = math.nan
    regressions: float = math.nan
    # Length per role at the last evaluation: the answering stage (the policy alone, or the
    # cascade's challenger) and, for a cascade, its drafter; cap_hit: stopped by max_new_tokens.
    length_p50: float = math.nan
    length_p90: float = math.nan
    cap_hit: float = math.nan
    draft_length_p50: float = math.nan
    draft_length_p90: float = math.nan
    draft_cap_hit: float = math.nan
    jaccard_start: float = math.nan
    jaccard_end: float = math.nan
    beta_wrong_given_alpha_wrong_start: float = math.nan
    beta_wrong_given_alpha_wrong_end: float = math.nan
    curve: list[tuple[int, float, float]] = field(default_factory=list)
    hard_curve: list[tuple[int, float, float]] = field(default_factory=list)  # the same, on the hard split
    policy: str = ""  # the evaluator key of the deployed policy (``cascade_ab``, ``alpha``, ``base``…)
    # split → question → (correct, tokens) of the deployed policy at the last evaluation
    outcomes: dict[str, dict[str, tuple[bool, int]]] = field(default_factory=dict)


def _float(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row.get(key) else 0.0


def _optional(row: dict[str, str], key: str) -> float:
    return float(row[key]) if row.get(key) else math.nan


def metrics_files(directory: Path) -> list[Path]:
    """A run's ``lightning_logs/version_*/metrics.csv``, oldest first (each resumed sitting logs a new version)."""
    logs = sorted(
        directory.glob("lightning_logs/version_*/metrics.csv"), key=lambda p: int(p.parent.name[8:])
    )
    if not logs:
        raise FileNotFoundError(f"no lightning_logs/version_*/metrics.csv under {directory}")
    return logs


def latest_metrics(directory: Path) -> Path:
    """A run's ``metrics.csv`` of its latest ``lightning_logs/version_*`` (a resumed run logs a new one)."""
    return metrics_files(directory)[-1]


def _is_val(row: dict[str, str]) -> bool:
    return any(v and k.startswith(("val/", "trace/val/")) for k, v in row.items())


def stitch(sittings: Sequence[list[dict[str, str]]]) -> list[dict[str, str]]:
    """The rows a run never stopped would have logged, from the ``metrics.csv`` rows of each sitting of a resumed one.

    A training row's ``step`` is the step's index and an evaluation row's the steps trained, so a
    sitting resumed after ``k`` steps starts at a training row ``k`` or an evaluation row ``k + 1``.
    Each sitting gives the rows before that point of the next one: what it logged after the
    checkpoint the next resumed from was logged again there (``agon fit --ckpt_path last`` repeats
    it exactly).
    """
    rows: list[dict[str, str]] = []
    for i, sitting in enumerate(sittings):
        later = (
            [int(r["step"]) - _is_val(r) for r in sittings[i + 1] if r.get("step")]
            if i + 1 < len(sittings)
            else []
        )
        if not later:  # the last sitting, or a next one that logged nothing
            rows += sitting
            continue
        resumed_at = min(later)
        rows += [r for r in sitting if not r.get("step") or int(r["step"]) - _is_val(r) < resumed_at]
    return rows


def run_rows(directory: Path) -> tuple[list[dict[str, str]], Path]:
    """A run's ``metrics.csv`` rows across every sitting (:func:`stitch`), and its latest log folder."""
    files = metrics_files(directory)
    return stitch([list(csv.DictReader(f.open())) for f in files]), files[-1].parent


def logged_by_step(directory: Path, column: str) -> dict[int, float]:
    """step → ``column`` wherever the run logged it, across every sitting (:func:`run_rows`)."""
    return {int(r["step"]): float(r[column]) for r in run_rows(directory)[0] if r.get(column)}


def read_run(directory: Path, variant: str, seed: int, key: str, wall_s: float) -> RunResult:
    """Read a finished run's ``metrics.csv`` (every sitting of a resumed one, :func:`run_rows`) and the
    latest sitting's ``config.yaml`` and ``outcomes.jsonl``."""
    rows, latest = run_rows(directory)
    metrics = latest / "metrics.csv"
    evals = [r for r in rows if r.get(f"val/{key}/pass@1")]
    if not evals:
        raise ValueError(f"{directory} logs no val/{key}/pass@1: did the run evaluate?")
    curve = {int(r["step"]): (_float(r, f"val/{key}/pass@1"), _float(r, f"val/{key}/length")) for r in evals}
    steps = [r for r in rows if r.get("time/update_s")]  # every game's training steps log their time
    # Rollout tokens are counted where the roles are drafts and challenges (P problems × N each); another
    # game samples its own counts a step (rounds, a judge, a solver's votes): not counted, shown as "—".
    tokens = 0.0 if not steps else math.nan
    if steps and all(r.get("train/draft/length") for r in steps):
        config = yaml.safe_load((metrics.parent / "config.yaml").read_text())
        per_length = config["model"]["grpo"]["num_generations"] * config["data"]["init_args"]["batch_size"]
        tokens = round(
            sum(_float(r, "train/draft/length") + _float(r, "train/challenge/length") for r in steps)
            * per_length
        )
    hard_curve = {
        int(r["step"]): (_float(r, f"val/hard/{key}/pass@1"), _optional(r, f"val/hard/{key}/length"))
        for r in evals
        if r.get(f"val/hard/{key}/pass@1")
    }
    final = curve[int(evals[-1]["step"])]  # the last evaluation: after the last step
    first, last = evals[0], evals[-1]
    return RunResult(
        variant, seed, final[0], final[1], _float(first, "val/base/pass@1"), len(steps), tokens,
        sum(_float(r, "time/generate_s") + _float(r, "time/update_s") for r in steps), wall_s,
        _optional(last, f"val/hard/{key}/pass@1"), _optional(last, f"val/hard/{key}/length"),
        **{name: _optional(last, metric.format(key=key)) for name, metric in FINAL_METRICS.items()},
        **{name: _optional(first, metric) for name, metric in FIRST_METRICS.items()},
        curve=[(step, *curve[step]) for step in sorted(curve)],
        hard_curve=[(step, *hard_curve[step]) for step in sorted(hard_curve)], outcomes=read_outcomes(metrics.parent, key),
        policy=resolve_key(metrics.parent, key),
    )  # fmt: skip


def outcome_rows(run_dir: Path) -> list[dict]:
    """The rows of a run's ``outcomes.jsonl`` (``[]`` when it has none)."""
    path = run_dir / "outcomes.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def resolve_key(run_dir: Path, key: str, rows: list[dict] | None = None) -> str:
    """``deployed`` → the evaluator key the run deployed (as its ``outcomes.jsonl`` names it; older
    files: the first trained cascade present, else the single adapter); any other key as is."""
    rows = outcome_rows(run_dir) if rows is None else rows
    if key != "deployed" or not rows:
        return key
    return rows[0].get("deployed") or next(k for k in ("cascade_ab", "cascade_aa", ALPHA) if k in rows[0])


def read_outcomes(run_dir: Path, key: str) -> dict[str, dict[str, tuple[bool, int]]]:
    """``outcomes.jsonl`` of a run (written by ``ValidationReport``) for the policy ``key``.

    ``deployed`` resolves to the key each row names as deployed (older files without it: the
    first trained cascade present, else the single adapter); a run without the file gets ``{}``.
    """
    rows = outcome_rows(run_dir)
    if not rows:
        return {}
    key = resolve_key(run_dir, key, rows)
    out: dict[str, dict[str, tuple[bool, int]]] = {}
    for r in rows:
        out.setdefault(r["split"], {})[r["question"]] = (bool(r[key]), int(r[f"{key}/length"]))
    return out


def paired(results: Sequence[RunResult], variant: str, reference: str, split: str, method: str = "crossed"):
    """pass@1(variant) − pass@1(reference) on ``split``, paired by seed and problem, over the seeds
    both ran and the problems every one of those runs evaluated; ``None`` when they share none.

    ``method``: ``crossed`` (default), the t interval over new seeds and new problems
    (:func:`~agon_lightning.experiments.stats.crossed_t`); ``bootstrap``, the two-level percentile
    bootstrap S1 registered (:func:`~agon_lightning.experiments.stats.paired_bootstrap`), which
    under-covers with 3 seeds (``agon_lightning/experiments/coverage.py``).
    """
    from agon_lightning.experiments.stats import crossed_t, paired_bootstrap

    ours = {r.seed: r.outcomes.get(split, {}) for r in results if r.variant == variant}
    theirs = {r.seed: r.outcomes.get(split, {}) for r in results if r.variant == reference}
    if not ours or not theirs:
        return None
    if variant in EVAL_ONLY and len(ours) == 1 and len(theirs) > 1:  # untrained: one seed stands for all
        ours = dict.fromkeys(theirs, next(iter(ours.values())))
    if reference in EVAL_ONLY and len(theirs) == 1 and len(ours) > 1:
        theirs = dict.fromkeys(ours, next(iter(theirs.values())))
    seeds = sorted(ours.keys() & theirs.keys())
    questions = sorted(set.intersection(*(set(ours[s]) & set(theirs[s]) for s in seeds))) if seeds else []
    if len(questions) < 2:
        return None
    a = [[ours[s][q][0] for q in questions] for s in seeds]
    b = [[theirs[s][q][0] for q in questions] for s in seeds]
    if method == "bootstrap":
        return paired_bootstrap(a, b)
    if method != "crossed":
        raise ValueError(f"method must be 'crossed' or 'bootstrap', got {method!r}")
    return crossed_t(a, b)


def compare(results: Sequence[RunResult], variant: str, reference: str, split: str) -> str | None:
    """``mean [low, high] (S seeds × P)`` of :func:`paired`, or ``None``."""
    d = paired(results, variant, reference, split)
    return None if d is None else f"{d} ({d.seeds} seeds × {d.problems})"


def mean_std(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation of the values that are not ``nan`` (``nan`` for too few)."""
    values = [v for v in values if not math.isnan(v)]
    if not values:
        return math.nan, math.nan
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else math.nan


def _cell(values: Sequence[float], fmt: str) -> str:
    mean, std = mean_std(values)
    if math.isnan(mean):
        return "—"
    return f"{mean:{fmt}}" if math.isnan(std) else f"{mean:{fmt}} ± {std:{fmt}}"


def length_lines(results: Sequence[RunResult]) -> list[str]:
    """The markdown table of each variant's length per role at the last evaluation (mean ± std over seeds)."""
    lines = [
        "", "Length per role at the last evaluation (held-out, deployed policy): completion tokens p50 / p90 and "
        "the share stopped by `max_new_tokens` (cap hit), for the stage that answers (the policy alone, or the "
        "cascade's challenger) and for a cascade's drafter.", "",
        "| variant | answer p50 | answer p90 | answer cap hit | draft p50 | draft p90 | draft cap hit |",
        "|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for variant in dict.fromkeys(r.variant for r in results):
        rs = [r for r in results if r.variant == variant]
        cells = [_cell([getattr(r, k) for r in rs], fmt) for k, fmt in
                 [("length_p50", ".1f"), ("length_p90", ".1f"), ("cap_hit", ".3f"), ("draft_length_p50", ".1f"),
                  ("draft_length_p90", ".1f"), ("draft_cap_hit", ".3f")]]  # fmt: skip
        lines.append(f"| {variant} | " + " | ".join(cells) + " |")
    return lines


def write_report(results: Sequence[RunResult], out: Path, pending: Sequence[str] = ()) -> None:
    """``results.csv`` (one row per run), ``results.md`` (mean ± std per variant) and the plots."""
    out.mkdir(parents=True, exist_ok=True)
    columns = [f for f in RunResult.__dataclass_fields__ if f not in ("curve", "hard_curve", "outcomes")]
    with (out / "results.csv").open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: v for k, v in asdict(r).items() if k in columns} for r in results)
    by_variant: dict[str, list[RunResult]] = {}
    for r in results:
        by_variant.setdefault(r.variant, []).append(r)
    lines = [
        "# Sweep results", "",
        "Final held-out pass@1 (greedy) and mean completion tokens of the deployed policy (cascade alpha → beta; "
        "alpha for `grpo`; alpha → alpha for `self_play`, `self_refine` and `grpo_self_cascade` (read from the "
        "`grpo` runs); base → base for `moa_untrained`; the base for `zero_shot`), mean ± sample std "
        "over seeds. Rollout tokens: every token sampled in training (drafts + challenges; — for a game with other "
        "roles); train time: "
        "generation + update; wall: the whole run, evaluations included.", "",
        "| variant | seeds | pass@1 | length | hard pass@1 | hard length | steps | rollout tokens | train time (s) | wall (s) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for variant, rs in by_variant.items():
        cells = [_cell([getattr(r, k) for r in rs], fmt) for k, fmt in
                 [("pass_at_1", ".3f"), ("length", ".1f"), ("hard_pass_at_1", ".3f"), ("hard_length", ".1f"),
                  ("steps", ".0f"), ("rollout_tokens", ",.0f"), ("train_s", ".0f"), ("wall_s", ".0f")]]  # fmt: skip
        lines.append(f"| {variant} | {len(rs)} | " + " | ".join(cells) + " |")
    lines += length_lines(results)
    rows = [
        (variant, reference, [compare(results, variant, reference, split) for split, _ in SPLITS])
        for variant, reference in COMPARISONS
    ]
    rows = [r for r in rows if any(r[2])]
    if rows:
        lines += [
            "", "Paired differences in pass@1 (variant − reference; mean [95% interval over new seeds and new "
            "problems], pairing runs of the same seed on the same problem):", "",
            "| variant − reference | " + " | ".join(name for _, name in SPLITS) + " |",
            "|---|" + "---|" * len(SPLITS),
        ]  # fmt: skip
        lines += [f"| {v} − {ref} | " + " | ".join(c or "—" for c in cells) + " |" for v, ref, cells in rows]
    if results:
        lines += ["", f"Untrained base alone: pass@1 {_cell([r.base_pass_at_1 for r in results], '.3f')}."]
    if pending:
        lines += ["", f"Not finished yet ({len(pending)}): " + ", ".join(pending) + "."]
    (out / "results.md").write_text("\n".join(lines) + "\n")
    plot_curves(by_variant, out)


def plot_curves(by_variant: dict[str, list[RunResult]], out: Path) -> None:
    """``pass_at_1.png`` and ``length.png``: the deployed policy of each variant, a panel per split.

    Each panel is the mean over seeds against step (± std shaded), the hard split's as the
    held-out one's. One colour per variant in both panels and files, dashed where the variant
    deploys a cascade, ``agon`` thick; evaluation-only variants are horizontal lines.
    """
    from agon_lightning.experiments.plots import Panel, Series, colours, draw, is_cascade

    palette = colours(list(by_variant))
    for index, name, label in [
        (1, "pass_at_1.png", "pass@1 (greedy)"),
        (2, "length.png", "completion tokens"),
    ]:
        main, hard = Panel("held-out", label), Panel("hard split", label)
        for variant, rs in by_variant.items():
            # Dashed where the run deployed a cascade (as its own outcomes name it), solid for one policy.
            dashed = any(is_cascade(r.policy) for r in rs)
            style = dict(
                colour=palette[variant],
                dashed=dashed,
                emphasised=variant == "agon",
                level=variant in EVAL_ONLY,
            )
            for panel, curves in ((main, [r.curve for r in rs]), (hard, [r.hard_curve for r in rs])):
                by_step: dict[int, list[float]] = {}
                for curve in curves:
                    for point in curve:
                        by_step.setdefault(point[0], []).append(point[index])
                if not by_step:
                    continue
                steps = sorted(by_step)
                stats = [mean_std(by_step[s]) for s in steps]
                panel.series.append(
                    Series(
                        variant,
                        steps,
                        [m for m, _ in stats],
                        std=[0.0 if math.isnan(d) else d for _, d in stats],
                        **style,
                    )  # fmt: skip
                )
        panels = [main, hard] if hard.series else [main]
        draw(panels, len(panels), out / name, f"deployed policy of each variant: {label}")
