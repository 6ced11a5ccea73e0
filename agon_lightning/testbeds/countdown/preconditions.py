"""The Countdown testbed's preconditions, measured on a base alone, or on a trained bundle's adapters.

Each precondition, its measurement and its threshold are fixed in
``benchmarks/results/countdown/README.md`` (section 4) before they were first measured; this
script measures all of them on any base, prints the table and writes it as JSON::

    python -m agon_lightning.testbeds.countdown.preconditions                       # agon:tiny-countdown
    python -m agon_lightning.testbeds.countdown.preconditions --base runs/tiny-countdown --out /tmp/pre.json
    python -m agon_lightning.testbeds.countdown.preconditions --bundle RUN/checkpoints/last --out /tmp/trained.json

With ``--bundle`` the same measures run on a trained run's adapters: the bundle's drafter drafts
(``--drafter`` to choose another) and its answerer reads the summaries and judges the rivals'
claims (``--answerer``), so the summary ablation (a failed draft's real summary against another
problem's and an empty one) is measured on what training made of the pair.

Prompts, summarizer, verifier, cap and held-out sets come from ``--config``
(``configs/countdown.yaml``): what is measured is what a run of that config starts from.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from agon_lightning.game.names import BASE
from agon_lightning.game.text import thinking_part
from agon_lightning.game.types import Problem
from agon_lightning.summarizers.hiding import arithmetic_pieces
from agon_lightning.testbeds.countdown.sft import CountdownExamples
from agon_lightning.testbeds.countdown.summarizer import countdown_numbers
from agon_lightning.testbeds.countdown.task import (
    OPERATORS,
    Step,
    after,
    apply,
    expression,
    parse_claims,
    parse_verdicts,
)
from agon_lightning.training.validation import SPLIT

OUT = Path("preconditions.json")  # in the working directory unless --out names another
RIVAL_KINDS = ("right", "slipped", "partial")

# ---------------------------------------------------------------------------------------------
# Pure measures (unit-tested in tests/test_countdown_preconditions.py)
# ---------------------------------------------------------------------------------------------


def mean(values) -> float:
    """The mean, 0.0 for no values."""
    values = [float(v) for v in values]
    return statistics.fmean(values) if values else 0.0


def pass_at(correct: Sequence[Sequence[bool]]) -> tuple[float, float]:
    """``(pass@1, pass@k)`` of per-problem sample verdicts (``k`` samples each)."""
    flat = [c for row in correct for c in row]
    return sum(flat) / len(flat), sum(any(row) for row in correct) / len(correct)


def mean_cv(lengths: Sequence[Sequence[int]]) -> float:
    """Mean over problems of the coefficient of variation (population std / mean) of lengths."""
    return statistics.fmean(statistics.pstdev(row) / statistics.fmean(row) for row in lengths)


def cap_share_of_failures(correct: Sequence[bool], truncated: Sequence[bool]) -> float:
    """Share of the failed samples that hit the cap (0 when nothing failed)."""
    failed = [t for c, t in zip(correct, truncated, strict=True) if not c]
    return sum(failed) / len(failed) if failed else 0.0


def verdict_accuracy(summary: str, completion: str) -> tuple[int, int, int, int]:
    """``(right on true claims, true claims, right on false claims, false claims)``.

    Verdict ``k`` on the completion's first trace line judges claim ``k`` of the summary; it is
    right when it redoes that claim's operation and its ``y``/``n`` matches the arithmetic.
    """
    claims = parse_claims(summary)
    verdicts = parse_verdicts(thinking_part(completion).lstrip())
    counts = [0, 0, 0, 0]
    for k, claim in enumerate(claims):
        slot = 0 if claim.correct else 2
        counts[slot + 1] += 1
        if k < len(verdicts):
            step, judged_true = verdicts[k]
            same = (step.left, step.op, step.right) == (claim.left, claim.op, claim.right)
            counts[slot] += same and judged_true == claim.correct
    return counts[0], counts[1], counts[2], counts[3]


def copy_candidates(summary: str) -> list[str]:
    """What a copier could hand in from a summary: all of it, and each arithmetic piece."""
    pieces = [summary[start:end].split("=")[0].strip() for start, end, _, _ in arithmetic_pieces(summary)]
    return [summary.strip(), *pieces]


def blind_step(summary: str, numbers: Sequence[int], op: str) -> str | None:
    """The claims as stated, then the values left joined by ``op`` in order, as one expression:
    no arithmetic checked and no look at the target (``None``: the claims do not apply)."""
    claims: list[Step] = []
    for claim in parse_claims(summary):
        if after(numbers, [*claims, claim]) is None:
            break
        claims.append(claim)
    left = after(numbers, claims)
    if left is None or len(left) < 2:
        return None
    steps = list(claims)
    value = left[0]
    for other in left[1:]:
        steps.append(Step(value, op, other, apply(op, value, other)))
        value = steps[-1].result
    return expression(numbers, steps)


# ---------------------------------------------------------------------------------------------
# Measuring a base
# ---------------------------------------------------------------------------------------------


@dataclass
class Setup:
    """What the measurement uses, from the config."""

    model: torch.nn.Module
    tokenizer: object
    prompts: object
    summarizer: object
    verifier: object
    rollout: object
    problems: list[Problem]
    drafter: str | None = None  # the adapter that drafts (None: the base)
    answerer: str | None = None  # the adapter that reads summaries and judges claims (None: the base)
    adapters: bool = False  # whether ``model`` carries adapters (a bundle's)


def load(
    config: str,
    base: str,
    limit: int = 0,
    bundle: str | None = None,
    drafter: str | None = None,
    answerer: str | None = None,
) -> Setup:
    """The base model (or a bundle's adapters on their base) and the config's components and
    held-out problems (``limit``: the first that many of each split, 0: all).

    With ``bundle``, ``base`` is ignored for the bundle's own ``base_model``; ``drafter`` and
    ``answerer`` default to the bundle's (an adapter it does not hold is refused with the names it does).
    """
    from transformers import AutoTokenizer

    from agon_lightning.adapters.policy import load_causal_lm
    from agon_lightning.cli import AgonCLI
    from agon_lightning.infra.model_source import resolve_model_path

    meta = None
    if bundle is not None:
        from agon_lightning.deploy.bundle import read_bundle

        meta = read_bundle(bundle)
        base = meta["base_model"]
        drafter, answerer = drafter or meta["drafter"], answerer or meta["answerer"]
        for role, name in (("drafter", drafter), ("answerer", answerer)):
            if name not in meta["adapters"]:
                raise ValueError(
                    f"{role}={name!r} is not an adapter of {bundle} (it holds {meta['adapters']})"
                )
    cli = AgonCLI(args=["--config", config, f"--model.model_name_or_path={base}"], run=False)
    cli.datamodule.setup("validate")
    if meta is not None:
        from agon_lightning.deploy.bundle import load_adapters

        model, tokenizer = load_adapters(bundle, meta, meta["adapters"])
    else:
        path = resolve_model_path(base)
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = load_causal_lm(path).eval()
    tokenizer.padding_side = "left"
    m = cli.model
    problems = cli.datamodule.val_problems
    if limit:
        problems = [
            p
            for name in ("main", "hard")
            if (mine := [p for p in problems if p.metadata.get(SPLIT, "main") == name])
            for p in mine[:limit]
        ]
    return Setup(model, tokenizer, m.prompts, m.summarizer, m.verifier, m.rollout, problems, drafter, answerer,
                 adapters=meta is not None)  # fmt: skip


def generate(
    setup: Setup,
    prompts: list[str],
    samples: int = 1,
    greedy: bool = True,
    chunk: int = 256,
    adapter: str | None = None,
):
    """``(texts, lengths, truncated)`` for every prompt × sample, samples of a prompt adjacent,
    sampled by ``adapter`` of a bundle's model (``None``: the base)."""
    from agon_lightning.adapters.policy import sample_with

    texts, lengths, truncated = [], [], []
    per = max(1, chunk // samples)
    with torch.no_grad():
        for start in range(0, len(prompts), per):
            part = prompts[start : start + per]
            if setup.adapters:
                out = sample_with(setup.model, setup.rollout, setup.tokenizer, adapter, part, samples, greedy)
            else:
                out = setup.rollout.generate(setup.model, setup.tokenizer, part, samples, greedy)
            texts += out.texts
            lengths += out.lengths.tolist()
            truncated += out.truncated.tolist()
    return texts, lengths, truncated


def correct_of(setup: Setup, texts: list[str], problems: list[Problem]) -> list[bool]:
    return [v.correct for v in setup.verifier.verify_batch(texts, problems)]


def measure(setup: Setup, samples: int = 8, seed: int = 0, log: Callable[[str], None] = print) -> dict:
    """Every measured value of the design's section 4 (keys as in :data:`THRESHOLDS`), over both
    splits together, and the same over each split alone under ``by_split`` (S2's section 3)."""
    problems = setup.problems
    split = [p.metadata.get(SPLIT, "main") for p in problems]
    draft_prompts = [setup.prompts.draft_prompt(setup.tokenizer, p) for p in problems]

    log("greedy drafts")
    drafts, _, cut = generate(setup, draft_prompts, adapter=setup.drafter)
    draft_ok = correct_of(setup, drafts, problems)

    log(f"{samples} samples per problem at temperature {setup.rollout.temperature}")
    texts, lengths, truncated = generate(setup, draft_prompts, samples, greedy=False, adapter=setup.drafter)
    ok = correct_of(setup, texts, [p for p in problems for _ in range(samples)])
    rows = [ok[i * samples : (i + 1) * samples] for i in range(len(problems))]
    sample_lengths = [lengths[i * samples : (i + 1) * samples] for i in range(len(problems))]
    sample_cut = [truncated[i * samples : (i + 1) * samples] for i in range(len(problems))]

    log("untrained cascade: base reads the base's summaries")
    summaries = [setup.summarizer.summarize(d, p, t) for d, p, t in zip(drafts, problems, cut, strict=True)]

    def answer(with_summaries: list[str], which: list[int]) -> list[bool]:
        chosen = [problems[i] for i in which]
        prompts = [
            setup.prompts.challenge_prompt(setup.tokenizer, p, s) for p, s in zip(chosen, with_summaries)
        ]
        return correct_of(setup, generate(setup, prompts, adapter=setup.answerer)[0], chosen)

    everyone = list(range(len(problems)))
    reread = answer(summaries, everyone)
    failed = [i for i in everyone if not draft_ok[i]]
    other = []
    for i in failed:  # the summary of the next failed problem of the same split
        same = [j for j in failed if split[j] == split[i]]
        other.append(summaries[same[(same.index(i) + 1) % len(same)]])
    with_other = dict(zip(failed, answer(other, failed) if failed else []))
    with_empty = dict(zip(failed, answer([""] * len(failed), failed) if failed else []))

    log("judging generated rival claims")
    rng, builder = random.Random(seed), CountdownExamples()
    rivals, judged, owner = [], [], []
    for i, p in enumerate(problems):
        for kind in RIVAL_KINDS:
            rivals.append(setup.summarizer.summarize(builder.rival_draft(p, kind, rng), p))
            judged.append(p)
            owner.append(i)
    prompts = [
        setup.prompts.challenge_prompt(setup.tokenizer, p, s) for p, s in zip(judged, rivals, strict=True)
    ]
    judgements = generate(setup, prompts, adapter=setup.answerer)[0]
    counts = [verdict_accuracy(s, c) for s, c in zip(rivals, judgements, strict=True)]

    log("leak rules on the real summaries")

    def accepted(expr: str | None, problem: Problem) -> bool:
        return expr is not None and setup.verifier.verify(f"<answer>{expr}</answer>", problem).correct

    leak_copy = {
        i: any(accepted(c, problems[i]) for c in copy_candidates(summaries[i]))
        for i in everyone
        if summaries[i]
    }
    leak_blind = {op: {i: accepted(blind_step(summaries[i], countdown_numbers(problems[i]), op), problems[i])
                       for i in leak_copy} for op in OPERATORS}  # fmt: skip

    def values(mine: list[int]) -> dict:
        """Every measure over the problems ``mine``."""
        out: dict = {}
        inside = set(mine)
        for name in ("main", "hard"):
            picked = [i for i in mine if split[i] == name]
            if picked:
                out[f"greedy_pass@1_{name}"] = mean(draft_ok[i] for i in picked)
                out[f"sampled_pass@1_{name}"], out[f"pass@{samples}_{name}"] = pass_at(
                    [rows[i] for i in picked]
                )
        if f"pass@{samples}_hard" in out:
            out["pass@k_over_pass@1_hard"] = out[f"pass@{samples}_hard"] / max(
                out["sampled_pass@1_hard"], 1e-9
            )
        out["length_cv"] = mean_cv([sample_lengths[i] for i in mine])
        out["cap_share_of_failures"] = cap_share_of_failures(
            [c for i in mine for c in rows[i]], [t for i in mine for t in sample_cut[i]]
        )
        out["mean_length"] = mean(x for i in mine for x in sample_lengths[i])
        out["converted"] = sum(not draft_ok[i] and reread[i] for i in mine)
        out["regressed"] = sum(draft_ok[i] and not reread[i] for i in mine)
        mine_failed = [i for i in failed if i in inside]
        out["failed_drafts"] = len(mine_failed)
        out["failed_real"] = real = mean(reread[i] for i in mine_failed)
        out["failed_other"] = mean(with_other[i] for i in mine_failed)
        out["failed_empty"] = mean(with_empty[i] for i in mine_failed)
        out["real_minus_other"] = real - out["failed_other"]
        out["real_minus_empty"] = real - out["failed_empty"]
        judged_here = [c for c, i in zip(counts, owner, strict=True) if i in inside]
        right_true, true, right_false, false = (sum(c[k] for c in judged_here) for k in range(4))
        out["judge_accuracy"] = (right_true + right_false) / max(true + false, 1)
        out["judge_on_true_claims"] = right_true / max(true, 1)
        out["judge_on_false_claims"] = right_false / max(false, 1)
        out["judged_claims"] = true + false
        shown = [i for i in mine if i in leak_copy]
        out["summaries"] = len(shown)
        out["leak_copy"] = mean(leak_copy[i] for i in shown)
        out["leak_blind_step_by_op"] = {op: mean(leak_blind[op][i] for i in shown) for op in OPERATORS}
        out["leak_blind_step"] = max(out["leak_blind_step_by_op"].values())
        return out

    result = values(everyone)
    result["by_split"] = {name: values([i for i in everyone if split[i] == name])
                          for name in ("main", "hard") if name in split}  # fmt: skip
    return result


# ---------------------------------------------------------------------------------------------
# The table
# ---------------------------------------------------------------------------------------------

THRESHOLDS: list[tuple[str, str, str, Callable[[float], bool]]] = [
    ("1a", "room, main: greedy pass@1", "greedy_pass@1_main", lambda v: 0.30 <= v <= 0.60),
    ("1b", "room, hard: greedy pass@1", "greedy_pass@1_hard", lambda v: 0.10 <= v <= 0.35),
    ("1c", "hard: pass@8 / pass@1 (T=1)", "pass@k_over_pass@1_hard", lambda v: v >= 1.5),
    ("2a", "within-problem CV of length (T=1)", "length_cv", lambda v: v >= 0.3),
    ("2b", "failures that hit the cap (T=1)", "cap_share_of_failures", lambda v: v >= 0.2),
    ("3b", "failed drafts: real − other summary", "real_minus_other", lambda v: v >= 0.10),
    ("3c", "failed drafts: real − empty summary", "real_minus_empty", lambda v: v >= 0.10),
    ("4", "claims judged right", "judge_accuracy", lambda v: v >= 0.90),
    ("5a", "copy rule recovers the answer", "leak_copy", lambda v: v == 0),
    ("5b", "one blind step recovers it (best op)", "leak_blind_step", lambda v: v <= 0.33),
]
BOUNDS = {"1a": "0.30–0.60", "1b": "0.10–0.35", "1c": "≥ 1.5", "2a": "≥ 0.3", "2b": "≥ 0.2", "3b": "≥ 0.10",
          "3c": "≥ 0.10", "4": "≥ 0.90", "5a": "0", "5b": "≤ 0.33"}  # fmt: skip


def table(values: dict) -> tuple[str, list[dict]]:
    """The markdown table of every precondition (threshold, measured value, pass/fail) and its rows;
    a precondition of the other split's room (1a on hard, 1b and 1c on main) is left out."""
    rows = [
        {"id": key, "precondition": name, "threshold": BOUNDS[key], "value": values[field], "pass": check(values[field])}
        for key, name, field, check in THRESHOLDS
        if field in values
    ]  # fmt: skip
    converted, regressed = values["converted"], values["regressed"]
    at = next(k for k, r in enumerate(rows) if r["id"] == "3b")
    rows.insert(at, {"id": "3a", "precondition": "untrained cascade: converted vs regressed",
                    "threshold": "converted > regressed", "value": f"{converted} vs {regressed}",
                    "pass": converted > regressed})  # fmt: skip
    lines = ["| # | precondition | threshold | measured | pass |", "|---|---|---|---|---|"]
    for r in rows:
        value = f"{r['value']:.3f}" if isinstance(r["value"], float) else str(r["value"])
        lines.append(
            f"| {r['id']} | {r['precondition']} | {r['threshold']} | {value} | {'yes' if r['pass'] else 'NO'} |"
        )
    return "\n".join(lines), rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="configs/countdown.yaml")
    parser.add_argument("--base", default="agon:tiny-countdown")
    parser.add_argument("--samples", type=int, default=8, help="samples per problem at temperature 1")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--limit", type=int, default=0, help="first N problems of each split (0: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument(
        "--bundle", default=None, help="measure a trained run's bundle (its adapters) instead"
    )
    parser.add_argument(
        "--drafter", default=None, help="with --bundle: the adapter that drafts (default: the bundle's)"
    )
    parser.add_argument("--answerer", default=None,
                        help="with --bundle: the adapter that reads and judges (default: the bundle's)")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.drafter or args.answerer) and not args.bundle:
        parser.error("--drafter and --answerer name a bundle's adapters: give --bundle")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    setup = load(args.config, args.base, args.limit, args.bundle, args.drafter, args.answerer)
    values = measure(setup, args.samples, args.seed)
    text, rows = table(values)
    print("both splits\n" + text)
    per_split = {name: table(v) for name, v in values["by_split"].items()}
    for name, (split_text, _) in per_split.items():
        print(f"\n{name} split\n{split_text}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {BASE: args.base, "config": args.config, "samples": args.samples, "seed": args.seed,
              "bundle": args.bundle, "drafter": setup.drafter, "answerer": setup.answerer}  # fmt: skip
    args.out.write_text(
        json.dumps(
            {**record, "values": values, "table": rows, "tables": {n: r for n, (_, r) in per_split.items()}},
            indent=1,
        )
        + "\n"
    )
    print(f"written to {args.out}")


if __name__ == "__main__":
    main()
