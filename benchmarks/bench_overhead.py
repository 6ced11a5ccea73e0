"""Agon's overhead: one Agon step against one ``game: grpo`` step, per rollout token.

An Agon step on P problems generates P·N drafts *and* P·N challenges and trains both
adapters on them, so it does twice the rollout work of a GRPO step; the paper's claim that
two competing policies cost about as much as one means the cost *per rollout token* should
match. The challenger also reads the problem plus the draft's summary, a longer prompt, so
two summarizers are measured: ``hidden`` (the challenger reads nothing: the bare cost of
the second policy) and ``strip_trace`` (the shipped default; an untrained model writes no
``</think>``, so its summary is the whole draft: the longest prompt the challenger can get).

    python -m benchmarks.bench_overhead
    python -m benchmarks.bench_overhead --rounds 1 --steps 2
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    SUMMARIZERS,
    Workload,
    build_model_dir,
    make_problems,
    median,
    ours_worker,
    print_table,
    spawn,
    work_config,
    worker_main,
    workload_from,
    workload_of,
    workload_parser,
    write_json,
)

MODULE = "benchmarks.bench_overhead"


def run(config: dict[str, Any]) -> dict[str, Any]:
    if config.get("validation"):
        return validation_drafts(Path(config["model_dir"]), workload_from(config), config["problems"])
    return ours_worker(config)


def validation_drafts(model_dir: Path, work: Workload, problems: int, repeats: int = 5) -> dict[str, Any]:
    """Greedy drafts of base, alpha and beta: one ``generate`` per policy against one mixed call."""
    import time

    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule

    module = AgonModule(
        model_name_or_path=str(model_dir), rollout=HFRollout(max_new_tokens=work.max_new_tokens),
        prompts=Prompts(chat_template=False),
    )  # fmt: skip
    module.configure_model()
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in make_problems(problems, work.seed)]
    policies = [None, "alpha", "beta"]
    times: dict[str, list[float]] = {"per_policy": [], "mixed": []}
    for _ in range(repeats):
        start = time.process_time()
        separate = [module.sample(a, prompts, 1, greedy=True) for a in policies]
        times["per_policy"].append(time.process_time() - start)
        start = time.process_time()
        mixed = module.sample_mixed(
            [a for a in policies for _ in prompts], prompts * len(policies), greedy=True
        )
        times["mixed"].append(time.process_time() - start)
    same = mixed.texts == [t for rb in separate for t in rb.texts]
    return {**{k: median(v) for k, v in times.items()}, "identical_texts": same}


def per_token(result: dict[str, Any], key: str = "step_s") -> float:
    return result[key] / result["rollout_tokens"]


def main() -> None:
    parser = workload_parser(__doc__, rounds=3, rounds_help="GRPO/Agon pairs per summarizer")
    parser.add_argument("--summarizers", nargs="+", default=list(SUMMARIZERS), choices=SUMMARIZERS)
    parser.add_argument(
        "--val-problems", type=int, default=16, help="problems in the validation-drafts check"
    )
    cli = parser.parse_args()
    work = workload_of(cli)
    rows, records = [], []
    with tempfile.TemporaryDirectory() as root:
        model_dir = build_model_dir(Path(root), work)
        for summarizer in cli.summarizers:
            runs: dict[str, list[dict[str, Any]]] = {"grpo": [], "agon": []}
            for _ in range(cli.rounds):
                for game in ("grpo", "agon"):
                    config = work_config(work, game=game, summarizer=summarizer, model_dir=str(model_dir))
                    result = spawn(MODULE, config)
                    runs[game].append(result)
                    print(
                        f"{summarizer} {game}: {result['step_s']:.3f} s/step, {result['rollout_tokens']} tokens"
                    )
            pairs = list(zip(runs["agon"], runs["grpo"]))
            ratio = median([per_token(a) / per_token(g) for a, g in pairs])
            gen_ratio = median([per_token(a, "generate_s") / per_token(g, "generate_s") for a, g in pairs])
            upd_ratio = median([per_token(a, "update_s") / per_token(g, "update_s") for a, g in pairs])
            cpu_ratio = median([per_token(a, "cpu_step_s") / per_token(g, "cpu_step_s") for a, g in pairs])
            agon, grpo = runs["agon"][0], runs["grpo"][0]
            rows.append([
                summarizer, grpo["rollout_tokens"], agon["rollout_tokens"],
                grpo["prompt_tokens"] / grpo["rollout_tokens"], agon["prompt_tokens"] / agon["rollout_tokens"],
                1e3 * median([per_token(r) for r in runs["grpo"]]), 1e3 * median([per_token(r) for r in runs["agon"]]),
                gen_ratio, upd_ratio, ratio, cpu_ratio,
            ])  # fmt: skip
            records.append({"summarizer": summarizer, "ratio_per_round": [per_token(a) / per_token(g) for a, g in pairs],
                            "runs": runs})  # fmt: skip
        val = spawn(
            MODULE, work_config(work, validation=True, problems=cli.val_problems, model_dir=str(model_dir))
        )
    table = print_table(
        f"Agon vs GRPO per rollout token (P={work.prompts}, N={work.generations}, T={work.max_new_tokens})",
        ["challenger reads", "GRPO tokens/step", "Agon tokens/step", "GRPO prompt/rollout tokens",
         "Agon prompt/rollout tokens", "GRPO ms/token", "Agon ms/token", "generate ratio", "update ratio",
         "Agon/GRPO per token (wall)", "(CPU)"],
        rows,
    )  # fmt: skip
    val_table = print_table(
        f"Validation drafts of base, alpha and beta ({cli.val_problems} problems, greedy, T={work.max_new_tokens})",
        ["one generate per policy, CPU s", "one mixed-adapter generate, CPU s", "ratio", "identical texts"],
        [[val["per_policy"], val["mixed"], val["mixed"] / val["per_policy"], val["identical_texts"]]],
    )  # fmt: skip
    write_json(
        "overhead",
        {"workload": work.__dict__, "tables": [table, val_table], "results": records, "validation": val},
        cli.results_dir,
    )


if __name__ == "__main__":
    if not worker_main(run):
        main()
