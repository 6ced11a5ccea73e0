"""Countdown S2's registered endpoints, recomputed from the committed archive of its runs.

``benchmarks/results/countdown/s2/README.md`` (part 2) registers three primary differences in
deployed held-out pass@1 on the main split, each compute-matched at deployment (two passes
against two passes), their interval (the crossed t of
:func:`~agon_lightning.experiments.stats.crossed_t`: new seeds and new problems), Holm's
correction over the three, and the secondaries. This script computes exactly those from the
sweep's ``archive/VARIANT/seed_N.tar.gz`` (each finished run's outcomes and metrics, committed),
so every figure is recomputed from the repository alone, and rewrites the sweep's tables::

    python -m experiments.countdown.s2_endpoints benchmarks/results/countdown/s2/sweep

It writes ``endpoints.md`` and ``endpoints.json`` beside the archive, with each figure's seeds;
a decision is *final* only when every registered seed of both rows is in the archive.

Part 3 of the design registers a second family in the same sweep, the league of past rivals and
the per-role KL anchor against Agon (Holm over its two primaries), with the adapters' divergence
at the last measurement beside them; ``--family league`` writes ``endpoints_league.md``/``.json``.

Beside each interval stands its minimum detectable effect (:func:`minimum_detectable`): the
smallest true difference the registered test finds with 80% power, so a difference that is not
resolved is read with the size it could have missed. A secondary is registered without a
decision: its p is printed, and its decision column says so.
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from agon_lightning.experiments.stats import crossed_t, holm, seed_t, t_quantile
from agon_lightning.game.names import ALPHA

ALPHA_LEVEL = 0.05
POWER = 0.8  # the power a minimum detectable effect is stated at
SECONDARY = "no decision (secondary)"  # what the registration decides for a secondary
SPLITS = (("", "main"), ("hard", "hard"))  # (the outcomes' split tag, its name)
#: (name, (variant, key), (reference variant, key)): the key is the evaluator's, at the last evaluation.
Comparison = tuple[str, tuple[str, str], tuple[str, str]]


@dataclass(frozen=True)
class Registration:
    """One registered family of endpoints: its rows' seeds, its primaries (Holm over them, on the
    main split), its secondaries (read at their own p), and divergence metrics compared per seed."""

    stem: str  # the files it writes: STEM.md, STEM.json
    title: str
    section: str  # where in the design it is registered
    seeds: dict[str, int]  # registered seeds per row; an untrained row is one greedy evaluation
    primaries: tuple[Comparison, ...]
    secondaries: tuple[Comparison, ...]
    #: (metric in metrics.csv, row, reference row): the last logged value, paired by seed (seed-level t)
    divergence: tuple[tuple[str, str, str], ...] = ()
    #: row → the two-pass cascade it deploys or is compared as (its conversions, regressions, lengths)
    cascades: tuple[tuple[str, str], ...] = ()


#: Part 2 of the design: does Agon's training add anything?
S2 = Registration(
    stem="endpoints",
    title="Countdown S2: the registered endpoints",
    section="part 2",
    seeds={"agon": 5, "cooperative": 5, "grpo": 5, "moa_untrained": 1},
    primaries=(
        (
            "training adds to the untrained cascade: Agon − moa_untrained",
            ("agon", "deployed"),
            ("moa_untrained", "moa"),
        ),
        (
            "two passes on one budget: Agon − GRPO's self-cascade",
            ("agon", "deployed"),
            ("grpo", "cascade_aa"),
        ),
        ("the competition step: Agon − cooperative", ("agon", "deployed"), ("cooperative", "deployed")),
    ),
    secondaries=(
        ("the drafter alone: Agon's alpha − GRPO's alpha", ("agon", ALPHA), ("grpo", ALPHA)),
        (
            "the exchange: cooperative − GRPO's self-cascade",
            ("cooperative", "deployed"),
            ("grpo", "cascade_aa"),
        ),
        ("the cascade over one pass: Agon − GRPO alone", ("agon", "deployed"), ("grpo", ALPHA)),
    ),
    cascades=(
        ("agon", "deployed"),
        ("cooperative", "deployed"),
        ("grpo", "cascade_aa"),
        ("moa_untrained", "moa"),
    ),
)
#: Part 3 of the design: the league of past rivals and the per-role KL anchor, each against Agon.
LEAGUE = Registration(
    stem="endpoints_league",
    title="Countdown S2, part 3: the league and the KL anchor against Agon",
    section="part 3",
    seeds={"agon": 5, "league": 5, "kl_anchor": 5},
    primaries=(
        ("the league: league − Agon", ("league", "deployed"), ("agon", "deployed")),
        ("the KL anchor: kl_anchor − Agon", ("kl_anchor", "deployed"), ("agon", "deployed")),
    ),
    secondaries=(
        ("the drafter alone: league's alpha − Agon's alpha", ("league", ALPHA), ("agon", ALPHA)),
        ("the drafter alone: kl_anchor's alpha − Agon's alpha", ("kl_anchor", ALPHA), ("agon", ALPHA)),
    ),
    divergence=tuple(
        (metric, row, "agon")
        for row in ("league", "kl_anchor")
        for metric in ("divergence/symmetric_kl", "divergence/answer_agreement", "divergence/delta_cosine")
    ),
    cascades=(("agon", "deployed"), ("league", "deployed"), ("kl_anchor", "deployed")),
)
#: S3's part 2 (``benchmarks/results/countdown/s3/README.md``): S2's question on S3's testbed, S seeds a row.
S3_SEEDS = 17
S3 = Registration(
    stem="endpoints",
    title="Countdown S3: the registered endpoints",
    section="part 2",
    seeds={"agon": S3_SEEDS, "cooperative": S3_SEEDS, "grpo": S3_SEEDS, "moa_untrained": 1},
    primaries=S2.primaries,
    secondaries=(
        *S2.secondaries,
        (
            "the second pass on one adapter: GRPO's self-cascade − GRPO alone",
            ("grpo", "cascade_aa"),
            ("grpo", ALPHA),
        ),
    ),
    cascades=S2.cascades,
)
REGISTRATIONS = {"s2": S2, "league": LEAGUE, "s3": S3}


@dataclass
class Endpoint:
    name: str
    split: str
    primary: bool
    variant: str
    key: str
    reference: str
    reference_key: str
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    p: float | None = None
    p_holm: float | None = None
    df: float | None = None
    seeds: int = 0
    problems: int = 0
    decision: str = "not run"
    final: bool = False
    se: float | None = None  # the crossed interval's standard error
    mde: float | None = None  # minimum detectable effect at 80% power, two-sided α = 0.05
    mde_holm: float | None = None  # the same at Holm's first step (α over the primaries); primaries only


def outcomes_of(run_dir: Path, key: str, split: str) -> dict[str, bool]:
    """question → right? for ``key`` on ``split`` at the run's last evaluation."""
    from agon_lightning.experiments.sweep_report import latest_metrics, read_outcomes

    return {q: ok for q, (ok, _) in read_outcomes(latest_metrics(run_dir).parent, key).get(split, {}).items()}


def table(
    runs: dict[tuple[str, int], Path],
    row: tuple[str, str],
    reference: tuple[str, str],
    split: str,
    seeds_of: dict[str, int] = S2.seeds,
):
    """The paired ``[seeds, problems]`` tables of two rows (an untrained row stands for every seed)."""
    mine = {s: outcomes_of(d, row[1], split) for (v, s), d in runs.items() if v == row[0]}
    theirs = {s: outcomes_of(d, reference[1], split) for (v, s), d in runs.items() if v == reference[0]}
    if len(theirs) == 1 and seeds_of.get(reference[0]) == 1:
        theirs = dict.fromkeys(mine, next(iter(theirs.values())))
    seeds = sorted(mine.keys() & theirs.keys())
    if not seeds:
        return None
    questions = sorted(set.intersection(*(set(mine[s]) & set(theirs[s]) for s in seeds)))
    a = np.array([[mine[s][q] for q in questions] for s in seeds], dtype=float)
    b = np.array([[theirs[s][q] for q in questions] for s in seeds], dtype=float)
    return a, b


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.array([math.erfc(-v / math.sqrt(2)) for v in np.ravel(x)]).reshape(np.shape(x))


def minimum_detectable(se: float, df: float, alpha: float = ALPHA_LEVEL, power: float = POWER) -> float:
    """The smallest true difference a two-sided t test at ``alpha`` rejects with probability ``power``.

    With the interval's standard error ``se`` and degrees of freedom ``df``, the test statistic of a
    true difference δ is a noncentral t (``df``, noncentrality δ / se); this returns the δ at which
    P(|T| > t_{1−α/2, df}) = ``power``, exactly: the normal numerator integrated over the density of
    the t's denominator sqrt(χ²_df / df). (The shortcut (t_{1−α/2} + t_power)·se is 1% short at 4
    degrees of freedom and α = 0.05, 4% short at α = 0.05 / 3.)

    Raises:
        ValueError: ``se`` not positive, ``df`` below 1, or ``alpha`` / ``power`` outside (0, 1).
    """
    if not (se > 0 and df >= 1 and 0 < alpha < 1 and 0 < power < 1):
        raise ValueError(
            f"need se > 0, df >= 1 and alpha, power in (0, 1); got se={se}, df={df}, alpha={alpha}, power={power}"
        )
    critical = t_quantile(1 - alpha / 2, df)
    spread = 1 / math.sqrt(2 * df)  # the denominator's sd, about
    w = np.linspace(max(0.0, 1 - 12 * spread), 1 + 12 * spread, 2001)
    # the denominator's density up to a constant (normalised below); w = 0 has density 0 unless df = 1
    log_density = (df - 1) * np.log(np.maximum(w, 1e-300)) - df * w * w / 2
    weight = np.exp(log_density - log_density.max())
    weight /= weight.sum()

    def rejects(shift: float) -> float:
        return float(weight @ (_normal_cdf(shift - critical * w) + _normal_cdf(-shift - critical * w)))

    low, high = 0.0, critical + 10.0
    for _ in range(50):
        mid = (low + high) / 2
        low, high = (mid, high) if rejects(mid) < power else (low, mid)
    return (low + high) / 2 * se


def decide(mean: float, p_adjusted: float) -> str:
    """A primary's decision: *shown* / *contradicted* when its Holm-adjusted p is below 0.05, by the
    sign; else *not resolved*."""
    if p_adjusted < ALPHA_LEVEL:
        return "shown" if mean > 0 else "contradicted"
    return "not resolved"


def compute(runs: dict[tuple[str, int], Path], registration: Registration = S2) -> list[Endpoint]:
    done = {v: sum(1 for (w, _) in runs if w == v) for v, _ in runs}
    seeds_of = registration.seeds
    out = []
    for tag, split in SPLITS:
        family = []
        for primary, items in ((True, registration.primaries), (False, registration.secondaries)):
            for name, row, reference in items:
                e = Endpoint(name, split, primary, row[0], row[1], reference[0], reference[1])
                e.final = all(done.get(v, 0) >= seeds_of.get(v, 5) for v in (row[0], reference[0]))
                pair = table(runs, row, reference, tag, seeds_of)
                if pair is not None and pair[0].shape[0] >= 2 and pair[0].shape[1] >= 2:
                    d = crossed_t(*pair)
                    e.mean, e.low, e.high, e.p, e.df = d.mean, d.low, d.high, d.p, d.df
                    e.seeds, e.problems, e.se = d.seeds, d.problems, d.se
                    # an interim table's df can fall below 1 (two seeds, Satterthwaite): too few to size an effect
                    sized = d.se > 0 and d.df >= 1
                    e.mde = minimum_detectable(d.se, d.df) if sized else None
                    if primary and split == "main":
                        family.append(e)
                        if sized:  # Holm's first step tests the smallest p at α over the primaries
                            e.mde_holm = minimum_detectable(
                                d.se, d.df, ALPHA_LEVEL / len(registration.primaries)
                            )
                    else:
                        e.decision = SECONDARY
                out.append(e)
        # Holm over the primaries (the main split's); every other figure is read at its own p.
        adjusted = holm({e.name: e.p for e in family})
        for e in family:
            e.p_holm = adjusted[e.name]
            e.decision = decide(e.mean, e.p_holm)
    return out


def metric_rows(run_dir: Path) -> list[dict[str, str]]:
    """The rows of the run's metrics.csv (every sitting of a run the sweep resumed), read once per run."""
    from agon_lightning.experiments.sweep_report import run_rows

    return run_rows(run_dir)[0]


def last_logged(rows: list[dict[str, str]], metric: str) -> float | None:
    """``metric``'s last logged value (``None`` if never logged)."""
    values = [row[metric] for row in rows if row.get(metric)]
    return float(values[-1]) if values else None


@dataclass
class Divergence:
    """A divergence metric's last logged value, row − reference, paired by seed (seed-level t)."""

    metric: str
    variant: str
    reference: str
    mean: float | None = None
    low: float | None = None
    high: float | None = None
    row_mean: float | None = None
    reference_mean: float | None = None
    seeds: int = 0


def divergences(runs: dict[tuple[str, int], Path], registration: Registration) -> list[Divergence]:
    involved = {v for _, row, reference in registration.divergence for v in (row, reference)}
    rows = {run: metric_rows(d) for run, d in runs.items() if run[0] in involved}
    out = []
    for metric, row, reference in registration.divergence:
        d = Divergence(metric, row, reference)
        pairs = []
        for v, s in sorted(rows):
            if v == row and (reference, s) in rows:
                mine, theirs = last_logged(rows[v, s], metric), last_logged(rows[reference, s], metric)
                if mine is not None and theirs is not None:
                    pairs.append((mine, theirs))
        d.seeds = len(pairs)
        if len(pairs) >= 2:
            a, b = np.array(pairs).T
            t = seed_t(a[:, None], b[:, None])
            d.mean, d.low, d.high = t.mean, t.low, t.high
            d.row_mean, d.reference_mean = float(a.mean()), float(b.mean())
        out.append(d)
    return out


def last_evaluation(rows: list[dict[str, str]]) -> dict[str, float]:
    """Every ``val/…`` metric of the last evaluation in ``rows`` (rows of that step merged)."""
    rows = [r for r in rows if any(k.startswith("val/") and v for k, v in r.items())]
    if not rows:
        return {}
    last = max(int(r["step"]) for r in rows)
    merged = {}
    for r in rows:
        if int(r["step"]) == last:
            merged |= {k: float(v) for k, v in r.items() if k.startswith("val/") and v}
    return merged


#: (column, metric under val/[hard/]KEY/ or, with a leading "/", under val/[hard/]): per row, seed means
DESCRIBED = (
    ("pass@1", "pass@1"),
    ("conversion rate", "conversion_rate"),
    ("regression rate", "regression_rate"),
    ("draft tokens", "cost/draft_tokens"),
    ("answer tokens", "cost/challenger_tokens"),
    ("alpha alone, length", "/alpha/length"),
    ("beta alone, length", "/beta/length"),
)


def describe(runs: dict[tuple[str, int], Path], registration: Registration) -> list[dict]:
    """Per row and split, the seed means (and spread) of its cascade's conversions, regressions and
    lengths per role at the last evaluation: the secondaries read without a test."""
    evaluations_of = {
        row: [e for (v, _), d in sorted(runs.items()) if v == row if (e := last_evaluation(metric_rows(d)))]
        for row, _ in registration.cascades
    }
    out = []
    for tag, split in SPLITS:
        prefix = "val/" + (f"{tag}/" if tag else "")
        for row, key in registration.cascades:
            evaluations = evaluations_of[row]
            record = {"row": row, "cascade": key, "split": split, "seeds": len(evaluations)}
            for column, metric in DESCRIBED:
                name = prefix + metric[1:] if metric.startswith("/") else f"{prefix}{key}/{metric}"
                values = [e[name] for e in evaluations if name in e]
                record[column] = (
                    (float(np.mean(values)), float(np.std(values, ddof=1)) if len(values) > 1 else 0.0)
                    if values
                    else None
                )
            out.append(record)
    return out


def markdown(
    endpoints: list[Endpoint],
    runs: dict[tuple[str, int], Path],
    registration: Registration = S2,
    divergence: list[Divergence] = (),
    described: list[dict] = (),
) -> str:
    ran = {}
    for v, s in sorted(runs):
        if v in registration.seeds:
            ran.setdefault(v, []).append(s)
    lines = [
        f"# {registration.title}",
        "",
        f"Computed by `python -m experiments.countdown.s2_endpoints --family "
        f"{next(k for k, r in REGISTRATIONS.items() if r == registration)}` from the committed archive, as "
        f"{registration.section} of `README.md` registers them: deployed held-out pass@1 at the last "
        "evaluation, paired by seed and problem, the crossed t interval (new seeds and new problems), Holm's "
        f"correction over the {len(registration.primaries)} primaries. A decision is *final* only when every "
        "registered seed of both rows is archived. A secondary is registered without a decision: its p is its "
        "own, uncorrected. MDE: the smallest true difference the test detects with 80% power, two-sided at "
        "α = 0.05 (in parentheses at Holm's first step, α = 0.05 / "
        f"{len(registration.primaries)}), from the interval's standard error and df (`minimum_detectable`).",
        "",
        "Runs archived (seeds): " + "; ".join(f"`{v}` {s}" for v, s in ran.items()) + ".",
        "",
        "| endpoint | split | difference [95% interval] | p (Holm) | df | MDE, 80% power (Holm) | seeds × problems "
        "| decision | final? |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for e in endpoints:
        cell = "—" if e.mean is None else f"{e.mean:+.3f} [{e.low:+.3f}, {e.high:+.3f}]"
        p = "—" if e.p is None else f"{e.p:.4f}" + ("" if e.p_holm is None else f" ({e.p_holm:.4f})")
        df = "—" if e.df is None else f"{e.df:.1f}"
        mde = (
            "—" if e.mde is None else f"{e.mde:.3f}" + ("" if e.mde_holm is None else f" ({e.mde_holm:.3f})")
        )
        name = f"**primary: {e.name}**" if e.primary and e.split == "main" else e.name
        lines.append(f"| {name} | {e.split} | {cell} | {p} | {df} | {mde} | {e.seeds} × {e.problems} | "
                     f"{e.decision} | {'final' if e.final else 'interim'} |")  # fmt: skip
    if divergence:
        lines += [
            "",
            "Divergence between the two adapters at its last measurement (the `DivergenceMonitor` callback), row − "
            "reference paired by seed, seed-level t interval; no decision.",
            "",
            "| metric | row | reference | row mean | reference mean | difference [95% interval] | seeds |",
            "|---|---|---|---|---|---|---|",
        ]
        for d in divergence:
            if d.mean is None:
                lines.append(f"| `{d.metric}` | `{d.variant}` | `{d.reference}` | — | — | — | {d.seeds} |")
            else:
                lines.append(f"| `{d.metric}` | `{d.variant}` | `{d.reference}` | {d.row_mean:.4f} | "
                             f"{d.reference_mean:.4f} | {d.mean:+.4f} [{d.low:+.4f}, {d.high:+.4f}] | {d.seeds} |")  # fmt: skip
    if described:
        lines += [
            "",
            "Each row's two-pass cascade at the last evaluation, mean (sd) over its seeds: pass@1, conversions "
            "(right after a wrong draft) and regressions (wrong after a right draft) as rates, mean tokens of the "
            "draft and of the answer, and each adapter's length alone (the base's for `moa_untrained`: alpha is "
            "untrained). Descriptive, no test.",
            "",
            "| row | cascade | split | seeds | " + " | ".join(c for c, _ in DESCRIBED) + " |",
            "|---|---|---|---|" + "---|" * len(DESCRIBED),
        ]
        for r in described:
            cells = []
            for column, _ in DESCRIBED:
                v = r[column]
                digits = 3 if "rate" in column or column == "pass@1" else 1
                cells.append("—" if v is None else f"{v[0]:.{digits}f} ({v[1]:.{digits}f})")
            lines.append(
                f"| `{r['row']}` | `{r['cascade']}` | {r['split']} | {r['seeds']} | "
                + " | ".join(cells)
                + " |"
            )
    return "\n".join(lines) + "\n"


def unpacked_runs(sweep: Path, scratch: Path) -> dict[tuple[str, int], Path]:
    from agon_lightning.experiments.archive import unpack_all

    return {(d.parent.name, int(d.name.removeprefix("seed_"))): d for d in unpack_all(sweep, scratch)}


def archive_parser(doc: str) -> argparse.ArgumentParser:
    """A command's parser, described by ``doc``'s first paragraph, taking the sweep whose archive it reads."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("sweep", type=Path, help="the sweep's --out, holding archive/VARIANT/seed_N.tar.gz")
    return parser


@contextmanager
def archived_runs(sweep: Path) -> Iterator[dict[tuple[str, int], Path]]:
    """``{(row, seed): run directory}`` of the sweep's committed archive, unpacked for the block's length.

    Raises:
        SystemExit: the sweep has no archived run (its ``archive/`` empty or missing).
    """
    with tempfile.TemporaryDirectory() as scratch:
        runs = unpacked_runs(sweep, Path(scratch))
        if not runs:
            raise SystemExit(f"no archived run under {sweep / 'archive'}")
        yield runs


def rewrite_tables(sweep: Path, runs: dict[tuple[str, int], Path], experiments_dir: Path | None) -> None:
    """The sweep's results.md, results.csv and plots, from the archive (``agon sweep --from-archive``)."""
    from agon_lightning.experiments.sweep import plan, report_from_archive
    from agon_lightning.infra.shipped_configs import local_or_shipped

    variants = sorted({v for v, _ in runs}) + (
        ["grpo_self_cascade"] if any(v == "grpo" for v, _ in runs) else []
    )
    seeds = sorted({s for _, s in runs})
    report_from_archive(
        plan(variants, seeds, sweep, experiments_dir or local_or_shipped("experiments")), sweep
    )


def main(argv: list[str] | None = None) -> None:
    parser = archive_parser(__doc__)
    parser.add_argument("--family", choices=sorted(REGISTRATIONS), default="s2",
                        help="which registered family: s2 (S2's part 2, the default), league (S2's part 3) or s3 (S3's part 2)")  # fmt: skip
    parser.add_argument("--experiments-dir", type=Path, default=None,
                        help="the variants' overlays (default: configs/experiments, else the shipped ones)")  # fmt: skip
    args = parser.parse_args(argv)
    registration = REGISTRATIONS[args.family]
    with archived_runs(args.sweep) as runs:
        endpoints = compute(runs, registration)
        divergence = divergences(runs, registration)
        described = describe(runs, registration)
        text = markdown(endpoints, runs, registration, divergence, described)
        rewrite_tables(args.sweep, runs, args.experiments_dir)
    (args.sweep / f"{registration.stem}.md").write_text(text)

    def clean(record) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in asdict(record).items()}

    (args.sweep / f"{registration.stem}.json").write_text(
        json.dumps(
            {
                "endpoints": [clean(e) for e in endpoints],
                "divergence": [clean(d) for d in divergence],
                "cascades": described,
            },
            indent=1,
        )
        + "\n"
    )
    print(text)
    print(f"written to {args.sweep / registration.stem}.md and .json")


if __name__ == "__main__":
    main()
