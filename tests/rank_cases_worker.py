"""Every rank-dependent case, one ``fit`` each, in one launch of 2 gloo processes under a strategy.

Launched by tests/test_rank_dependent.py and scripts/check_strategies.py --rank-cases::

    python tests/rank_cases_worker.py STRATEGY OUT_DIR MODEL_DIR [CASE ...]

Lightning's launcher re-runs this command for rank 1 at the first ``fit``; later fits in the
same processes join the process group that stands. Each case makes one thing differ between
the ranks (:data:`CASES`); a :class:`~call_trace.CallTrace` records each step's collectives
and ZeRO-3-hooked module calls and compares the ranks at the step's end. Each rank saves, per
case: the adapters after the run, steps taken and skipped, the first divergence (or ``None``),
the validation history, and the error line if the case stopped.

Process start and DeepSpeed's first initialisation dominate, so the cases share the launch and
the shapes are the smallest that still do the thing: 2 steps, 1 problem per rank, N = 4 (with 2
a group of hashed verdicts is often all alike, and a case then trains nothing).
"""

from __future__ import annotations

import os
import sys
import time
import traceback
import zlib
from pathlib import Path

import lightning as L
import torch
import torch.distributed as dist
from call_trace import CallTrace
from ddp_worker import strategy
from reference import SGDMomentum
from scripted import ScriptedRollout
from torch.utils.data import DataLoader

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.cli.game import release_process_group
from agon_lightning.data.base import collate_problems
from agon_lightning.game.rewards import CompetitiveReward
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.rollout import decode_loop
from agon_lightning.rollout.hf import HFRollout, RolloutBatch
from agon_lightning.strategies import full_tensors
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.verifiers.base import Verifier

CASES = {
    "lengths": "ranks sample different lengths (rank 1 decodes 4 more steps)",
    "prompt_lengths": "rank 0's prompts are short, rank 1's long",
    "zero_variance": "every group on rank 1 has zero reward variance",
    "no_answer": "every draft on rank 1 lacks an answer (empty summaries)",
    "nonfinite": "rank 1's loss is not finite at the first step",
    "uneven_last_batch": "3 problems per rank in batches of 2: the last batch holds 1",
    "val_not_divisible": "3 validation problems on 2 ranks",
    "old_act": "the decode loop calls the activation module per step, as it once did",
}
LORA = LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
GRPO = GRPOOptions(num_generations=4, loss_aggregation="seq_mean")
SGD = SGDMomentum(lr=0.5, momentum=0.5)
MAX_NEW = 6  # sampled tokens (the decode loop on the tiny model)
SCRIPTED = 24  # scripted completions: whole, so the texts of a group differ


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


class HashParity(Verifier):
    """Correct when a hash of the completion is even: a signal on any text, a random model's too.

    ``constant_on_rank1``: every verdict on rank 1 is False (its groups have zero variance).
    """

    def __init__(self, constant_on_rank1: bool = False) -> None:
        self.constant_on_rank1 = constant_on_rank1

    def verify(self, completion: str, problem: Problem) -> Verdict:
        if self.constant_on_rank1 and rank() == 1:
            return Verdict(correct=False)
        return Verdict(correct=zlib.crc32(completion.encode()) % 2 == 0)


class RankLengths(HFRollout):
    """The decode loop, with ``extra`` more new tokens on rank 1: the ranks decode different step counts."""

    def __init__(self, extra: int = 0) -> None:
        super().__init__(max_new_tokens=MAX_NEW)
        self.extra = extra

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        self.max_new_tokens = MAX_NEW + self.extra * rank()
        try:
            return super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)
        finally:
            self.max_new_tokens = MAX_NEW


class NoAnswerOnRank1(ScriptedRollout):
    """Scripted drafts; on rank 1 without their ``<answer>`` (nothing for the summary to carry)."""

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        out: RolloutBatch = super().generate(model, tokenizer, prompts, num_samples, greedy, adapter_names)
        if rank() == 1 and adapter_names is None and num_samples > 1:  # the drafts
            out.texts = [t.split("<answer>")[0] for t in out.texts]
        return out


class NaNOnRank1(CompetitiveReward):
    """Agon's reward; at the first step, one draft's reward on rank 1 is NaN (so is its loss)."""

    calls = 0

    def __call__(self, outcomes):
        rewards = super().__call__(outcomes)
        NaNOnRank1.calls += 1
        if rank() == 1 and NaNOnRank1.calls == 1:
            rewards.draft = rewards.draft.clone()
            rewards.draft[0] = float("nan")
        return rewards


def problems(n: int, long_on_odd: bool = False) -> list[Problem]:
    """``n`` problems; with ``long_on_odd`` the odd ones (rank 1's, unshuffled) have long questions."""
    out = []
    for i in range(n):
        q = f"{i} + {i} =" if not (long_on_odd and i % 2) else f"{i} + {i} + {i} + {i} + {i} + {i} + {i} ="
        out.append(Problem(q, "0"))
    return out


class ListData(L.LightningDataModule):
    """Fixed problem lists, unshuffled: under 2 ranks, rank r gets problems r, r+2, ..."""

    def __init__(self, train: list[Problem], val: list[Problem], batch_size: int) -> None:
        super().__init__()
        self.train, self.val, self.batch_size = train, val, batch_size

    def train_dataloader(self):
        return DataLoader(self.train, batch_size=self.batch_size, shuffle=False, collate_fn=collate_problems)

    def val_dataloader(self):
        return DataLoader(self.val, batch_size=1, shuffle=False, collate_fn=collate_problems)


def build(case: str, model_dir: str) -> tuple[AgonModule, ListData, dict]:
    """The module, the data and the trainer settings of one case."""
    rollout = ScriptedRollout(max_new_tokens=SCRIPTED)
    verifier: Verifier = HashParity()
    reward = CompetitiveReward()
    train, val, batch, trainer = problems(4), [], 1, {"max_epochs": 1, "limit_val_batches": 0}
    if case in ("lengths", "old_act"):
        rollout = RankLengths(extra=4)
    elif case == "prompt_lengths":
        rollout, train = RankLengths(), problems(4, long_on_odd=True)
    elif case == "zero_variance":
        verifier = HashParity(constant_on_rank1=True)
    elif case == "no_answer":
        rollout = NoAnswerOnRank1(max_new_tokens=SCRIPTED)
    elif case == "nonfinite":
        reward = NaNOnRank1()
    elif case == "uneven_last_batch":
        train, batch = problems(6), 2
    elif case == "val_not_divisible":
        rollout, train, val = RankLengths(), problems(2), problems(3)
        trainer = {"max_epochs": 1, "limit_val_batches": 2}
    module = AgonModule(
        model_name_or_path=model_dir, lora=LORA, grpo=GRPO, rollout=rollout, verifier=verifier, reward=reward,
        optimizer=SGD.factory, max_grad_norm=0.05, validate_at_start=False,
    )  # fmt: skip
    return module, ListData(train, val, batch), trainer


class Start(L.Callback):
    """The adapters as training starts (whole, on every rank)."""

    weights: dict = {}

    def on_train_start(self, trainer, pl_module):
        self.weights = full_tensors(pl_module.policy)


def run_case(case: str, name: str, model_dir: str, out: Path) -> dict:
    started = time.perf_counter()
    L.seed_everything(0, verbose=False)
    NaNOnRank1.calls = 0
    module, data, settings = build(case, model_dir)
    trace, start = CallTrace(), Start()
    plain = decode_loop.plain_activation
    if case == "old_act":  # the behaviour that crashed ZeRO-3: the activation module, called per step
        decode_loop.plain_activation = lambda act, hidden_act=None: act
    trainer = L.Trainer(
        accelerator="cpu", devices=2, strategy=strategy(name, 2, "file"), logger=False,
        enable_progress_bar=False, enable_model_summary=False, enable_checkpointing=False,
        default_root_dir=str(out / case), callbacks=[trace, start], num_sanity_val_steps=0, **settings,
    )  # fmt: skip
    error = None
    try:
        trainer.fit(module, data)
    except Exception as e:  # the case stops: its one line (every rank raises alike, or the test times out)
        error = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
        traceback.print_exc()
    finally:
        decode_loop.plain_activation = plain
    return {
        "weights": full_tensors(module.policy) if module.policy is not None else {},
        "start": start.weights,
        "steps": module.agon_step,
        "skipped": module.skipped_steps,
        "summaries": None if module.last_record is None else list(module.last_record.summaries or []),
        "divergence": trace.divergence,
        "compared": trace.steps,
        "counts": trace.counts,
        "history": [(s, dict(m)) for s, m in module.evaluator.history],
        "error": error,
        "seconds": time.perf_counter() - started,
    }


def run_cases(name: str, out: Path, model_dir: str, cases: list[str] | None = None) -> dict:
    """Every case (or ``cases``) under strategy ``name``; saves and returns this rank's results (``out/rankR.pt``)."""
    out.mkdir(parents=True, exist_ok=True)
    results = {case: run_case(case, name, model_dir, out) for case in (cases or CASES)}
    torch.save(results, out / f"rank{rank()}.pt")
    return results


def main() -> None:
    name, out, model_dir, *cases = sys.argv[1:]
    run_cases(name, Path(out), model_dir, cases)
    release_process_group()
    os.environ.pop("LOCAL_RANK", None)


if __name__ == "__main__":
    main()
