"""Sampled-token log-probs and entropy with a 151,936-token vocabulary: chunked against naive.

The naive way materialises ``[B, T, V]`` logits, takes ``log_softmax`` and keeps both for
the backward: memory grows with batch × length × vocabulary. ``token_logprobs`` projects
one chunk of tokens at a time and recomputes it in the backward, so its peak should stay at
one chunk's ``[chunk, V]`` logits, whatever the length. Both run forward and backward
(``d logp / d hidden``; the output embedding is frozen, as in training), with a tiny hidden
size so the test fits a CPU. Each point is a fresh process; memory is its peak RSS above the
RSS it had once the inputs existed. Naive points whose estimated peak exceeds
``--max-naive-gb`` are not run (the machine is shared): the table says so.

    python -m benchmarks.bench_logprobs
    python -m benchmarks.bench_logprobs --lengths 128 256 --vocab 32768
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch

from benchmarks.common import (
    add_results_dir,
    current_rss_mb,
    median,
    peak_rss_mb,
    print_table,
    spawn,
    worker_main,
    write_json,
)

MODULE = "benchmarks.bench_logprobs"
QWEN3_VOCAB = 151_936
FLOAT_BYTES = 4


def naive_logprobs(
    hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Full ``[B, T, V]`` logits, ``log_softmax``, gather; entropy from the full distribution."""
    logp_all = torch.log_softmax(hidden @ weight.t(), dim=-1)  # [B, T, V]
    with torch.no_grad():
        entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1), entropy


def run(config: dict[str, Any]) -> dict[str, Any]:
    from agon_lightning.training.grpo import token_logprobs

    torch.manual_seed(0)
    batch, length, vocab, hidden_size = config["batch"], config["length"], config["vocab"], config["hidden"]
    weight = torch.randn(vocab, hidden_size) / hidden_size**0.5  # frozen, like the tied embedding
    hidden = torch.randn(batch, length, hidden_size, requires_grad=True)
    targets = torch.randint(0, vocab, (batch, length))
    before = current_rss_mb()
    t0, c0 = time.perf_counter(), time.process_time()
    if config["method"] == "naive":
        logp, entropy = naive_logprobs(hidden, weight, targets)
    else:
        logp, entropy = token_logprobs(hidden, weight, targets, chunk_size=config["chunk"])
    t1 = time.perf_counter()
    logp.sum().backward()
    t2, c2 = time.perf_counter(), time.process_time()
    assert hidden.grad is not None and torch.isfinite(hidden.grad).all() and torch.isfinite(entropy).all()
    return {
        **config,
        "forward_s": t1 - t0,
        "backward_s": t2 - t1,
        "cpu_s": c2 - c0,
        "peak_above_inputs_mb": peak_rss_mb() - before,
        "checksum": float(logp.detach().double().sum()),
    }


def naive_estimate_gb(batch: int, length: int, vocab: int) -> float:
    """Logits, log-softmax, its exp (for entropy) and the backward's gradient: four ``[B, T, V]`` floats."""
    return 4 * batch * length * vocab * FLOAT_BYTES / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024])
    parser.add_argument("--vocab", type=int, default=QWEN3_VOCAB)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument(
        "--chunk", type=int, default=1024, help="tokens per chunk (GRPOOptions.logprob_chunk_size)"
    )
    parser.add_argument(
        "--max-naive-gb", type=float, default=6.0, help="skip naive points estimated above this"
    )
    parser.add_argument("--rounds", type=int, default=1)
    add_results_dir(parser)
    cli = parser.parse_args()
    rows, records = [], []
    for length in cli.lengths:
        base = {
            "batch": cli.batch,
            "length": length,
            "vocab": cli.vocab,
            "hidden": cli.hidden,
            "chunk": cli.chunk,
        }
        results: dict[str, list[dict[str, Any]]] = {"chunked": [], "naive": []}
        run_naive = naive_estimate_gb(cli.batch, length, cli.vocab) <= cli.max_naive_gb
        for _ in range(cli.rounds):
            for method in ("chunked", "naive") if run_naive else ("chunked",):
                results[method].append(spawn(MODULE, {**base, "method": method}))
        row: list[Any] = [f"{cli.batch}×{length}"]
        for method in ("chunked", "naive"):
            if results[method]:
                rs = results[method]
                row += [median([r["peak_above_inputs_mb"] for r in rs]), median([r["forward_s"] for r in rs]),
                        median([r["backward_s"] for r in rs]), median([r["cpu_s"] for r in rs])]  # fmt: skip
            else:
                est = naive_estimate_gb(cli.batch, length, cli.vocab)
                row += [f"not run (≈{est:.0f} GB est.)", "–", "–", "–"]
        if results["naive"]:
            gap = abs(results["naive"][0]["checksum"] - results["chunked"][0]["checksum"])
            row.append(f"{gap:.1e}")
        else:
            row.append("–")
        rows.append(row)
        records.append({"length": length, "results": results})
    table = print_table(
        f"Sampled-token log-probs + entropy, forward and backward, V={cli.vocab:,}, hidden {cli.hidden}, "
        f"chunk {cli.chunk} tokens",
        ["B×T", "chunked peak MB", "chunked fwd s", "chunked bwd s", "chunked CPU s", "naive peak MB", "naive fwd s",
         "naive bwd s", "naive CPU s", "|Σlogp| gap"],
        rows,
    )  # fmt: skip
    write_json("logprobs", {"table": table, "results": records}, cli.results_dir)


if __name__ == "__main__":
    if not worker_main(run):
        main()
