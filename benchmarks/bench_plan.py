"""``agon plan``'s estimate against measured peaks: the benchmarks' recorded CPU runs.

Each measured run (a fresh process, peak RSS) is predicted from its own workload with
:mod:`agon_lightning.infra.plan` (strategy ``single``), plus the process's RSS before the model
was loaded (``train_start_rss_mb``: Python, torch and the libraries), and the error is
reported. Re-run the measurements with ``python -m benchmarks.bench_vs_trl`` (tiny shape) and
``python -m benchmarks.bench_scale --vs-trl`` (Qwen3-0.6B).

    python -m benchmarks.bench_plan
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.common import (
    RESULTS_DIR,
    Workload,
    add_results_dir,
    make_problems,
    median,
    model_config,
    print_table,
    write_json,
)

SOURCES = {"vs_trl": "tiny Qwen3 (benchmark shape)", "scale_vs_trl_qwen3-0.6b": "Qwen3-0.6B architecture"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--measured-dir", type=Path, default=RESULTS_DIR, help="folder holding the measured runs' JSON files"
    )
    add_results_dir(parser)
    cli = parser.parse_args()
    from agon_lightning.infra.plan import Run, Shape, parts, peak_bytes
    from agon_lightning.infra.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    rows, records = [], []
    for name, label in SOURCES.items():
        data = json.loads((cli.measured_dir / f"{name}.json").read_text())
        record = data["results"][0] if "results" in data else data
        work = Workload(**record["workload"])
        runs = [r for r in (record["runs"]["ours"] if isinstance(record["runs"], dict) else record["runs"])
                if r.get("impl", "ours") == "ours"]  # fmt: skip
        shape = Shape.of(model_config(work, tokenizer))
        prompt = max(
            len(tokenizer(p.question, add_special_tokens=False)["input_ids"]) for p in make_problems(8)
        )
        run = Run(prompts=work.prompts, generations=work.generations, prompt_tokens=prompt,
                  new_tokens=work.max_new_tokens, dtype="float32", rank=work.lora_r, roles=1)  # fmt: skip
        predicted = peak_bytes(parts(shape, run, "single", 1)) / 2**20 + median(
            [r["train_start_rss_mb"] for r in runs]
        )
        measured = median([r["peak_rss_mb"] for r in runs])
        rows.append([label, work.prompts, work.generations, work.max_new_tokens, measured, predicted,
                     100 * (predicted - measured) / measured])  # fmt: skip
        records.append(
            {"source": name, "workload": work.__dict__, "measured_mb": measured, "predicted_mb": predicted}
        )
    table = print_table(
        "agon plan against measured peak RSS (CPU, fp32, game: grpo, one process)",
        ["model", "P", "N", "T", "measured MB", "predicted MB", "error %"], rows,
    )  # fmt: skip
    write_json("plan_check", {"table": table, "results": records}, cli.results_dir)


if __name__ == "__main__":
    main()
