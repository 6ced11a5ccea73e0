"""Countdown S3's GRPO-only pilot: the training length its plateau rule fixes.

Section 4 of ``benchmarks/results/countdown/s3/README.md`` fixes the rule before the pilot runs
(seeds 1000 and 1001, up to 480 steps, evaluated every 40): the curve has flattened at the first
evaluated step ``t ≥ 120`` whose two-seed mean gain over step 0 is at least 90% of the largest gain
on the whole curve and from which the mean rises by less than 2 points over the next 80 steps (the
highest mean in ``(t, t + 80]`` less the mean at ``t``; a step within 80 of the cap has no such
window and does not qualify: amendment A3). T is that step; if none qualifies, T is the cap,
reported as capped. GRPO's pass@1 at T above 0.90 leaves
the main split no room (an amendment before part 2)::

    python -m experiments.countdown.s3_pilot benchmarks/results/countdown/s3/pilot

It prints the curve and the reading and writes ``pilot.json`` beside the archive, as S2's does.
"""

from __future__ import annotations

from experiments.countdown.s2_pilot import NO_ROOM, SHARE
from experiments.countdown.s2_pilot import main as read_pilot

CAP = 480
EARLIEST = 120  # no T before S2's length
WINDOW = 80  # steps after t over which the mean must rise by less than RISE
RISE = 0.02


def training_length(mean_pass: dict[int, float], cap: int = CAP) -> dict:
    """The rule on a mean curve (step → pass@1): ``T``, whether it was capped, the gains, the split's room."""
    steps = sorted(mean_pass)
    start = mean_pass[steps[0]]
    gain = {s: mean_pass[s] - start for s in steps}
    best = max(gain.values())
    best_step = max(steps, key=lambda s: (gain[s], -s))

    def flat_from(t: int) -> bool:
        ahead = [mean_pass[s] for s in steps if t < s <= t + WINDOW]
        return bool(ahead) and max(ahead) - mean_pass[t] < RISE

    qualifying = [
        s for s in steps if EARLIEST <= s <= cap - WINDOW and gain[s] >= SHARE * best and flat_from(s)
    ]
    capped = not qualifying
    t = cap if capped else qualifying[0]
    if t not in mean_pass:  # the cap was not evaluated: the last evaluation stands for it
        t = max(s for s in steps if s <= cap)
    return {
        "T": t, "capped": capped, "largest_gain": best, "largest_gain_step": best_step, "gain": gain,
        "pass_at_T": mean_pass[t], "main_split": "no room (amendment)" if mean_pass[t] > NO_ROOM else "3 numbers",
    }  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    read_pilot(argv, rule=training_length, default_cap=CAP)


if __name__ == "__main__":
    main()
