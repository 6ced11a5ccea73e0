"""How far the sampler's policy is from the trainer's, per path and dtype, now and at an older commit.

After one real Agon step of the shipped tiny model (Adam, lr 1e-4), 32 completions of fixed
length (the stop token is set to an id outside the vocabulary, so no row stops early and no
EOS is masked) are sampled with the updated adapter (``alpha`` active, as a training step samples)
and 32 with the base (adapters off). The sampler's log-prob of each drawn token is read from
the probabilities it drew from (``decode.draw`` for the decode loop, ``torch.multinomial`` for
``generate``), so the same measurement runs on any commit; the trainer's is the module's own
log-prob pass. The mismatch is the mean ``|log p_sampler − log p_trainer|`` per sampled token;
the bound that matters is the adapter rows' over the base rows' (bf16's own noise).

    python -m benchmarks.bench_sampler_precision
    python -m benchmarks.bench_sampler_precision --against main~3    # before/after, side by side

``--against`` checks the revision out into a temporary ``git worktree`` and runs the same
worker there with that revision's package on the path.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
WORKER_FLAG = "--worker"
PATHS = ("decode_loop", "generate")
DTYPES = ("float32", "bfloat16")
TIMING_REPEATS = 3  # sampling time: the best of this many identical calls


# ---------------------------------------------------------------------------- the worker (any revision)
def measure(dtype: str, new_tokens: int, seed: int) -> dict[str, Any]:
    """One process: train a step in ``dtype``, then the mismatch of each path for adapter and base rows."""
    import lightning as L
    import torch

    from agon_lightning import decode
    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
    from agon_lightning.game.rewards import RoleRewards
    from agon_lightning.module import AgonModule, GRPOOptions
    from agon_lightning.policy import BASE_ADAPTER, generating
    from agon_lightning.rollout import HFRollout

    # The module that defines HFRollout (and calls stop_token_ids): ``agon_lightning.rollout`` in older
    # revisions, ``agon_lightning.rollout.hf`` now; patching the package would not reach it.
    rollout_module = sys.modules[HFRollout.__module__]
    from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

    torch.set_num_threads(1)

    class RankReward:
        def __call__(self, outcomes):
            n = len(outcomes.draft.correct)
            return RoleRewards(draft=torch.arange(n).float(), challenge=torch.arange(n).flip(0).float())

    module = AgonModule(
        model_name_or_path="agon:tiny-qwen3", dtype=dtype, grpo=GRPOOptions(num_generations=4),
        rollout=HFRollout(max_new_tokens=24), verifier=ReasoningGymVerifier(),
        optimizer=lambda params: torch.optim.Adam(params, lr=1e-4), validate_at_start=False,
    )  # fmt: skip
    module.reward = RankReward()
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        default_root_dir=tempfile.mkdtemp(),
    )  # fmt: skip
    torch.manual_seed(seed)
    trainer.fit(module, ReasoningGymDataModule(train_size=4, val_size=2, batch_size=4, val_batch_size=2))
    never = module.policy.config.vocab_size  # an id no row can draw: every completion runs to new_tokens
    rollout_module.stop_token_ids = lambda model, tokenizer: [never]
    prompts = [module.prompts.draft_prompt(module.tokenizer, p)
               for p in ReasoningGymDataModule(train_size=4, val_size=2, data_seed=3).train_problems[:4]]  # fmt: skip

    drawn: list[Any] = []

    def record(probs: Any, token: Any) -> None:
        p = probs.double().gather(-1, token.reshape(-1, 1)).squeeze(1) / probs.double().sum(-1)
        drawn.append(p.log().float())

    draw, multinomial = decode.draw, torch.multinomial

    def recording_draw(probs):
        token = draw(probs)
        record(probs, token)
        return token

    def recording_multinomial(probs, num_samples, *args, **kwargs):
        token = multinomial(probs, num_samples, *args, **kwargs)
        record(probs, token)
        return token

    decode.draw, torch.multinomial = recording_draw, recording_multinomial
    out: dict[str, Any] = {}
    for path in PATHS:
        rollout = HFRollout(max_new_tokens=new_tokens, fused_decode=path == "decode_loop")
        for rows in ("adapter", "base"):
            seconds = float("inf")
            for _ in range(TIMING_REPEATS):  # the same draws each time; the last one is measured
                drawn.clear()
                torch.manual_seed(seed + 1)
                start = time.perf_counter()
                with torch.no_grad(), generating(module.policy):
                    if rows == "adapter":
                        module.policy.set_adapter("alpha")
                        rb = rollout.generate(module.policy, module.tokenizer, prompts, 8)
                    else:
                        rb = rollout.generate(module.policy, module.tokenizer, prompts, 8,
                                              adapter_names=[BASE_ADAPTER] * len(prompts))  # fmt: skip
                seconds = min(seconds, time.perf_counter() - start)
            sampler = torch.stack(drawn, dim=1)[:, : rb.completion_ids.shape[1]]  # [B, T]
            with torch.no_grad():
                from agon_lightning.training.update import policy_logprobs

                adapter = "alpha" if rows == "adapter" else None
                trainer_logp = policy_logprobs(module, adapter, rb, slice(0, len(rb)))[0]
            mask = rb.completion_mask.float()
            gap = float(((sampler - trainer_logp).abs() * mask).sum() / mask.sum())
            reported = getattr(rb, "logprobs", None)
            same = None if reported is None else float(((reported - sampler).abs() * mask).max())
            out[f"{path}/{rows}"] = {"mismatch": gap, "sample_s": seconds, "reported_vs_drawn": same}
    return out


# ---------------------------------------------------------------------------- the driver
def run_worker(package_root: Path, config: dict[str, Any]) -> dict[str, Any]:
    """This file as a script in a fresh process, with ``package_root``'s ``agon_lightning`` on the path."""
    env = {**os.environ, "PYTHONPATH": str(package_root), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), WORKER_FLAG, json.dumps(config)],
                          capture_output=True, text=True, env=env, cwd=package_root, timeout=1800)  # fmt: skip
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        raise RuntimeError(f"worker failed at {package_root} on {config}:\n{proc.stderr[-3000:]}")
    return json.loads(lines[-1][len("RESULT ") :])


def main() -> None:
    from benchmarks.common import add_results_dir, print_table, write_json

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", help="an older git revision to measure side by side")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtypes", nargs="+", default=list(DTYPES), choices=DTYPES)
    add_results_dir(parser)
    cli = parser.parse_args()
    trees = {"now": ROOT}
    with tempfile.TemporaryDirectory() as tmp:
        if cli.against:
            old = Path(tmp) / "against"
            subprocess.run(["git", "worktree", "add", "--detach", str(old), cli.against], cwd=ROOT, check=True,
                           capture_output=True)  # fmt: skip
            trees = {cli.against: old, "now": ROOT}
        try:
            results: dict[str, dict[str, Any]] = {}
            for dtype in cli.dtypes:  # revisions side by side within each dtype
                for name, tree in trees.items():
                    results[f"{name}/{dtype}"] = run_worker(tree, {"dtype": dtype, "new_tokens": cli.new_tokens,
                                                                   "seed": cli.seed})  # fmt: skip
                    print(f"{name} {dtype}: {results[f'{name}/{dtype}']}", flush=True)
        finally:
            if cli.against:
                subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, check=False)
    rows = []
    for key, result in results.items():
        name, dtype = key.split("/")
        for path in PATHS:
            a, b = result[f"{path}/adapter"], result[f"{path}/base"]
            rows.append([name, dtype, path, a["mismatch"], b["mismatch"], a["mismatch"] / b["mismatch"]
                         if b["mismatch"] else float("nan"), a["sample_s"]])  # fmt: skip
    table = print_table(
        f"Sampler vs trainer log-prob mismatch after one update (tiny Qwen3, 32 samples × {cli.new_tokens} tokens)",
        ["revision", "dtype", "path", "adapter rows", "base rows", "adapter / base", "adapter sampling s (best of 3)"], rows,
    )  # fmt: skip
    write_json(
        "sampler_precision", {"against": cli.against, "table": table, "results": results}, cli.results_dir
    )


if __name__ == "__main__":
    if WORKER_FLAG in sys.argv:
        config = json.loads(sys.argv[sys.argv.index(WORKER_FLAG) + 1])
        print(
            "RESULT " + json.dumps(measure(config["dtype"], config["new_tokens"], config["seed"])), flush=True
        )
    else:
        main()
