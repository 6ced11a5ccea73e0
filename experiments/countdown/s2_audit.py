"""Two checks of what S2's design says of itself, recomputed from committed inputs.

*Held out by statement, not by sub-problem.* S2 holds a 3-number statement out of every generator
that trains (``benchmarks/results/countdown/s2/README.md``, section 1). But a 4-number SFT trace
passes through 3-number states: an attempt's first step leaves three numbers and the same target,
which may be a held-out main problem, and an attempt that hits the target from there solves it.
:func:`exposure` counts, over the SFT examples of 4-number problems the base was trained on (each
data seed's training problems and examples, rebuilt as ``agon sft`` builds them), the held-out
main problems that appear as such a state in a trained completion, and those solved there.

*The pilot inside the sweep.* The pilot's GRPO runs (section 5) and the sweep's runs of the same
rows and seeds share a configuration but for the evaluation interval; :func:`same_outcomes`
compares their per-problem outcomes at the last evaluation::

    python -m experiments.countdown.s2_audit --out benchmarks/results/countdown/s2/audit.json

(about 20 minutes on a shared 2-core machine: drawing 2 × 60,000 training problems is most of it).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

import yaml

from agon_lightning.game.names import ALPHA
from agon_lightning.game.types import Problem
from agon_lightning.testbeds.countdown.states import Statement, passes_through, statement_of, target_of
from agon_lightning.testbeds.countdown.summarizer import countdown_numbers


def exposure(completions: Iterable[tuple[Problem, str]], held_out: set[Statement]) -> dict:
    """Over ``(problem, trained completion)`` pairs of 4-number problems: how many, and which
    held-out statements appear as a state of some trace (``seen``) and are solved inside one (``solved``)."""
    examples, seen, solved = 0, set(), set()
    for problem, completion in completions:
        numbers = countdown_numbers(problem)
        if len(numbers) != 4:
            continue
        examples += 1
        for state, hit in passes_through(completion, numbers, target_of(problem)):
            if state in held_out:
                seen.add(state)
                if hit:
                    solved.add(state)
    return {"examples": examples, "seen": sorted(seen), "solved": sorted(solved)}


def sft_data(config: Path, data_seed: int, **overrides):
    """The SFT data module of ``config`` with ``data_seed`` (and ``overrides`` of its other
    arguments, e.g. ``train_size``), built as ``agon sft`` builds it."""
    from jsonargparse import ArgumentParser

    from agon_lightning.training.sft_data import SFTDataModule

    parser = ArgumentParser()
    parser.add_class_arguments(SFTDataModule, "data")
    data = yaml.safe_load(config.read_text())["data"]
    build = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed in jsonargparse 4.49
    return build(parser.parse_object({"data": {**data, **overrides, "data_seed": data_seed}})).data


def same_outcomes(first: Path, second: Path, keys: tuple[str, ...] = (ALPHA, "cascade_aa")) -> dict:
    """Per row, seed and key: the problems both archives' runs evaluated, and how many had the same outcome."""
    from experiments.countdown.s2_endpoints import SPLITS, outcomes_of, unpacked_runs

    with tempfile.TemporaryDirectory() as scratch:
        mine = unpacked_runs(first, Path(scratch) / "first")
        theirs = unpacked_runs(second, Path(scratch) / "second")
        out: dict[str, dict] = {}
        for run in sorted(mine.keys() & theirs.keys()):
            for key in keys:
                compared = same = 0
                for tag, _ in SPLITS:
                    a, b = outcomes_of(mine[run], key, tag), outcomes_of(theirs[run], key, tag)
                    both = a.keys() & b.keys()
                    compared += len(both)
                    same += sum(a[q] == b[q] for q in both)
                out.setdefault(f"{run[0]} seed {run[1]}", {})[key] = {"problems": compared, "same": same}
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/sft_countdown.yaml"),
                        help="the base's SFT config (its holdout, tasks and example proportions)")  # fmt: skip
    parser.add_argument("--data-seeds", type=int, nargs="+", default=[50001, 300001],
                        help="the data seeds the base trained on (B0's and amendment B1's)")  # fmt: skip
    parser.add_argument("--pilot", type=Path, default=Path("benchmarks/results/countdown/s2/pilot"))
    parser.add_argument("--sweep", type=Path, default=Path("benchmarks/results/countdown/s2/sweep"))
    parser.add_argument("--out", type=Path, required=True, help="the JSON to write")
    args = parser.parse_args(argv)
    from agon_lightning.data.reasoning_gym import held_out_problems

    held_out: set[Statement] | None = None
    per_seed, seen, solved, examples = {}, set(), set(), 0
    for seed in args.data_seeds:
        data = sft_data(args.config, seed)
        if held_out is None:  # the main split: every held-out 3-number statement
            everything = held_out_problems(data.tasks, None, 0, data.question_format, data.holdout)
            held_out = {statement_of(p) for p in everything}
        built = data.examples.build(data.train_problems, data.seed)
        found = exposure(((e.problem, e.target) for e in built), held_out)
        per_seed[seed] = {
            "examples": found["examples"],
            "seen": len(found["seen"]),
            "solved": len(found["solved"]),
        }
        examples += found["examples"]
        seen |= set(found["seen"])
        solved |= set(found["solved"])
        print(f"data seed {seed}: {per_seed[seed]}", flush=True)
    record = {
        "command": " ".join(["python -m experiments.countdown.s2_audit", *(argv or sys.argv[1:])]),
        "data_seeds": args.data_seeds,
        "held_out_main": len(held_out or ()),
        "exposure": {
            "four_number_examples": examples,
            "held_out_seen_as_state": len(seen),
            "held_out_solved_in_a_trace": len(solved),
            "per_data_seed": per_seed,
        },
        "pilot_in_sweep": same_outcomes(args.pilot, args.sweep),
    }
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
