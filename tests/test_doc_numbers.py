"""The Countdown S2 and S3 numbers the README and the docs quote are the committed result files' numbers.

Each figure is read from the file that holds it (the endpoints' JSON, the sweep's results table,
the audit's JSON), formatted as the pages write it (a difference ``−0.031 [−0.087, +0.025]``, an
effect size in points ``7.7``), and looked for in each page that quotes it: a change to either
side, a regenerated endpoint or an edited sentence, fails here until the other follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from experiments.countdown.s2_endpoints import SECONDARY

ROOT = Path(__file__).resolve().parents[1]
S2 = ROOT / "benchmarks" / "results" / "countdown" / "s2"
S3 = ROOT / "benchmarks" / "results" / "countdown" / "s3"


def signed(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−")


def interval(mean: float, low: float, high: float) -> str:
    return f"{signed(mean)} [{signed(low)}, {signed(high)}]"


def points(x: float) -> str:
    return f"{100 * x:.1f}"


def endpoints(stem: str, experiment: Path = S2) -> list[dict]:
    return json.loads((experiment / "sweep" / f"{stem}.json").read_text())["endpoints"]


def primaries(stem: str) -> list[dict]:
    return [e for e in endpoints(stem) if e["primary"] and e["split"] == "main"]


def paired_row(name: str) -> tuple[float, float, float]:
    """A held-out paired difference of the sweep's results table (``results.md``)."""
    text = (S2 / "sweep" / "results.md").read_text()
    found = re.search(rf"^\| {re.escape(name)} \| ([+-][\d.]+) \[([+-][\d.]+), ([+-][\d.]+)\]", text, re.M)
    assert found, f"no row {name!r} in results.md"
    return tuple(float(v) for v in found.groups())  # type: ignore[return-value]


def pilot_in_sweep(audit: dict) -> str:
    """ "all N outcomes" when every compared run of the pilot matches the sweep's outcome for outcome."""
    compared = [c for run in audit["pilot_in_sweep"].values() for c in run.values()]
    counts = {c["problems"] for c in compared}
    same = all(c["same"] == c["problems"] for c in compared) and len(counts) == 1
    return f"all {counts.pop()} outcomes" if same else "the pilot's runs differ from the sweep's"


def quoted() -> dict[str, str]:
    """Each quoted figure, as the pages write it."""
    s2, league = primaries("endpoints"), primaries("endpoints_league")
    moa = next(e for e in s2 if e["reference"] == "moa_untrained")
    mde, holm = [e["mde"] for e in s2], [e["mde_holm"] for e in s2]
    secondary = next(
        e for e in endpoints("endpoints") if e["split"] == "main" and e["name"].endswith("Agon − GRPO alone")
    )
    audit = json.loads((S2 / "audit.json").read_text())
    by_row = {e["variant"]: e for e in league}
    out = {f"primary {e['reference']}": interval(e["mean"], e["low"], e["high"]) for e in s2}
    out |= {f"part 3 {e['variant']}": interval(e["mean"], e["low"], e["high"]) for e in league}
    out |= {
        "mde": f"{points(min(mde))}–{points(max(mde))} points",
        "mde at Holm's first step": f"{points(min(holm))}–{points(max(holm))} at Holm's first step",
        "the first interval's loss": f"a loss of {points(-moa['low'])} points",
        "part 3 mde": f"detectable at 80% power: {points(by_row['league']['mde'])} and "
        f"{points(by_row['kl_anchor']['mde'])} points",
        "part 3 room": f"a loss of up to {points(-min(e['low'] for e in league))} points or a gain of up to "
        f"{points(max(e['high'] for e in league))}",
        "self-cascade − alone": interval(*paired_row("grpo_self_cascade − grpo")),
        "cascade − GRPO alone": interval(secondary["mean"], secondary["low"], secondary["high"]),
        "audit seen": f"{audit['exposure']['held_out_seen_as_state']} of the {audit['held_out_main']}",
        "audit solved": f"solve {audit['exposure']['held_out_solved_in_a_trace']}",
        "audit examples": f"{audit['exposure']['four_number_examples']:,} 4-number examples",
        "pilot in the sweep": pilot_in_sweep(audit),
    }
    return out


def s3_quoted() -> dict[str, str]:
    """S3's quoted figures: its primaries, its own MDEs, its secondaries and each cascade's pass@1
    (``endpoints.json``), and the summary ablation on the trained adapters (``diagnostics.json``)."""
    committed = json.loads((S3 / "sweep" / "endpoints.json").read_text())
    found = [e for e in committed["endpoints"] if e["primary"] and e["split"] == "main"]
    mde, holm = [e["mde"] for e in found], [e["mde_holm"] for e in found]
    out = {f"s3 primary {e['reference']}": interval(e["mean"], e["low"], e["high"]) for e in found}
    out |= {
        "s3 mde": f"{points(min(mde))}–{points(max(mde))} points",
        "s3 mde at Holm's first step": f"{points(min(holm))}–{points(max(holm))} at Holm's first step",
    }
    main = [e for e in committed["endpoints"] if e["split"] == "main" and not e["primary"]]
    for key, suffix in (("self-cascade − alone", "GRPO's self-cascade − GRPO alone"),
                        ("cascade − GRPO alone", "Agon − GRPO alone"),
                        ("exchange", "cooperative − GRPO's self-cascade"),
                        ("drafter alone", "Agon's alpha − GRPO's alpha")):  # fmt: skip
        e = next(e for e in main if e["name"].endswith(suffix))
        out[f"s3 {key}"] = interval(e["mean"], e["low"], e["high"])
    for c in committed["cascades"]:
        if c["split"] == "main":
            out[f"s3 pass@1 {c['row']}"] = f"{c['pass@1'][0]:.3f}"
    ablation = json.loads((S3 / "sweep" / "diagnostics.json").read_text())["ablation"]
    for row, by_split in ablation.items():
        main_split = by_split["main"]
        out[f"s3 ablation {row}"] = (
            f"real − other {signed(main_split['real − other'])}, real − empty {signed(main_split['real − empty'])}"
        )
    return out


PRIMARIES = ("primary moa_untrained", "primary grpo", "primary cooperative")
POWER = ("mde", "mde at Holm's first step")
PART_3 = ("part 3 league", "part 3 kl_anchor", "part 3 mde")
PAGES = {
    "README.md": (*PRIMARIES, *POWER, "the first interval's loss", *PART_3, "self-cascade − alone",
                  "audit seen", "audit solved"),
    "docs/index.md": (*PRIMARIES, *POWER, "self-cascade − alone", "audit seen"),
    "docs/results/index.md": (*PRIMARIES, *POWER, "the first interval's loss", *PART_3, "part 3 room",
                              "self-cascade − alone", "cascade − GRPO alone", "audit seen", "audit solved"),
    "docs/testbeds/countdown.md": (*PRIMARIES, *POWER, "the first interval's loss", *PART_3, "part 3 room",
                                   "self-cascade − alone", "cascade − GRPO alone", "audit seen", "audit solved"),
    "docs/concepts/game.md": (*PART_3, "part 3 room"),
    "benchmarks/results/countdown/s2/README.md": (*POWER, "the first interval's loss", "part 3 room",
                                                  "self-cascade − alone", "audit examples", "audit solved", "pilot in the sweep"),
}  # fmt: skip


S3_PRIMARIES = ("s3 primary moa_untrained", "s3 primary grpo", "s3 primary cooperative")
S3_CORE = (
    *S3_PRIMARIES,
    "s3 mde",
    "s3 mde at Holm's first step",
    "s3 self-cascade − alone",
    "s3 drafter alone",
    "s3 pass@1 agon",
    "s3 pass@1 cooperative",
    "s3 pass@1 grpo",
    "s3 pass@1 moa_untrained",
    "s3 ablation agon",
)
S3_PAGES = {
    "README.md": S3_CORE,
    "docs/results/index.md": (*S3_CORE, "s3 exchange", "s3 cascade − GRPO alone"),
    "docs/testbeds/countdown.md": (*S3_CORE, "s3 exchange", "s3 cascade − GRPO alone"),
    "benchmarks/results/countdown/s3/README.md": (*S3_CORE, "s3 exchange", "s3 cascade − GRPO alone",
                                                  "s3 ablation cooperative", "s3 ablation grpo"),
}  # fmt: skip


@pytest.mark.parametrize("page", sorted(PAGES.keys() | S3_PAGES.keys()))
def test_each_page_quotes_the_committed_numbers(page):
    text = re.sub(r"\s+", " ", (ROOT / page).read_text())
    figures = quoted() | s3_quoted()
    keys = (*PAGES.get(page, ()), *S3_PAGES.get(page, ()))
    missing = [f"{key}: {figures[key]!r}" for key in keys if figures[key] not in text]
    assert missing == [], f"{page} does not quote what the committed files hold:\n" + "\n".join(missing)


def test_no_figure_is_left_to_fill():
    for page in PAGES:
        assert "AUDIT_" not in (ROOT / page).read_text(), page


@pytest.mark.parametrize(
    ("experiment", "stem"), [(S2, "endpoints"), (S2, "endpoints_league"), (S3, "endpoints")]
)
def test_a_secondary_carries_no_decision_and_a_primary_its_mde_at_holms_step(experiment, stem):
    for e in endpoints(stem, experiment):
        if e["primary"] and e["split"] == "main":
            assert e["decision"] in ("shown", "contradicted", "not resolved") and e["mde_holm"] > e["mde"] > 0
        else:
            assert e["decision"] == SECONDARY and e["mde_holm"] is None and e["mde"] > 0
        assert f"| {e['decision']} |" in (experiment / "sweep" / f"{stem}.md").read_text()
