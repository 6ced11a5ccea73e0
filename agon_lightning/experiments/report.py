"""The end-of-run report: a start-vs-end table (the plot of the curves is :mod:`agon_lightning.experiments.plots`).

Pure functions over the evaluator's history ``[(step, {metric: value})]`` so they are
testable without a trainer; :class:`~agon_lightning.callbacks.report.ValidationReport`
calls them when ``fit`` ends.
"""

from __future__ import annotations

import math

Histories = list[tuple[int, dict[str, float]]]


def pass_at_1_stderr(p: float, n: int) -> float:
    """Standard error of a pass@1 estimate from ``n`` independent problems."""
    return math.sqrt(max(p * (1 - p), 0.0) / n) if n > 0 else float("nan")


def start_end_table(history: Histories, keys: list[str] | None = None) -> str:
    """A markdown table of each ``val/KEY/pass@1`` and ``val/KEY/length``: first, last, change."""
    if not history:
        return "(no validation was run)"
    (s0, first), (s1, last) = history[0], history[-1]
    keys = keys or sorted(
        {k[len("val/") : -len("/pass@1")] for k in first if k.startswith("val/") and k.endswith("/pass@1")}
    )
    lines = [
        f"| policy | pass@1 @ step {s0} | pass@1 @ step {s1} | change | length @ {s0} | length @ {s1} |",
        "|---|---|---|---|---|---|",
    ]
    for key in keys:
        p0, p1 = first.get(f"val/{key}/pass@1", float("nan")), last.get(f"val/{key}/pass@1", float("nan"))
        l0, l1 = first.get(f"val/{key}/length", float("nan")), last.get(f"val/{key}/length", float("nan"))
        lines.append(f"| {key} | {p0:.3f} | {p1:.3f} | {p1 - p0:+.3f} | {l0:.1f} | {l1:.1f} |")
    return "\n".join(lines)
