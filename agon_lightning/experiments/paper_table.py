"""``agon sweep --table paper``: our results in the paper's order, its numbers beside ours.

The paper's numbers (Qwen3-0.6B on DeepMath-hard, single runs, 300 held-out problems; from the
detailed published summary docs/concepts/reward.md cites) stand in their own columns; ours are the sweep's
runs on whatever base config it was given. Per cell:

- **pass@1 with a 95% interval**: the k right answers of all seeds' final evaluations out of their
  S·I answers, with an interval over new seeds *and* new problems
  (:func:`~agon_lightning.experiments.stats.crossed_t`; one seed: Clopper–Pearson over its problems).
  Pooled Clopper–Pearson, which S1's table showed, treats the S·I answers as independent and so
  ignores the spread between training runs; that spread is shown beside it (min–max of the seeds' pass@1);
- the final stage's mean completion tokens and the whole cascade's (draft + challenger) — the
  paper reports only the former.

Then the two headline steps as paired differences (the same interval) (cooperative − GRPO: exchange;
Agon − cooperative: competition), the ablations and the density rows, and what the paper leaves
open: the adapters' error overlap at the first and last evaluation, the deployed cascade's
conversions and regressions, its cost per problem, and the length per role (p50, p90, cap hit).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from agon_lightning.experiments.stats import clopper_pearson, crossed_t
from agon_lightning.experiments.sweep_report import SPLITS, RunResult, compare, length_lines, mean_std


@dataclass(frozen=True)
class PaperRow:
    """One row of the paper's tables: its label, our variant, its pass@1 (%), length (k tokens), 95% CI."""

    label: str
    variant: str
    pass_at_1: float
    length_k: float | None = None
    ci: tuple[float, float] | None = None


MAIN = (
    PaperRow("zero-shot", "zero_shot", 23, 6.1, (18.4, 28.3)),
    PaperRow("vanilla GRPO (2N)", "grpo", 30, 8.1, (25.0, 35.4)),
    PaperRow("self-refinement", "self_refine", 32, 7.9, (26.9, 37.5)),
    PaperRow("GRPO two-pass self-cascade", "grpo_self_cascade", 35, 8.0, (29.7, 40.7)),
    PaperRow("Mixture-of-Agents, untrained", "moa_untrained", 34, 6.9, (28.8, 39.5)),
    PaperRow("competitive, shared opponent (hidden)", "shared_opponent", 32, 7.4, (26.9, 37.5)),
    PaperRow("cooperative exchange", "cooperative", 46, 5.1, (40.3, 51.8)),
    PaperRow("Agon (competition + exchange)", "agon", 61, 3.5, (55.2, 66.6)),
)
ABLATIONS = (
    ("competition reward", (PaperRow("cooperative", "cooperative", 46), PaperRow("adversarial", "agon", 61))),
    ("information", (PaperRow("shared opponent", "shared_opponent", 32),
                     PaperRow("per-rollout opponents", "agon", 61))),
    ("reward form", (PaperRow("margin", "margin", 49), PaperRow("conversion bonus", "agon", 61))),
    ("roles", (PaperRow("fixed", "fixed_roles", 52), PaperRow("rotate", "agon", 61))),
)  # fmt: skip
DENSITY = (PaperRow("Agon", "agon", 61, 3.5), PaperRow("Agon + length tiebreak", "tiebreak", 60, 2.6))
# (step, variant, reference, the paper's difference in points)
HEADLINES = (("exchange", "cooperative", "grpo", 16), ("competition", "agon", "cooperative", 15))
PAPER_VARIANTS = tuple(
    dict.fromkeys([r.variant for r in MAIN] + [r.variant for _, rows in ABLATIONS for r in rows] + [r.variant for r in DENSITY])
)  # fmt: skip
# Our rows beyond the paper, listed when the sweep ran them.
EXTRAS = (("GRPO with N (half the rollouts)", "grpo_n"), ("competition, per-rollout hidden opponent", "no_exchange"),
          ("self-play (one adapter, Agon's reward)", "self_play"))  # fmt: skip


def seed_outcomes(
    results: Sequence[RunResult], variant: str, split: str = ""
) -> list[dict[str, tuple[bool, int]]]:
    """``variant``'s final outcomes on ``split``, one ``{question: (correct, tokens)}`` per seed that has them."""
    return [c for c in (r.outcomes.get(split, {}) for r in results if r.variant == variant) if c]


def pooled(results: Sequence[RunResult], variant: str, split: str = "") -> tuple[int, int, int]:
    """``(right answers, answers, seeds)`` of ``variant``'s final evaluations on ``split``, over all seeds."""
    cells = seed_outcomes(results, variant, split)
    return sum(ok for c in cells for ok, _ in c.values()), sum(len(c) for c in cells), len(cells)


def row_interval(results: Sequence[RunResult], variant: str, split: str = "") -> tuple[float, float] | None:
    """A row's 95% pass@1 interval: over new seeds and new problems
    (:func:`~agon_lightning.experiments.stats.crossed_t` on its seeds × shared problems) when it has
    several seeds, Clopper–Pearson over its problems when it has one; ``None`` without outcomes."""
    cells = seed_outcomes(results, variant, split)
    if not cells:
        return None
    if len(cells) == 1:
        k, n, _ = pooled(results, variant, split)
        return clopper_pearson(k, n)
    questions = sorted(set.intersection(*(set(c) for c in cells)))
    if len(questions) < 2:
        return None
    d = crossed_t([[c[q][0] for q in questions] for c in cells])
    return max(0.0, d.low), min(1.0, d.high)


def pass_cell(results: Sequence[RunResult], variant: str, split: str = "") -> str:
    """``47.5 [42.6, 52.5] (3 × 200; seeds 45.0–50.5)``: pooled pass@1 % with its interval
    (:func:`row_interval`), or ``—``."""
    k, n, seeds = pooled(results, variant, split)
    if n == 0:
        return "—"
    low, high = row_interval(results, variant, split) or (math.nan, math.nan)
    text = f"{100 * k / n:.1f} [{100 * low:.1f}, {100 * high:.1f}] ({seeds} × {n // seeds})"
    # Each seed's pass@1 on the same distinct problems the pooled value counts (a run's logged
    # pass@1 weighs a problem drawn twice twice, so it need not lie around the pooled value).
    values = [sum(ok for ok, _ in c.values()) / len(c) for c in seed_outcomes(results, variant, split)]
    if seeds > 1:
        text += f"; seeds {100 * min(values):.1f}–{100 * max(values):.1f}"
    return text


def mean_of(
    results: Sequence[RunResult], variant: str, name: str, scale: float = 1.0, fmt: str = ".1f"
) -> str:
    """Mean over seeds of a :class:`RunResult` field, or ``—``."""
    mean, _ = mean_std([getattr(r, name) for r in results if r.variant == variant])
    return "—" if math.isnan(mean) else f"{scale * mean:{fmt}}"


def _paper(row: PaperRow) -> str:
    ci = f" [{row.ci[0]:.1f}, {row.ci[1]:.1f}]" if row.ci else ""
    return f"{row.pass_at_1:.0f}{ci}"


def paper_lines(results: Sequence[RunResult]) -> list[str]:
    """The markdown of ``paper_table.md``."""
    ran = {r.variant for r in results}
    hard = any(r.outcomes.get("hard") for r in results)
    split_head = " | ours, hard split" if hard else ""
    lines = [
        "# The paper's tables, row by row", "",
        "Paper: Qwen3-0.6B on DeepMath-hard, one run per row, 300 held-out problems, pass@1 % [95% CI], "
        "final-stage length in thousands of tokens. Ours: final greedy pass@1 % of each row's deployed policy "
        "[95% interval over new seeds and new problems; one seed: Clopper–Pearson] (seeds × problems; "
        "min–max over seeds); "
        "lengths in tokens, mean over seeds: the final stage's, and the whole cascade's (draft + challenger).", "",
        "## Main table", "",
        f"| row | variant | paper | paper length (k) | ours, held-out{split_head} | final-stage length | whole-cascade tokens |",
        "|---|---|---|---|---|---|---|" + ("---|" if hard else ""),
    ]  # fmt: skip

    def row_line(row_label: str, variant: str, paper: str, paper_length: str) -> str:
        cells = [pass_cell(results, variant)] + ([pass_cell(results, variant, "hard")] if hard else [])
        lengths = [mean_of(results, variant, "length"), mean_of(results, variant, "total_tokens")]
        return (
            f"| {row_label} | `{variant}` | {paper} | {paper_length} | " + " | ".join(cells + lengths) + " |"
        )

    for row in MAIN:
        lines.append(row_line(row.label, row.variant, _paper(row), f"{row.length_k:.1f}"))
    for label, variant in EXTRAS:
        if variant in ran:
            lines.append(row_line(f"ours: {label}", variant, "—", "—"))
    lines += ["", "## The two headline steps (paired: mean [95% interval over new seeds and new problems])", "",
              "| step | difference | paper (points) | ours, " + " | ours, ".join(name for _, name in SPLITS) + " |",
              "|---|---|---|" + "---|" * len(SPLITS)]  # fmt: skip
    for step, variant, reference, points in HEADLINES:
        cells = [compare(results, variant, reference, split) or "—" for split, _ in SPLITS]
        lines.append(f"| {step} | `{variant}` − `{reference}` | +{points} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Ablations",
        "",
        "| ablation | arm | variant | paper | ours, held-out |",
        "|---|---|---|---|---|",
    ]
    for name, rows in ABLATIONS:
        for row in rows:
            lines.append(
                f"| {name} | {row.label} | `{row.variant}` | {_paper(row)} | {pass_cell(results, row.variant)} |"
            )
    lines += ["", "## Density", "",
              "| row | variant | paper | paper length (k) | ours, held-out | final-stage length | whole-cascade tokens |",
              "|---|---|---|---|---|---|---|"]  # fmt: skip
    for row in DENSITY:
        lines.append(
            f"| {row.label} | `{row.variant}` | {_paper(row)} | {row.length_k:.1f} | {pass_cell(results, row.variant)} | "
            f"{mean_of(results, row.variant, 'length')} | {mean_of(results, row.variant, 'total_tokens')} |"
        )
    lines += diagnostics_lines(results)
    lines += ["", "## Length per role"] + length_lines(results)
    missing = [v for v in PAPER_VARIANTS if v not in ran]
    if missing:
        lines += ["", "Not run (yet): " + ", ".join(f"`{v}`" for v in missing) + "."]
    return lines


def diagnostics_lines(results: Sequence[RunResult]) -> list[str]:
    """What the paper leaves open, per variant: overlap, conversions and regressions, cost."""
    variants = list(dict.fromkeys(r.variant for r in results))
    lines = ["", "## What the paper leaves open (final evaluation, held-out, mean over seeds)", "",
             "Error overlap of the two adapters alone (at the first → the last evaluation): Jaccard of the wrong "
             "sets and P(beta wrong | alpha wrong). Conversions / regressions: % of problems whose draft was wrong "
             "and the final answer right / right and wrong. Cost per problem of the deployed policy: draft tokens, "
             "challenger prompt (prefill) tokens, challenger tokens, wall ms (greedy, batched as in validation).", "",
             "| variant | Jaccard | P(β wrong \\| α wrong) | conversions % | regressions % | draft tok | "
             "challenger prompt tok | challenger tok | wall ms |", "|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for v in variants:
        overlap = [f"{mean_of(results, v, f'{name}_start', fmt='.2f')} → {mean_of(results, v, f'{name}_end', fmt='.2f')}"
                   for name in ("jaccard", "beta_wrong_given_alpha_wrong")]  # fmt: skip
        overlap = ["—" if cell == "— → —" else cell for cell in overlap]
        cells = [mean_of(results, v, "conversions", 100), mean_of(results, v, "regressions", 100),
                 mean_of(results, v, "draft_tokens"), mean_of(results, v, "challenger_prompt_tokens"),
                 mean_of(results, v, "challenger_tokens"), mean_of(results, v, "wall_s_per_problem", 1000, ".2f")]  # fmt: skip
        lines.append(f"| `{v}` | " + " | ".join(overlap + cells) + " |")
    return lines


def write_paper_table(results: Sequence[RunResult], out: Path) -> Path:
    """Write ``paper_table.md`` in ``out``; its path."""
    path = out / "paper_table.md"
    path.write_text("\n".join(paper_lines(results)) + "\n")
    return path
