"""The distributed rule, checked on the code: rank-conditional code never calls a collective.

A collective called on some ranks only waits for the others forever: rank zero reading
``trainer.log_dir`` (a broadcast) while rank one stands in the next ``reduce_boolean_decision``
is how ``agon fit`` under DDP once hung at its first step. :mod:`collectives_scan` finds such
calls statically; the fixture holds one of each kind (and look-alikes that are fine), so the
scan is shown to find what it must before it is trusted to find nothing in the package.
"""

from __future__ import annotations

from pathlib import Path

from collectives_scan import scan

ROOT = Path(__file__).resolve().parents[1]
FIXTURE = Path(__file__).parent / "fixtures" / "collectives" / "violations.py"


def marked_lines(path: Path) -> set[int]:
    return {
        i for i, line in enumerate(path.read_text().splitlines(), 1) if line.rstrip().endswith("# VIOLATION")
    }


def test_the_scan_flags_every_known_violation_and_nothing_else():
    found = scan([FIXTURE], FIXTURE.parent)
    expected = marked_lines(FIXTURE)
    assert len(expected) >= 10
    assert {v.line for v in found} == expected, "\n".join(map(str, found))
    # Each report names the collective and how it is reached.
    (report,) = [v for v in found if "append_rows" not in v.what and v.line == min(expected)]
    assert "run_dir() -> trainer.log_dir" in report.what and "is_global_zero" in report.what


def test_no_rank_conditional_code_in_the_package_calls_a_collective():
    paths = sorted((ROOT / "agon_lightning").rglob("*.py")) + sorted((ROOT / "callbacks").rglob("*.py"))
    assert len(paths) > 50
    violations = scan(paths, ROOT)
    assert not violations, "rank-conditional code calls a collective:\n" + "\n".join(map(str, violations))
