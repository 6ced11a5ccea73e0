"""How long MathVerifier takes: per check on adversarial answers, and per batch of ordinary ones.

The adversarial answers below do not finish within 60 s in math-verify with its timeouts off; the
verifier must answer each within ``--timeout-s`` plus the cost of killing a worker. Run:

    python benchmarks/bench_math_verifier.py --timeout-s 5 --workers 2
    python benchmarks/bench_math_verifier.py --timeout-s 0.5 --repeats 1 --json /tmp/math_verifier.json
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from agon_lightning.game.types import Problem
from agon_lightning.verifiers.math import MathVerifier

FIXTURE = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "deepmath_fixture.jsonl"
RESULTS = Path(__file__).parent / "results" / "math_verifier.json"
ADVERSARIAL = [
    "9^{9^{9^{9}}}",
    "10^{10^{10}}",
    "(x+1)^{100000}",
    "2^{2^{2^{2^{2^{2}}}}}",
]


def completion(answer: str) -> str:
    return f"<think>\nworking\n</think>\n\nHence the result.\n\n\\[\n\\boxed{{{answer}}}\n\\]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout-s", type=float, default=5.0, help="MathVerifier.timeout_s")
    parser.add_argument("--workers", type=int, default=2, help="MathVerifier.num_workers")
    parser.add_argument("--repeats", type=int, default=3, help="times each adversarial answer is checked")
    parser.add_argument("--batch-copies", type=int, default=8, help="copies of the fixture in the batch")
    parser.add_argument("--json", default=str(RESULTS), help="where to write the results")
    args = parser.parse_args()

    verifier = MathVerifier(timeout_s=args.timeout_s, num_workers=args.workers)
    try:
        start = time.monotonic()
        verifier.start()
        startup = time.monotonic() - start
        print(f"start-up of {args.workers} workers: {startup:.2f} s")

        worst, adversarial = 0.0, []
        for expression in ADVERSARIAL:
            times = []
            for _ in range(args.repeats):
                verifier.start()  # the previous timeout's replacement is ready: time the check alone
                start = time.monotonic()
                verdict = verifier.verify(completion(expression), Problem("q", "5"))
                times.append(time.monotonic() - start)
            worst = max(worst, *times)
            adversarial.append({"answer": expression, "reason": verdict.reason, "seconds": times})
            print(f"{expression:>24}: {verdict.reason:8} max {max(times):.3f} s  min {min(times):.3f} s")
        print(
            f"bound {args.timeout_s:.2f} s, worst single check {worst:.3f} s (+{worst - args.timeout_s:.3f} s)"
        )

        rows = [json.loads(line) for line in FIXTURE.read_text().splitlines()] * args.batch_copies
        # "\\displaystyle" keeps the strings apart, so every check goes through math-verify.
        texts = [completion(f"\\displaystyle {row['final_answer']}") for row in rows]
        problems = [Problem(row["question"], row["final_answer"]) for row in rows]
        verifier.start()
        start = time.monotonic()
        verdicts = verifier.verify_batch(texts, problems)
        elapsed = time.monotonic() - start
        correct = sum(v.correct for v in verdicts)
        print(
            f"batch of {len(texts)} ordinary checks: {elapsed:.3f} s ({len(texts) / elapsed:.0f}/s), {correct} correct"
        )
    finally:
        verifier.close()
    results = {
        "timeout_s": args.timeout_s, "workers": args.workers, "startup_s": startup, "adversarial": adversarial,
        "worst_check_s": worst, "batch": {"checks": len(texts), "seconds": elapsed, "correct": correct},
    }  # fmt: skip
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
