"""How many programs per second the code verifier judges, with every sandbox protection on.

A trivial correct program (``print(sum(...))``) is judged end to end through
:meth:`CodeVerifier.verify_batch`: extraction, one launcher per program, a fresh process tree
and fresh namespaces per test, output comparison. It measures the sandbox's overhead, which
bounds how fast rewards can come on a machine whose cores are this few.

    python benchmarks/bench_sandbox.py
    python benchmarks/bench_sandbox.py --programs 200 --workers 1 2 4 --tests 1 10 --json /tmp/sandbox.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

from agon_lightning.code.sandbox import SandboxConfig
from agon_lightning.game.types import Problem
from agon_lightning.verifiers.code import CodeVerifier

RESULTS = Path(__file__).parent / "results" / "sandbox.json"
PROGRAM = "```python\nprint(sum(map(int, input().split())))\n```"


def bench(programs: int, workers: int, tests: int) -> dict[str, float]:
    """Judge ``programs`` copies of the trivial program, each on ``tests`` tests; timings."""
    problem = Problem(
        "add", metadata={"tests": [{"input": f"{i} 1\n", "output": f"{i + 1}\n"} for i in range(tests)]}
    )
    verifier = CodeVerifier(sandbox=SandboxConfig(workers=workers))
    verifier.verify(PROGRAM, problem)  # warm the page cache
    cpu_start, start = os.times(), time.perf_counter()
    verdicts = verifier.verify_batch([PROGRAM] * programs, [problem] * programs)
    wall = time.perf_counter() - start
    cpu_end = os.times()
    if not all(v.correct for v in verdicts):
        raise RuntimeError(
            f"the trivial program was judged wrong: {[v.reason for v in verdicts if not v.correct][:5]}"
        )
    cpu = sum(cpu_end[i] - cpu_start[i] for i in range(4))  # ours and our children's, user + system
    return {
        "workers": workers,
        "tests_per_program": tests,
        "programs": programs,
        "wall_seconds": wall,
        "programs_per_second": programs / wall,
        "runs_per_second": programs * tests / wall,
        "cpu_ms_per_run": 1000 * cpu / (programs * tests),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=100, help="programs judged per configuration")
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="sandbox pool sizes to try")
    parser.add_argument("--tests", type=int, nargs="+", default=[1, 10], help="tests per program to try")
    parser.add_argument("--json", default=str(RESULTS), help="where to write the results")
    args = parser.parse_args()

    # The load before we start: on a shared machine, other people's work slows every row.
    machine = {
        "cores": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0],
        "python": platform.python_version(),
    }
    protections = CodeVerifier().sandbox.probe()
    rows = [bench(args.programs, w, t) for t in args.tests for w in args.workers]
    print(
        f"cores: {machine['cores']}  load average before: {machine['load_average_1min']:.2f}  python: {machine['python']}"
    )
    print("protections: " + ", ".join(name for name, on in protections.items() if on))
    off = [name for name, on in protections.items() if not on]
    if off:
        print("NOT in effect: " + ", ".join(off))
    header = f"{'workers':>7} {'tests/prog':>10} {'programs':>8} {'wall s':>7} {'programs/s':>10} {'runs/s':>7} {'cpu ms/run':>10}"
    print(header)
    for row in rows:
        print(
            f"{row['workers']:>7} {row['tests_per_program']:>10} {row['programs']:>8} {row['wall_seconds']:>7.2f} "
            f"{row['programs_per_second']:>10.1f} {row['runs_per_second']:>7.1f} {row['cpu_ms_per_run']:>10.1f}"
        )
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(
        json.dumps({"machine": machine, "protections": protections, "results": rows}, indent=2) + "\n"
    )
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
