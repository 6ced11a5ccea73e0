"""S3's split by state, counted on the generated data: no SFT trace passes through a held-out statement.

Builds the SFT data of ``configs/sft_countdown.yaml`` (as ``agon sft`` builds it: its holdout now
also keeps held-out statements out of the states the traces pass through), and counts with the
audit's own reading (:func:`experiments.countdown.s2_audit.exposure`, each trained completion's
first-step states; and the same over the rivals' drafts that challenger examples read) the
held-out main statements seen as a state, with the builder's redraws and drops::

    python -m experiments.countdown.s3_states --out benchmarks/results/countdown/s3/states.json
    python -m experiments.countdown.s3_states --train-size 192000 --out benchmarks/results/countdown/s3/states_base.json

S2's base, built without the filter, read 374 seen and 223 solved (``../s2/audit.json``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from experiments.countdown.s2_audit import exposure, sft_data, statement_of


def main(argv: list[str] | None = None) -> None:
    from agon_lightning.data.reasoning_gym import held_out_problems

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, default=Path("configs/sft_countdown.yaml"))
    parser.add_argument("--data-seeds", type=int, nargs="+", default=[50001])
    parser.add_argument("--train-size", type=int, default=None,
                        help="training problems (default: the config's; S3's base, amendment A2: 192000)")  # fmt: skip
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    record: dict = {"command": " ".join(["python -m experiments.countdown.s3_states", *(argv or sys.argv[1:])]),
                    "per_data_seed": {}}  # fmt: skip
    for seed in args.data_seeds:
        start = time.perf_counter()
        data = sft_data(args.config, seed, **({"train_size": args.train_size} if args.train_size else {}))
        everything = held_out_problems(data.tasks, None, 0, data.question_format, data.holdout)
        held_out = {statement_of(p) for p in everything}
        built = data.examples.build(data.train_problems, data.seed)
        completions = exposure(((e.problem, e.target) for e in built), held_out)
        drafts = exposure(((e.problem, e.rival_draft) for e in built if e.rival_draft), held_out)
        record["held_out_main"] = len(held_out)
        record["per_data_seed"][seed] = {
            "training_problems": len(data.train_problems),
            "examples": len(built),
            "four_number_examples": completions["examples"],
            "held_out_seen_in_completions": len(completions["seen"]),
            "held_out_solved_in_completions": len(completions["solved"]),
            "held_out_seen_in_rival_drafts": len(drafts["seen"]),
            "build": getattr(data.examples, "last_build", None),
            "seconds": round(time.perf_counter() - start, 1),
        }
        print(f"data seed {seed}: {record['per_data_seed'][seed]}", flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
