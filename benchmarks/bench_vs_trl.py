"""Our ``game: grpo`` step against TRL's ``GRPOTrainer`` on the same work, on CPU.

Same tiny Qwen3, same prompts, same N, same completion length (forced), same LoRA (rank,
alpha, the seven projections), AdamW with the same settings, fp32, one inner iteration,
gradient clipping at 1.0, token-mean loss (TRL's ``dapo``), group-scaled advantages, with
β = 0 and β > 0. Each measurement is a fresh process; ours and TRL alternate, repeated, and
the ratio is taken per round (side by side), then the median over rounds.

Ours runs as ``agon fit`` runs, with freed memory kept for reuse
(:mod:`agon_lightning.infra.allocator`); TRL runs as it ships, and once more per round with the same
allocator setting (``trl_reuse``), so the table separates what the setting gives from the rest.

    python -m benchmarks.bench_vs_trl                 # the README table
    python -m benchmarks.bench_vs_trl --rounds 1 --steps 2   # a quick look

Needs the benchmark extra: ``pip install -e ".[bench]"``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import (
    LEARNING_RATE,
    LORA_TARGETS,
    StepTimer,
    Workload,
    build_model_dir,
    coin,
    current_rss_mb,
    make_problems,
    median,
    print_table,
    run_ours,
    spawn,
    work_config,
    worker_main,
    workload_from,
    workload_of,
    workload_parser,
    write_json,
)

MODULE = "benchmarks.bench_vs_trl"


def run_trl(model_dir: Path, work: Workload, output_dir: str) -> dict[str, Any]:
    """Train ``1 + work.steps`` steps of TRL's GRPOTrainer; time each step."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    problems = make_problems(work.prompts * (work.steps + 1), work.seed)
    dataset = Dataset.from_list([{"prompt": p.question, "answer": p.answer} for p in problems])

    def correctness(completions: list[str], **kwargs: Any) -> list[float]:
        return [float(coin(c)) for c in completions]  # the reward our side's verifier pays (common.coin)

    args = GRPOConfig(
        output_dir=output_dir, per_device_train_batch_size=work.rollouts, num_generations=work.generations,
        max_completion_length=work.max_new_tokens, generation_kwargs={"min_new_tokens": work.max_new_tokens},
        temperature=1.0, top_p=1.0, top_k=0, beta=work.kl_beta, num_iterations=1, epsilon=0.2,
        loss_type="dapo", scale_rewards="group", learning_rate=LEARNING_RATE, weight_decay=0.0,
        optim="adamw_torch", lr_scheduler_type="constant", max_grad_norm=1.0, max_steps=work.steps + 1,
        bf16=False, fp16=False, use_cpu=True, gradient_checkpointing=False, logging_steps=1, report_to="none",
        save_strategy="no", seed=work.seed, data_seed=work.seed, dataloader_num_workers=0, disable_tqdm=True,
        model_init_kwargs={"dtype": torch.float32},
    )  # fmt: skip
    peft_config = LoraConfig(
        r=work.lora_r, lora_alpha=2 * work.lora_r, lora_dropout=0.0, target_modules=LORA_TARGETS, bias="none"
    )
    timer = StepTimer()
    lengths: list[float] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            timer.train_start_rss_mb = current_rss_mb()

        def on_step_end(self, args, state, control, **kwargs):
            timer.step_end(0)

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs and "completions/mean_length" in logs:
                lengths.append(logs["completions/mean_length"])

    trainer = GRPOTrainer(
        model=str(model_dir), reward_funcs=correctness, args=args, train_dataset=dataset,
        peft_config=peft_config, callbacks=[Timer()],
    )  # fmt: skip
    trainer.train()
    result = timer.summary()
    result["rollout_tokens"] = median(lengths) * work.rollouts if lengths else 0
    return result


IMPLS = ("ours", "trl", "trl_reuse")  # trl_reuse: TRL with the allocator setting `agon` uses


def run(config: dict[str, Any]) -> dict[str, Any]:
    work = workload_from(config)
    model_dir = Path(config["model_dir"])
    if config["impl"] == "ours":
        return run_ours(model_dir, work, game="grpo")
    if config["impl"] == "trl_reuse":
        from agon_lightning.infra.allocator import reuse_freed_memory

        reuse_freed_memory()
    with tempfile.TemporaryDirectory() as out:
        return run_trl(model_dir, work, out)


def main() -> None:
    parser = workload_parser(__doc__, rounds=3, rounds_help="ours/TRL pairs per β")
    parser.add_argument("--betas", type=float, nargs="+", default=[0.0, 0.04])
    cli = parser.parse_args()
    rows, records = [], []
    with tempfile.TemporaryDirectory() as root:
        for beta in cli.betas:
            work = workload_of(cli, kl_beta=beta)
            model_dir = build_model_dir(Path(root), work)
            runs: dict[str, list[dict[str, Any]]] = {impl: [] for impl in IMPLS}
            for _ in range(cli.rounds):
                for impl in IMPLS:
                    result = spawn(MODULE, work_config(work, impl=impl, model_dir=str(model_dir)))
                    runs[impl].append(result)
                    print(f"β={beta} {impl}: {result['step_s']:.3f} s/step, {result['peak_rss_mb']:.0f} MB")
            pairs = list(zip(runs["ours"], runs["trl"]))
            ratios = [o["step_s"] / t["step_s"] for o, t in pairs]
            same_allocator = [o["step_s"] / t["step_s"] for o, t in zip(runs["ours"], runs["trl_reuse"])]
            cpu_ratios = [o["cpu_step_s"] / t["cpu_step_s"] for o, t in pairs]
            gen_share = {k: median([r["generate_cpu_s"] / r["cpu_step_s"] for r in runs[k]]) for k in runs}
            rest_ratios = [
                (o["cpu_step_s"] - o["generate_cpu_s"]) / (t["cpu_step_s"] - t["generate_cpu_s"])
                for o, t in pairs
            ]
            ours_s, trl_s, trl_reuse_s = (median([r["step_s"] for r in runs[k]]) for k in IMPLS)
            ours_mb, trl_mb = (median([r["peak_rss_mb"] for r in runs[k]]) for k in ("ours", "trl"))
            tokens = {k: runs[k][0]["rollout_tokens"] for k in runs}
            if len(set(tokens.values())) != 1:
                raise RuntimeError(f"unequal work: rollout tokens per step {tokens}")
            rows.append([
                beta, tokens["ours"], ours_s, trl_s, median(ratios), median(cpu_ratios), gen_share["ours"],
                gen_share["trl"], median(rest_ratios), ours_mb, trl_mb, ours_mb / trl_mb, trl_reuse_s,
                median(same_allocator),
            ])  # fmt: skip
            records.append({"kl_beta": beta, "workload": work.__dict__, "ratio_per_round": ratios,
                            "cpu_ratio_per_round": cpu_ratios, "same_allocator_ratio_per_round": same_allocator,
                            "runs": runs})  # fmt: skip
    table = print_table(
        f"Ours (game: grpo) vs TRL GRPOTrainer, CPU, 1 thread, P={cli.prompts} N={cli.generations} "
        f"T={cli.max_new_tokens}, median of {cli.rounds} alternating rounds",
        ["β", "tokens/step", "ours s/step", "TRL s/step", "ours/TRL wall", "ours/TRL CPU",
         "ours generate share", "TRL generate share", "ours/TRL CPU outside generate", "ours peak MB",
         "TRL peak MB", "ours/TRL RSS", "TRL, our allocator setting, s/step", "ours/that TRL wall"],
        rows,
    )  # fmt: skip
    import trl

    default = (cli.prompts, cli.generations, cli.max_new_tokens) == (2, 4, 32)
    name = "vs_trl" if default else f"vs_trl_p{cli.prompts}_n{cli.generations}_t{cli.max_new_tokens}"
    write_json(name, {"trl": trl.__version__, "table": table, "results": records}, cli.results_dir)


if __name__ == "__main__":
    if not worker_main(run):
        main()
