"""Sampling the next step's drafts during the update (``rollout.max_staleness``), on a fake engine.

The fake keeps its own "pushed" copy of the adapters like vLLM does: a version number that
moves at the first ``generate`` after ``on_weights_updated``. Its ``generate_ahead`` waits
until an optimizer step has finished, so a run that did not overlap the two would not get
past it. tests/test_vllm_rollout.py and tests/test_vllm_server.py run K = 1 on real engines.
"""

from __future__ import annotations

import math
import threading

import lightning as L
import pytest
import torch
from scripted import ScriptedRollout
from test_training_paths import ZeroIsRight
from torch.optim.optimizer import register_optimizer_step_post_hook

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.data.base import ProblemDataset, ResumableDataLoader, collate_problems
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.types import Problem
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.prefetch import too_stale, versions_behind
from agon_lightning.training.grpo import effective_sample_size, sampler_correction, tis_clip_fraction
from agon_lightning.training.module import AgonModule, GRPOOptions

P, N = 2, 2  # problems per step, drafts per problem


class FakeEngine(ScriptedRollout):
    """Scripted completions from "its own copy" of the adapters, with log-probs; every call logged."""

    keeps_own_weights = True

    def __init__(self, max_staleness: int = 0, fail_ahead: str | None = None) -> None:
        super().__init__(max_new_tokens=12)
        self._keep_staleness(max_staleness)
        self.fail_ahead = fail_ahead
        self.held = 0  # the version of the adapters this engine holds
        self.stale = False
        self.log: list[tuple] = []
        self.stepped = threading.Event()  # set by an optimizer step's end (the test's hook)
        self.overlapped: list[bool] = []

    def on_weights_updated(self, model, adapter_names):
        self.log.append(("updated", tuple(adapter_names)))
        self.stale = True
        self.stepped.clear()  # the next sampling ahead waits for the next step's optimizer step

    def generate(self, model, tokenizer, prompts, num_samples=1, greedy=False, adapter_names=None):
        if self.stale:  # a push, as vLLM's at the first generate after an update
            self.held, self.stale = self.held + 1, False
        self.log.append(("generate", self.held, threading.current_thread() is threading.main_thread()))
        return self._batch(model, tokenizer, prompts, num_samples)

    def generate_ahead(self, model, tokenizer, prompts, num_samples, adapter_names):
        assert not self.stale, "sampled ahead with adapters the engine does not hold yet"
        self.log.append(("ahead start", self.held, tuple(dict.fromkeys(adapter_names))))
        self.overlapped.append(self.stepped.wait(timeout=60))  # the update's optimizer step, meanwhile
        if self.fail_ahead:
            raise RuntimeError(self.fail_ahead)
        self.log.append(("ahead end", self.held))
        return self._batch(model, tokenizer, prompts, num_samples)

    def _batch(self, model, tokenizer, prompts, num_samples):
        batch = super().generate(model, tokenizer, prompts, num_samples)
        batch.logprobs = -1.0 * batch.completion_mask.float()
        return batch


def make_module(model_dir, rollout, tis_cap: float | None = 2.0) -> AgonModule:
    return AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=N, tis_cap=tis_cap), rollout=rollout, verifier=ZeroIsRight(),
        optimizer=lambda p: torch.optim.SGD(p, lr=0.5), validate_at_start=False,
    )  # fmt: skip


class Metrics(L.Callback):
    def __init__(self) -> None:
        self.rows: list[dict[str, float]] = []
        self.records = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.rows.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.records.append(pl_module.last_record)


def fit(module, steps, tmp_path, callbacks=(), ckpt_path=None):
    engine, metrics = module.rollout, Metrics()
    metrics.rollout_log = engine.log

    def stepped(optimizer, args, kwargs):
        engine.log.append(("optimizer step",))
        engine.stepped.set()

    hook = register_optimizer_step_post_hook(stepped)
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=steps, limit_val_batches=0, logger=False,
        enable_checkpointing=ckpt_path is not None or bool(callbacks), enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=str(tmp_path), callbacks=[metrics, *callbacks],
    )  # fmt: skip
    try:
        data = ReasoningGymDataModule(train_size=16, val_size=1, batch_size=P)
        trainer.fit(module, data, ckpt_path=ckpt_path)
    finally:
        hook.remove()
    return metrics


def background_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("agon-drafts")]


# ---------------------------------------------------------------- the pure pieces
def test_clip_fraction_and_effective_sample_size_by_hand():
    trainer = torch.tensor([[0.0, 0.0, 0.0, 0.0]])
    engine = torch.tensor([[0.0, -math.log(4.0), -math.log(1.5), 5.0]])  # ratios 1, 4, 1.5, e^-5
    mask = torch.tensor([[1, 1, 1, 0]])
    assert float(tis_clip_fraction(trainer, engine, 2.0, mask)) == pytest.approx(1 / 3)  # only the 4
    w = sampler_correction(trainer, engine, 2.0)  # 1, 2, 1.5 on the masked tokens
    assert float(effective_sample_size(w, mask)) == pytest.approx(4.5**2 / (3 * (1 + 4 + 2.25)))
    assert float(effective_sample_size(torch.full((2, 3), 0.7), torch.ones(2, 3))) == pytest.approx(1.0)
    near_one = 1 + 1e-7 * torch.randn(1, 4096, generator=torch.Generator().manual_seed(0))
    assert float(effective_sample_size(near_one, torch.ones(1, 4096))) <= 1.0  # never above 1 by rounding
    one_heavy = torch.tensor([[1e6, 1e-6, 1e-6, 1e-6]])
    assert float(effective_sample_size(one_heavy, torch.ones(1, 4))) == pytest.approx(0.25, rel=1e-4)
    assert float(effective_sample_size(torch.zeros(1, 2), torch.ones(1, 2))) == 0.0
    assert float(effective_sample_size(w, torch.zeros(1, 4))) == 1.0  # no tokens: nothing to correct
    assert float(tis_clip_fraction(trainer, engine, 2.0, torch.zeros(1, 4))) == 0.0


def test_versions_behind_and_too_stale():
    v = torch.tensor([3, 4, 5])
    assert versions_behind(v, 5).tolist() == [2, 1, 0]
    assert too_stale(v, 5, 1).tolist() == [True, False, False]
    assert too_stale(v, 5, 0).tolist() == [True, True, False]


def test_the_loader_shows_its_next_batch_without_handing_it_out():
    problems = [Problem(str(i), str(i)) for i in range(5)]
    loader = ResumableDataLoader(
        ProblemDataset(problems), batch_size=2, collate_fn=collate_problems, drop_last=True
    )
    assert loader.peek() is None  # not iterating
    it = iter(loader)
    first = next(it)
    assert [p.question for p in loader.peek()] == ["2", "3"]
    assert loader.peek() is loader.peek() and loader.state_dict()["batches"] == 1  # peeked is not handed out
    assert [p.question for p in next(it)] == ["2", "3"] and loader.state_dict()["batches"] == 2
    assert loader.peek() is None and [p.question for p in first] == ["0", "1"]
    with pytest.raises(StopIteration):
        next(it)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: FakeEngine(max_staleness=-1), "max_staleness must be an int >= 0 (0 = synchronous), got -1"),
        (
            lambda: HFRollout(max_staleness=1),
            "max_staleness=1 samples the next step's drafts while the update",
        ),
    ],
)
def test_a_bad_staleness_is_named(make, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_staleness_without_tis_cap_is_refused(tiny_model_dir):
    with pytest.raises(ValueError, match=r"rollout.max_staleness=1 trains on drafts .* grpo.tis_cap is null"):
        make_module(tiny_model_dir, FakeEngine(max_staleness=1), tis_cap=None)


# ---------------------------------------------------------------- the overlap, in a fit
def test_k0_samples_then_updates_in_the_main_thread_and_logs_no_staleness(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir, FakeEngine(max_staleness=0))
    metrics = fit(module, 3, tmp_path)
    kinds = [e[0] for e in module.rollout.log]
    # per step: drafts, challenges, one optimizer step, the engine told right after it
    assert kinds == ["generate", "generate", "optimizer step", "updated"] * 3
    assert all(main for kind, *rest in module.rollout.log if kind == "generate" for main in rest[1:])
    assert not any(k.startswith("rollout/") for k in metrics.rows[-1])
    assert {"train/tis_clip_fraction", "train/ess"} <= set(metrics.rows[-1])  # tis_cap is on
    assert module.policy_version == 3 and module.dropped_samples == 0


def test_k1_samples_the_next_drafts_during_the_update_one_version_behind(tiny_model_dir, tmp_path):
    engine = FakeEngine(max_staleness=1)
    module = make_module(tiny_model_dir, engine)
    metrics = fit(module, 3, tmp_path)
    kinds = [e[0] for e in engine.log]
    step = ["ahead start", "optimizer step", "ahead end", "updated"]
    # step 0: drafts, challenges, then step 1's drafts beside step 0's update; step 1 likewise;
    # step 2, the last, samples nothing ahead.
    assert kinds == [
        "generate",
        "generate",
        *step,
        "generate",
        *step,
        "generate",
        "optimizer step",
        "updated",
    ]
    assert engine.overlapped == [True, True]
    # step t+1's drafts come from the version step t sampled with, by the adapter drafting t+1 (roles rotate)
    assert [e[1:] for e in engine.log if e[0] == "ahead start"] == [(0, ("beta",)), (1, ("alpha",))]
    challenges = [e[1] for e in engine.log if e[0] == "generate"]
    assert challenges == [0, 0, 1, 2]  # step 0's drafts and challenges, then each step's challenges
    records = metrics.records
    assert [r.draft.adapter for r in records] == ["alpha", "beta", "alpha"]
    assert [int(r.draft.versions.unique()) for r in records] == [0, 0, 1]
    assert [int(r.challenge.versions.unique()) for r in records] == [0, 1, 2]
    assert [m["rollout/staleness"] for m in metrics.rows] == [0.0, 1.0, 1.0]
    assert all(m["rollout/dropped_samples"] == 0.0 for m in metrics.rows)
    for m in metrics.rows:
        assert 0.0 <= m["train/tis_clip_fraction"] <= 1.0 and 0.0 < m["train/ess"] <= 1.0 + 1e-6
    assert module.policy_version == 3 and not background_threads()


def test_drafts_more_than_k_versions_behind_are_dropped_counted_and_sampled_again(tiny_model_dir, tmp_path):
    class SkipAVersion(L.Callback):  # as if another update had landed between the steps
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            if batch_idx == 0:
                pl_module.policy_version += 1

    engine = FakeEngine(max_staleness=1)
    module = make_module(tiny_model_dir, engine)
    with pytest.warns(
        UserWarning, match=r"step 1: dropped 4 drafts sampled ahead \(2 versions behind, more than"
    ):
        metrics = fit(module, 2, tmp_path, [SkipAVersion()])
    assert module.dropped_samples == P * N
    assert [m["rollout/dropped_samples"] for m in metrics.rows] == [0.0, 4.0]
    assert metrics.rows[1]["rollout/staleness"] == 0.0  # step 1 trained on drafts sampled again, now
    assert [e[0] for e in engine.log].count("generate") == 4  # step 1's drafts sampled in the step


def test_an_error_in_the_background_thread_surfaces_with_its_message(tiny_model_dir, tmp_path):
    module = make_module(tiny_model_dir, FakeEngine(max_staleness=1, fail_ahead="server s1 went away"))
    with pytest.raises(RuntimeError, match="server s1 went away") as err:
        fit(module, 3, tmp_path)
    assert "sampling step 1's drafts ahead, in the background" in "".join(err.value.__notes__)
    assert module.agon_step == 0 and not background_threads()  # step 0 did not finish; nothing left running


def test_a_resumed_k1_run_samples_its_first_drafts_again_and_trains_every_batch_once(
    tiny_model_dir, tmp_path
):
    straight = fit(make_module(tiny_model_dir, FakeEngine(max_staleness=1)), 4, tmp_path / "straight")
    root = tmp_path / "stopped"
    save = {"every_n_train_steps": 1, "bundles": False, "monitor": None, "save_top_k": 0}

    class StopAfterStep1(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            trainer.should_stop = batch_idx == 1

    stopped = fit(
        make_module(tiny_model_dir, FakeEngine(max_staleness=1)),
        4,
        root,
        [AgonCheckpoint(**save), StopAfterStep1()],
    )
    # stopped after step 1, whose update sampled step 2's drafts ahead: the checkpoint holds none of them
    assert len(stopped.records) == 2 and [e[0] for e in stopped.rollout_log].count("ahead end") == 2
    engine = FakeEngine(max_staleness=1)
    resumed = make_module(tiny_model_dir, engine)
    after = fit(resumed, 4, root, [AgonCheckpoint(**save)], ckpt_path=str(root / "checkpoints" / "last.ckpt"))
    trained = [[p.question for p in r.problems] for r in after.records]
    # none lost, none twice: steps 2 and 3 train the batches the straight run's steps 2 and 3 did
    assert trained == [[p.question for p in r.problems] for r in straight.records[2:]]
    assert [e[0] for e in engine.log[:2]] == ["generate", "generate"]  # step 2's drafts sampled in step 2
    assert [int(r.draft.versions.unique()) for r in after.records] == [2, 2]  # then step 3's ahead, at 2
    assert [m["rollout/staleness"] for m in after.rows] == [0.0, 1.0] and resumed.policy_version == 4
