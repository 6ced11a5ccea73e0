"""Plots a person reads at a glance: a column per split, one colour per policy, the legend outside.

Shared by the end-of-fit ``validation.png`` (:func:`plot_validation`, every policy of one run)
and the sweep's ``pass_at_1.png`` / ``length.png`` (one line per variant,
:func:`agon_lightning.experiments.sweep_report.plot_curves`). The conventions are the same everywhere: each
panel is one split (the held-out set, the hard split, …), a policy keeps its colour in every
panel, cascades are dashed, the deployed policy is drawn thick and on top, and one legend sits
to the right of the panels, outside the data. Matplotlib with the Agg backend: no display needed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agon_lightning.game.names import ALPHA, BASE, BETA

STATS = {"pass@1": "pass@1 (greedy)", "length": "completion tokens"}
SPLIT_TITLES = {"": "held-out", "hard": "hard split"}
# Fixed colours for the evaluator's keys, so every run's plot reads the same; others take the next free one.
KNOWN_COLOURS = {
    BASE: "#7f7f7f", ALPHA: "#1f77b4", BETA: "#ff7f0e", "cascade_ab": "#2ca02c", "cascade_ba": "#d62728",
    "cascade_aa": "#9467bd", "moa": "#8c564b",
}  # fmt: skip
# Twelve distinct colours, so a sweep of every paper row (up to 12 variants) repeats none.
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
           "#393b79", "#7f7f7f", "#aec7e8")  # fmt: skip


@dataclass
class Series:
    """One line of one panel.

    Attributes:
        label: Legend text; the same label in several panels is one legend entry.
        steps: x values.
        values: y values (``nan`` where missing).
        std: Shaded ± band, when given.
        colour: Line colour.
        dashed: A cascade (or a reference) rather than one policy.
        emphasised: The deployed policy: thicker, on top.
        level: Draw as a horizontal line at the last value (an evaluation-only reference).
    """

    label: str
    steps: list[float]
    values: list[float]
    colour: str
    std: list[float] | None = None
    dashed: bool = False
    emphasised: bool = False
    level: bool = False


@dataclass
class Panel:
    title: str
    ylabel: str
    series: list[Series] = field(default_factory=list)


def colours(keys: Sequence[str]) -> dict[str, str]:
    """A colour per key: the evaluator's keys their fixed ones, the rest in order from the palette."""
    taken = {KNOWN_COLOURS[k] for k in keys if k in KNOWN_COLOURS}
    free = iter([c for c in PALETTE if c not in taken] + list(PALETTE))
    return {k: KNOWN_COLOURS.get(k) or next(free) for k in keys}


def is_cascade(key: str) -> bool:
    return key.startswith("cascade_") or key == "moa"


def split_metrics(
    history: list[tuple[int, dict[str, float]]],
) -> dict[str, dict[str, dict[str, list[float]]]]:
    """``{split: {key: {stat: values per evaluation}}}`` from ``val/[SPLIT/]KEY/STAT`` metrics.

    Only ``pass@1`` and ``length`` are read (diagnostics such as ``val/overlap/jaccard`` are
    skipped), and ``deployed`` — an alias of another key — is left out.
    """
    found: dict[str, dict[str, set[str]]] = {}
    for _, metrics in history:
        for name in metrics:
            parts = name.split("/")
            if parts[0] != "val" or len(parts) not in (3, 4) or parts[-1] not in STATS:
                continue
            split, key = ("", parts[1]) if len(parts) == 3 else (parts[1], parts[2])
            if key != "deployed":
                found.setdefault(split, {}).setdefault(key, set()).add(parts[-1])
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for split, keys in found.items():
        prefix = f"val/{split}/" if split else "val/"
        out[split] = {
            key: {stat: [m.get(f"{prefix}{key}/{stat}", math.nan) for _, m in history] for stat in STATS}
            for key in keys
        }
    return out


def policy_order(keys: set[str] | Sequence[str]) -> list[str]:
    """The evaluator's keys first in their usual order (base, adapters, cascades), then the rest sorted."""
    known = [k for k in KNOWN_COLOURS if k in keys]
    return known + sorted(set(keys) - set(known))


def plot_validation(
    history: list[tuple[int, dict[str, float]]], path: str | Path, deployed: str | None = None
) -> Path:
    """``validation.png``: pass@1 (top) and length (bottom) against step, a column per split.

    Args:
        history: The evaluator's ``[(step, {metric: value})]``.
        path: Where to write the PNG.
        deployed: The key of the deployed policy (drawn thick and marked in the legend).
    """
    by_split = split_metrics(history)
    steps = [float(s) for s, _ in history]
    splits = sorted(by_split, key=lambda s: (s != "", s))
    keys = policy_order({k for split in by_split.values() for k in split})
    palette = colours(keys)
    panels: list[Panel] = []
    for stat, ylabel in STATS.items():
        for split in splits:
            panel = Panel(SPLIT_TITLES.get(split, split), ylabel)
            for key in keys:
                if key in by_split[split]:
                    label = f"{key} (deployed)" if key == deployed else key
                    panel.series.append(
                        Series(
                            label,
                            steps,
                            by_split[split][key][stat],
                            palette[key],
                            dashed=is_cascade(key),
                            emphasised=key == deployed,
                        )  # fmt: skip
                    )
            panels.append(panel)
    return draw(panels, len(splits), path, "validation: each policy and cascade (dashed)")


def draw(
    panels: list[Panel], columns: int, path: str | Path, title: str, xlabel: str = "training step"
) -> Path:
    """Lay ``panels`` out in rows of ``columns``, one legend on the right; write a PNG to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    columns = max(columns, 1)
    rows = max(math.ceil(len(panels) / columns), 1)
    fig, axes = plt.subplots(
        rows, columns, figsize=(4.6 * columns + 2.4, 3.3 * rows), squeeze=False, sharex=True
    )
    handles: dict[str, Any] = {}
    for ax, panel in zip(axes.flat, panels):
        for s in panel.series:
            handles.setdefault(s.label, _plot(ax, s))
        ax.set_title(panel.title)
        ax.set_ylabel(panel.ylabel)
        ax.grid(alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    fig.suptitle(title)
    fig.tight_layout(rect=(0, 0, 1 - 2.2 / fig.get_figwidth(), 1))
    fig.legend(handles.values(), handles.keys(), loc="center left", bbox_to_anchor=(1 - 2.15 / fig.get_figwidth(), 0.5),
               fontsize=8, frameon=False)  # fmt: skip
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _plot(ax: Any, s: Series) -> Any:
    style = dict(color=s.colour, linestyle="--" if s.dashed else "-", linewidth=3.0 if s.emphasised else 1.5,
                 zorder=3 if s.emphasised else 2)  # fmt: skip
    if s.level:
        last = next((v for v in reversed(s.values) if not math.isnan(v)), math.nan)
        return ax.axhline(last, **style)
    if len(s.steps) == 1:  # one evaluation: a point with its ± bar
        return ax.errorbar(s.steps, s.values, yerr=s.std, marker="o", capsize=4, markersize=7 if s.emphasised else 5,
                           **style)  # fmt: skip
    (line,) = ax.plot(s.steps, s.values, marker="o", markersize=6 if s.emphasised else 4, **style)
    if s.std is not None:
        low = [v - d for v, d in zip(s.values, s.std)]
        high = [v + d for v, d in zip(s.values, s.std)]
        ax.fill_between(s.steps, low, high, color=s.colour, alpha=0.15, linewidth=0)
    return line
