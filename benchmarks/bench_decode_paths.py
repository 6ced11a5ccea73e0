"""Generated tokens per second of the HF path's three ways to decode, side by side, on this machine's device.

The paths (``HFRollout``): the decode loop (``loop``: a shrinking batch and a growing cache, the
CPU's best), the static-shape loop (``static``: a fixed cache, every row to the end;
:mod:`agon_lightning.rollout.static_decode`), and the static loop with its step compiled
(``compiled``: ``torch.compile(mode="reduce-overhead")``, CUDA graphs on a GPU; on a CPU the mode
has no graphs to record and compiles fused kernels). Each row is one adapter's greedy decoding of
``--rows`` prompts for ``--max-new-tokens`` tokens (EOS suppressed, so every path does the same
work), both adapters of the model loaded; rounds alternate the paths, and the first call of each
path (compilation) is timed apart. Each path's tokens are compared with the loop's.

    python -m benchmarks.bench_decode_paths                                   # tiny Qwen3, this device
    python -m benchmarks.bench_decode_paths --arch qwen3-0.6b --rows 16 128   # on a GPU: issue 53's shape
    python -m benchmarks.bench_decode_paths --smoke                           # seconds

Issue 53's targets (one H200, Qwen3-0.6B, bf16): at least 10× 517 generated tokens/s at 16 rows,
at least 20,000 at 128. Writes ``decode_paths.json`` (``--results-dir``); on a machine without a
GPU the file says the GPU figures were not measured.
"""

from __future__ import annotations

import argparse
import time

import torch

from benchmarks.common import add_results_dir, print_table, write_json

PATHS = ("loop", "static", "compiled")
GPU_TARGETS = {16: 5170.0, 128: 20000.0}  # generated tokens/s on one H200 (issue 53)
QWEN3_06B = dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                 num_key_value_heads=8, head_dim=128)  # fmt: skip
TINY = dict(hidden_size=128, intermediate_size=512, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, head_dim=32)  # fmt: skip


def build(arch: str, device: torch.device, dtype: torch.dtype, max_new_tokens: int):
    """A random Qwen3 of ``arch``'s shape with adapters ``alpha`` and ``beta`` (noise in B), and the character tokenizer.

    Its generation config holds EOS back for ``max_new_tokens``: every row decodes them all, so
    each path does the same work."""
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    from agon_lightning.adapters.policy import LoraOptions, attach_adapters
    from agon_lightning.infra.tiny import build_tokenizer

    tokenizer = build_tokenizer()
    shape = QWEN3_06B if arch == "qwen3-0.6b" else TINY
    torch.manual_seed(0)
    config = Qwen3Config(vocab_size=len(tokenizer), max_position_embeddings=4096, tie_word_embeddings=True,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id, **shape)  # fmt: skip
    model = Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        min_new_tokens=max_new_tokens,
    )
    policy = attach_adapters(model, ("alpha", "beta"), LoraOptions(r=16, alpha=32))
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.01)
    return policy, tokenizer


def rollout_for(path: str, max_new_tokens: int, compile_mode: str):
    from agon_lightning.rollout.hf import HFRollout

    if path == "loop":
        return HFRollout(max_new_tokens=max_new_tokens)
    return HFRollout(
        max_new_tokens=max_new_tokens,
        static_cache=True,
        compile_mode=compile_mode if path == "compiled" else None,
    )


def timed(policy, tokenizer, rollout, prompts, device) -> tuple[float, torch.Tensor]:
    from agon_lightning.adapters.policy import sample_with

    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    batch = sample_with(policy, rollout, tokenizer, "alpha", prompts, 1, greedy=True)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start, batch.completion_ids


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--arch", choices=("tiny", "qwen3-0.6b"), default="tiny")
    parser.add_argument("--rows", type=int, nargs="+", default=[16, 128])
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    parser.add_argument("--smoke", action="store_true", help="tiny model, 2 and 4 rows, 8 tokens, 1 round")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    if args.smoke:
        args.arch, args.rows, args.max_new_tokens, args.rounds = "tiny", [2, 4], 8, 1
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    compile_mode = "reduce-overhead" if device.type == "cuda" else "default"
    policy, tokenizer = build(args.arch, device, dtype, args.max_new_tokens)
    results: list[dict] = []
    for rows in args.rows:
        prompts = [f"{17 + 3 * i} + {40 + i} =" for i in range(rows)]
        first: dict[str, float] = {}
        times: dict[str, list[float]] = {p: [] for p in args.paths}
        tokens: dict[str, torch.Tensor] = {}
        for path in args.paths:  # the first call: compilation, cache allocation
            first[path], tokens[path] = timed(policy, tokenizer, rollout_for(path, args.max_new_tokens, compile_mode),
                                              prompts, device)  # fmt: skip
        for _ in range(args.rounds):
            for path in args.paths:
                seconds, _ = timed(
                    policy, tokenizer, rollout_for(path, args.max_new_tokens, compile_mode), prompts, device
                )
                times[path].append(seconds)
        for path in args.paths:
            best = sorted(times[path])[len(times[path]) // 2]
            generated = rows * tokens[path].shape[1]
            results.append({
                "rows": rows, "path": path, "first_call_s": first[path], "median_s": best,
                "tokens_per_s": generated / best,
                "same_tokens_as_loop": bool(torch.equal(tokens[path], tokens["loop"])) if "loop" in tokens else None,
            })  # fmt: skip
    loop_rate = {r["rows"]: r["tokens_per_s"] for r in results if r["path"] == "loop"}
    table = print_table(
        f"Greedy decoding, {args.arch}, {device.type}, {args.max_new_tokens} new tokens, median of {args.rounds}",
        ["rows", "path", "first call, s", "median, s", "tokens/s", "× loop", "same tokens"],
        [[r["rows"], r["path"], f"{r['first_call_s']:.2f}", f"{r['median_s']:.3f}", f"{r['tokens_per_s']:.0f}",
          f"{r['tokens_per_s'] / loop_rate[r['rows']]:.2f}" if r["rows"] in loop_rate else "—",
          r["same_tokens_as_loop"]] for r in results],
    )  # fmt: skip
    gpu = (
        {"measured": True, "targets_tokens_per_s": GPU_TARGETS}
        if device.type == "cuda"
        else {"measured": False, "why": "no GPU on this machine: the GPU targets were not measured"}
    )
    write_json("decode_paths", {"device": str(device), "arch": args.arch, "dtype": str(dtype),
                                     "compile_mode": compile_mode, "max_new_tokens": args.max_new_tokens,
                                     "rounds": args.rounds, "results": results, "table": table, "gpu": gpu},
               args.results_dir)  # fmt: skip


if __name__ == "__main__":
    main()
