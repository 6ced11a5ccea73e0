"""Each speed lever of the update and the rollout, off against on, in one process (issue 15's table).

One ``AgonModule`` (the same tiny Qwen3 and workload as ``bench_vs_trl.py``, one thread) plays
and updates repeatedly outside a Trainer; each lever is switched off and on in alternation and
the process CPU time of the part it touches (``play``: sampling, verifying; ``update``: the
forward, backward and optimizer step) is compared, median over the repeats.

    python -m benchmarks.bench_levers                                         # P=2 N=4 T=32
    python -m benchmarks.bench_levers --prompts 16 --generations 8 --max-new-tokens 80 --repeats 2
    python -m benchmarks.bench_levers --game agon --beta 0.04
    python -m benchmarks.bench_levers --allocator --prompts 16 --generations 8 --max-new-tokens 80

``--allocator`` compares glibc's defaults with :func:`agon_lightning.infra.allocator.reuse_freed_memory`,
which is process-wide and cannot be switched back: fresh processes alternate instead, each
reporting the CPU time and the minor page faults of its updates.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch

from benchmarks.common import (
    LEARNING_RATE,
    LORA_TARGETS,
    Workload,
    add_results_dir,
    build_model_dir,
    coin_verifier,
    make_problems,
    median,
    print_table,
    single_thread,
    spawn,
    work_config,
    worker_main,
    workload_from,
    write_json,
)

MODULE = "benchmarks.bench_levers"


def build(work: Workload, game: str) -> Any:
    """An ``AgonModule`` whose ``update`` runs without a Trainer (plain backward, clipping, step)."""
    from agon_lightning.adapters.policy import LoraOptions
    from agon_lightning.game.prompts import Prompts
    from agon_lightning.rollout.hf import HFRollout
    from agon_lightning.training.module import AgonModule, GRPOOptions

    torch.manual_seed(work.seed)
    module = AgonModule(
        model_name_or_path=str(build_model_dir(Path(tempfile.mkdtemp()), work)), game=game,
        lora=LoraOptions(r=work.lora_r, alpha=2 * work.lora_r, target_modules=LORA_TARGETS),
        grpo=GRPOOptions(num_generations=work.generations, kl_beta=work.kl_beta),
        rollout=HFRollout(max_new_tokens=work.max_new_tokens), verifier=coin_verifier(),
        prompts=Prompts(chat_template=False), validate_at_start=False,
        optimizer=lambda params: torch.optim.AdamW(params, lr=LEARNING_RATE, weight_decay=0.0),
    )  # fmt: skip
    module.configure_model()
    optimizer = module.configure_optimizers()
    params = [p for group in optimizer.param_groups for p in group["params"]]
    module.optimizers = lambda: optimizer
    module.lr_schedulers = lambda: None
    module.manual_backward = lambda loss: loss.backward()
    module.clip_gradients = lambda opt, **kwargs: torch.nn.utils.clip_grad_norm_(params, 1.0)
    strategy = type(
        "Strategy", (), {"reduce_boolean_decision": staticmethod(lambda decision, all=True: decision)}
    )
    module._trainer = type("Trainer", (), {"strategy": strategy()})()  # all that update asks of a trainer
    return module


def levers(module: Any) -> dict[str, tuple[Callable[[bool], contextlib.AbstractContextManager], str]]:
    """Lever name → (context that sets it off or on, the part it touches)."""
    from agon_lightning.adapters import fast_lora
    from agon_lightning.adapters import policy as policy_module
    from agon_lightning.rollout import decode_loop as decode
    from agon_lightning.rollout.hf import HFRollout

    @contextlib.contextmanager
    def attribute(owner: Any, name: str, value: Any, on: bool) -> Iterator[None]:
        original = owner.__dict__[name]
        if not on:
            setattr(owner, name, value)
        try:
            yield
        finally:
            setattr(owner, name, original)

    @contextlib.contextmanager
    def fused(on: bool) -> Iterator[None]:
        if not on:
            fast_lora.uninstall(module.policy)
        try:
            yield
        finally:
            fast_lora.install(module.policy)

    def on_generate(setting: Callable[[bool], contextlib.AbstractContextManager]) -> Any:
        """``setting`` measured where it acts: on the ``generate`` path, our decode loop off."""

        @contextlib.contextmanager
        def both(on: bool) -> Iterator[None]:
            with attribute(module.rollout, "fused_decode", False, False), setting(on):
                yield

        return both

    def multinomial(probs: torch.Tensor) -> torch.Tensor:
        return torch.multinomial(probs, 1).squeeze(1)

    return {
        "our decode loop instead of generate": (
            lambda on: attribute(module.rollout, "fused_decode", False, on), "play"
        ),
        "decode loop: one uniform per row (inverse CDF) instead of torch.multinomial": (
            lambda on: attribute(decode, "draw", multinomial, on), "play"
        ),
        "generate: sampling with the adapter merged": (
            on_generate(lambda on: attribute(module.rollout, "merge_adapter", False, on)), "play"
        ),
        "generate: one prefill per prompt": (
            on_generate(lambda on: attribute(HFRollout, "_shared_prefill", staticmethod(lambda *a: {}), on)), "play"
        ),
        "fused LoRA forward (addmm)": (fused, "update"),
        "shared prompt tokens in the update": (
            lambda on: attribute(policy_module, "shared_prefixes", lambda *a: None, on), "update"
        ),
        "adapters off by flag (KL reference)": (
            lambda on: attribute(policy_module, "adapters_disabled", _never, on), "update"
        ),
    }  # fmt: skip


@contextlib.contextmanager
def _never(model: Any) -> Iterator[bool]:
    """``adapters_disabled`` that declines: ``base_only`` falls back to PEFT's ``disable_adapter()``."""
    yield False


def step_parts(module: Any, problems: list[Any], n: int) -> tuple[float, float]:
    """CPU seconds of one ``play`` and one ``update``."""
    from agon_lightning.training.grpo import group_advantages

    start = time.process_time()
    record = module.play(problems)
    played = time.process_time()
    for role in record.roles:
        role.advantages, _ = group_advantages(role.rewards + 0.1 * torch.randn(len(role.rewards)), n)
    module.update(record)
    return played - start, time.process_time() - played


def allocator_worker(config: dict[str, Any]) -> dict[str, Any]:
    """One process: the allocator setting or not, then play and update ``steps`` times after a warm-up."""
    import resource

    from agon_lightning.infra.allocator import reuse_freed_memory

    applied = reuse_freed_memory() if config["reuse"] else False
    work = workload_from(config)
    module = build(work, config["game"])
    problems = make_problems(work.prompts, work.seed)
    updates, faults = [], []
    for i in range(work.steps + 1):
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        _, update = step_parts(module, problems, work.generations)
        if i:
            updates.append(update)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
    return {"applied": applied, "update_s": median(updates), "faults": median(faults)}


def compare_allocators(work: Workload, game: str, rounds: int) -> dict[str, Any]:
    """Fresh processes, alternating glibc's defaults and ``reuse_freed_memory``; update CPU and faults."""
    runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
    for _ in range(rounds):
        for reuse in (False, True):
            runs[reuse].append(spawn(MODULE, work_config(work, game=game, reuse=reuse)))
    if not all(r["applied"] for r in runs[True]):
        raise RuntimeError("reuse_freed_memory() did not take effect on this machine")
    ratios = [b["update_s"] / a["update_s"] for a, b in zip(runs[False], runs[True])]
    rows = [
        [label, 1e3 * median([r["update_s"] for r in runs[k]]), median([r["faults"] for r in runs[k]])]
        for label, k in (("glibc defaults", False), ("reuse_freed_memory()", True))
    ]
    table = print_table(
        f"Allocator, {game}, P={work.prompts} N={work.generations} T={work.max_new_tokens} β={work.kl_beta}: "
        f"update CPU ms and minor page faults per update, median of {rounds} process pairs × {work.steps} "
        f"steps; per-pair ratio median {median(ratios):.3f} ({', '.join(f'{r:.2f}' for r in ratios)})",
        ["allocator", "update CPU ms", "page faults"],
        rows,
    )
    return {"table": table, "ratio_per_pair": ratios, "runs": {"default": runs[False], "reuse": runs[True]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--game", choices=["grpo", "agon"], default="grpo")
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=32)
    parser.add_argument("--beta", type=float, default=0.0)
    parser.add_argument("--repeats", type=int, default=6, help="off/on pairs per lever (after one warm-up)")
    parser.add_argument("--allocator", action="store_true", help="only the allocator A/B, in fresh processes")
    add_results_dir(parser)
    cli = parser.parse_args()
    single_thread()
    work = Workload(
        prompts=cli.prompts, generations=cli.generations, max_new_tokens=cli.max_new_tokens, kl_beta=cli.beta
    )
    if cli.allocator:
        work = Workload(**{**work.__dict__, "steps": 3})
        result = compare_allocators(work, cli.game, cli.repeats)
        write_json(f"levers_allocator_{cli.game}", {"workload": work.__dict__, **result}, cli.results_dir)
        return
    module = build(work, cli.game)
    problems = make_problems(work.prompts, work.seed)
    rows = []
    for name, (setting, part) in levers(module).items():
        if "KL" in name and work.kl_beta == 0:
            continue
        times: dict[bool, list[float]] = {False: [], True: []}
        for i in range(cli.repeats + 1):
            for on in (False, True):
                with setting(on):
                    play, update = step_parts(module, problems, work.generations)
                if i:  # the first pair warms up
                    times[on].append(play if part == "play" else update)
        off, on = (1e3 * median(times[k]) for k in (False, True))
        rows.append([name, part, off, on, on / off])
    table = print_table(
        f"Levers, {cli.game}, P={work.prompts} N={work.generations} T={work.max_new_tokens} β={work.kl_beta}, "
        f"CPU ms of the part, median of {cli.repeats} alternating pairs",
        ["lever", "part", "off ms", "on ms", "on/off"],
        rows,
    )
    results = [dict(zip(("lever", "part", "off_ms", "on_ms", "on_off"), row)) for row in rows]
    write_json(
        f"levers_{cli.game}",
        {"workload": work.__dict__, "repeats": cli.repeats, "table": table, "results": results},
        cli.results_dir,
    )


if __name__ == "__main__":
    if not worker_main(allocator_worker):
        main()
