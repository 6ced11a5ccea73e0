"""What the Countdown formats allow at best: the SFT generator's own searches, read as a model
that imitated them perfectly, measured as the preconditions measure a base.

The preconditions of ``benchmarks/results/countdown/README.md`` (section 4) are measured on a
trained base. A base can do no better than the examples it imitates, so where the examples'
own drafts and challenges fail a precondition, no amount of training will meet it: the format
has to change. This script plays the generator of a config (``configs/sft_countdown.yaml``) on
the held-out problems of ``configs/countdown.yaml``: each problem's draft is one drawn search;
the challenger reads its summary (the real one, another failed problem's, or none) and runs a
search of its own, cut at the cap like a sampled completion. A greedy base is one fixed
policy, so the challenger's search is drawn with the drafter's seed (``same``: the same
ordering, tie-breaks and give-up point, changed only by what it read); ``independent`` draws
it fresh, like samples at temperature 1::

    python -m experiments.countdown.oracle --out benchmarks/results/countdown/oracle.json
    python -m experiments.countdown.oracle --examples '{"max_attempts": 6, "give_up": null}'  # M2's format
"""

from __future__ import annotations

import argparse
import copy
import json
import random
from pathlib import Path

import yaml

from agon_lightning.testbeds.countdown.preconditions import cap_share_of_failures, load, mean, mean_cv
from agon_lightning.testbeds.countdown.sft import CountdownExamples, target_of
from agon_lightning.testbeds.countdown.summarizer import countdown_numbers
from agon_lightning.testbeds.countdown.task import solve
from agon_lightning.training.validation import SPLIT

OUT = Path("oracle.json")  # in the working directory unless --out names another


def examples_of(sft_config: str, overrides: dict) -> CountdownExamples:
    """The SFT config's example generator, with ``overrides`` of its arguments."""
    spec = yaml.safe_load(Path(sft_config).read_text())["data"]["examples"]
    return CountdownExamples(**{**spec.get("init_args", {}), **overrides})


def oracle(setup, examples: CountdownExamples, seed: int = 0, samples: int = 8) -> dict:
    """The preconditions' values for a base that writes exactly the generator's searches, and
    (``mode/``) for one that always gives up at its habit, as greedy decoding of it would."""
    out = _oracle(setup, examples, seed, samples)
    if examples.give_up_habit:
        mode = copy.copy(examples)
        mode.habit_rate = 1.0
        greedy = _oracle(setup, mode, seed, samples=1)
        for key in ("pass@1_main", "pass@1_hard", "failed_drafts", "failed_with_summary", "same/failed_real",
                    "same/real_minus_other", "same/real_minus_empty"):  # fmt: skip
            out[f"mode/{key}"] = greedy[key]
    return out


def _oracle(setup, examples: CountdownExamples, seed: int, samples: int) -> dict:
    problems, cap = setup.problems, setup.rollout.max_new_tokens
    split = [p.metadata.get(SPLIT, "main") for p in problems]

    def tokens(text: str) -> int:
        return len(setup.tokenizer(text, add_special_tokens=False)["input_ids"])

    def play(k: int, draw: int, summary: str | None = None) -> tuple[bool, str, int, bool]:
        """(correct, summary shown, length, cut) of one search of problem ``k``."""
        p = problems[k]
        numbers, target = countdown_numbers(p), target_of(p)
        rng = random.Random(hash((seed, k, draw)) & 0xFFFFFFFF)
        text = str(
            solve(
                numbers, target, examples.style(rng, count=len(numbers)), rng, rival_summary=summary or None
            )
        )
        length = tokens(text)
        if length > cap:  # cut: no summary, no answer
            return False, "", cap, True
        return setup.verifier.verify(text, p).correct, setup.summarizer.summarize(text, p), length, False

    out: dict = {}
    drafts = [play(k, 0) for k in range(len(problems))]
    for name in ("main", "hard"):
        out[f"pass@1_{name}"] = mean(d[0] for d, s in zip(drafts, split, strict=True) if s == name)
    sampled = [[play(k, 1 + j) for j in range(samples)] for k in range(len(problems))]
    out["length_cv"] = mean_cv([[s[2] for s in row] for row in sampled]) if samples > 1 else 0.0
    flat = [s for row in sampled for s in row]
    out["cap_share_of_failures"] = cap_share_of_failures([s[0] for s in flat], [s[3] for s in flat])
    failed = [k for k, d in enumerate(drafts) if not d[0]]
    other = {}
    for k in failed:  # the summary of the next failed problem of the same split
        same = [j for j in failed if split[j] == split[k]]
        other[k] = drafts[same[(same.index(k) + 1) % len(same)]][1]
    out["failed_drafts"] = len(failed)
    out["failed_with_summary"] = mean(bool(drafts[k][1]) for k in failed)
    for policy, draw in (("same", 0), ("independent", 99)):
        real = mean(play(k, draw, drafts[k][1])[0] for k in failed)
        out[f"{policy}/failed_real"] = real
        out[f"{policy}/real_minus_other"] = real - mean(play(k, draw, other[k])[0] for k in failed)
        out[f"{policy}/real_minus_empty"] = real - mean(play(k, draw, "")[0] for k in failed)
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/countdown.yaml")
    parser.add_argument("--sft-config", default="configs/sft_countdown.yaml")
    parser.add_argument(
        "--examples", type=json.loads, default={}, help="overrides of the generator's arguments (JSON)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="first N problems of each split (0: all)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    setup = load(args.config, "agon:tiny-countdown", args.limit)
    examples = examples_of(args.sft_config, args.examples)
    values = oracle(setup, examples, args.seed)
    for key, value in values.items():
        print(f"{key:32s} {value:.3f}" if isinstance(value, float) else f"{key:32s} {value}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        record = {
            "config": args.config,
            "sft_config": args.sft_config,
            "examples": args.examples,
            "seed": args.seed,
        }
        args.out.write_text(json.dumps({**record, "values": values}, indent=1) + "\n")
        print(f"written to {args.out}")


if __name__ == "__main__":
    main()
