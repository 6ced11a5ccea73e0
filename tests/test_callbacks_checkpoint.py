"""AgonCheckpoint and the resumable loader: what is saved, where, atomically, and what resumes."""

from __future__ import annotations

import os
import random
import signal
from types import SimpleNamespace

import lightning as L
import numpy as np
import pytest
import torch
from lightning.pytorch.loggers import CSVLogger
from test_resume import EvenLengthVerifier

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.callbacks import AgonCheckpoint
from agon_lightning.callbacks.checkpoint import bundle_dir, collect_rng_states, set_rng_states
from agon_lightning.callbacks.interrupt import StopSignals
from agon_lightning.data.base import EpochShuffleSampler, ResumableDataLoader, reopen_stopped_epoch
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.deploy.bundle import read_bundle
from agon_lightning.games.prover_verifier import ProverVerifierGame
from agon_lightning.infra.errors import UsageError
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.training.features import KLAnchor, KLAnchors, League
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.validation import CascadeEvaluator


# ---------------------------------------------------------------------------------------------
# The loader's position and order
# ---------------------------------------------------------------------------------------------
def test_epoch_order_depends_on_seed_and_epoch_only():
    a, b = EpochShuffleSampler(20, seed=3), EpochShuffleSampler(20, seed=3)
    b.set_epoch(1)
    first_b = list(b)
    b.set_epoch(0)
    assert list(a) == list(b), "epoch 0 must not depend on having drawn epoch 1 before"
    a.set_epoch(1)
    assert list(a) == first_b
    assert first_b != list(b) and sorted(first_b) == list(range(20))
    assert list(EpochShuffleSampler(20, seed=4)) != list(b)


def loader(size: int = 10, batch_size: int = 2) -> ResumableDataLoader:
    return ResumableDataLoader(list(range(size)), batch_size=batch_size, sampler=EpochShuffleSampler(size, seed=0),
                               collate_fn=list)  # fmt: skip


def test_loader_resumes_mid_epoch_where_it_stopped():
    straight = loader()
    straight.sampler.set_epoch(2)
    expected = list(straight)
    interrupted = loader()
    interrupted.sampler.set_epoch(2)
    it = iter(interrupted)
    seen = [next(it), next(it)]
    state = interrupted.state_dict()
    assert state == {"epoch": 2, "batches": 2}
    resumed = loader()
    resumed.load_state_dict(state)
    resumed.sampler.set_epoch(2)  # what Lightning does before iterating
    assert seen + list(resumed) == expected
    assert resumed.state_dict() == {"epoch": 2, "batches": 5}
    assert list(resumed) == expected, "the skip applies to the resumed epoch only"


def test_state_of_a_finished_epoch_starts_the_next_one_whole():
    done = loader()
    list(done)
    resumed = loader()
    resumed.load_state_dict(done.state_dict())
    resumed.sampler.set_epoch(1)  # Lightning has moved on to the next epoch
    fresh = loader()
    fresh.sampler.set_epoch(1)
    assert list(resumed) == list(fresh)


def test_rng_states_round_trip_through_torch_save(tmp_path):
    states = collect_rng_states()
    torch.save(states, tmp_path / "rng.pt")
    expected = (torch.rand(3), np.random.rand(3), random.random())
    torch.rand(5), np.random.rand(5), random.random()
    set_rng_states(torch.load(tmp_path / "rng.pt", weights_only=True))  # plain types only
    got = (torch.rand(3), np.random.rand(3), random.random())
    assert torch.equal(expected[0], got[0]) and np.array_equal(expected[1], got[1]) and expected[2] == got[2]


# ---------------------------------------------------------------------------------------------
# A real fit: two steps, validation after each, a checkpoint every step
# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def fitted(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt-run")
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=HFRollout(max_new_tokens=6), verifier=EvenLengthVerifier(),
        validate_at_start=False,
    )  # fmt: skip
    callback = AgonCheckpoint(every_n_train_steps=1)
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=2, limit_val_batches=1, val_check_interval=1, num_sanity_val_steps=0,
        logger=CSVLogger(root), callbacks=[callback], enable_progress_bar=False, enable_model_summary=False,
        default_root_dir=root, accelerator="cpu",
    )  # fmt: skip
    data = ReasoningGymDataModule(train_size=12, val_size=2, batch_size=2, val_batch_size=2)
    trainer.fit(module, data)
    return SimpleNamespace(root=root, trainer=trainer, module=module, callback=callback)


def test_last_and_best_are_written_with_their_bundles(fitted):
    ckpt_dir = fitted.root / "checkpoints"
    assert fitted.callback.dirpath == str(ckpt_dir), "default dir must not depend on the logger version"
    last = ckpt_dir / "last.ckpt"
    state = torch.load(last, map_location="cpu", weights_only=False)
    assert state["global_step"] == 2 and state["agon"]["step"] == 2
    assert "rng_states" in state and state["optimizer_states"]
    assert all("lora_" in k for k in state["state_dict"]), "the frozen base must not be saved"
    assert state["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 0, "batches": 2}]
    meta = read_bundle(bundle_dir(last))
    assert meta["step"] == 2 and meta["adapters"] == ["alpha", "beta"]

    best = fitted.callback.best_model_path
    assert best and best.endswith(".ckpt") and "best-step=" in best
    scores = [m["val/deployed/pass@1"] for _, m in fitted.module.evaluator.history]
    assert float(fitted.callback.best_model_score) == max(scores)
    assert read_bundle(bundle_dir(best))["format_version"] == 1
    kept = sorted(p.name for p in ckpt_dir.glob("best-*.ckpt"))
    assert len(kept) == 1 and (ckpt_dir / kept[0].removesuffix(".ckpt")).is_dir()
    assert not list(ckpt_dir.glob(".*")), "no partial files may remain"


def test_bundle_adapters_load_with_plain_peft(fitted, tiny_model_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    model = PeftModel.from_pretrained(base, str(fitted.root / "checkpoints" / "last" / "beta"))
    trained = dict(fitted.module.policy.named_parameters())
    loaded = {n: p for n, p in model.named_parameters() if "lora_B" in n}
    assert loaded
    for name, param in loaded.items():
        assert torch.equal(param, trained[name.replace(".default.", ".beta.")].detach()), name


def progress(epoch: dict[str, int], batches: int, last: bool) -> dict:
    """The fit loop's part of a checkpoint: the epoch's counters (``current`` = ``total``) and the batches'."""
    return {"loops": {"fit_loop": {
        "epoch_progress": {"current": dict(epoch), "total": dict(epoch)},
        "epoch_loop.batch_progress": {"current": {"completed": batches}, "is_last_batch": last},
    }}}  # fmt: skip


def test_only_an_epoch_marked_finished_before_its_last_batch_is_reopened():
    finished = {"ready": 1, "started": 1, "processed": 1, "completed": 1}
    stopped = progress(finished, batches=3, last=False)
    assert reopen_stopped_epoch(stopped, epoch_batches=6)
    assert stopped["loops"]["fit_loop"]["epoch_progress"]["current"] == {
        "ready": 1, "started": 1, "processed": 0, "completed": 0
    }  # fmt: skip
    assert stopped["epoch"] == 0
    inside = {"ready": 1, "started": 1, "processed": 0, "completed": 0}  # a checkpoint after a batch
    untouched = [
        progress(finished, batches=6, last=False),  # all of a limited epoch ran (limit_train_batches)
        progress(finished, batches=3, last=True),  # the loader ran out
        progress(inside, batches=3, last=False),
        progress({"ready": 2, "started": 2, "processed": 1, "completed": 1}, batches=0, last=False),
        {"loops": {}},
    ]
    for case in untouched:
        before = repr(case)
        assert not reopen_stopped_epoch(case, epoch_batches=6) and repr(case) == before


class QuestionsSeen(L.Callback):
    def __init__(self) -> None:
        self.seen: list[list[str]] = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.seen.append([p.question for p in batch])


def test_a_run_stopped_by_max_steps_inside_an_epoch_resumes_inside_it(tiny_model_dir, tmp_path):
    """``last`` written when ``max_steps`` stops a run mid-epoch: a resume with more steps trains on the
    rest of that epoch, then the next one, as a run never stopped does (it used to skip to the next epoch).
    Resumed from Python with torch's default ``weights_only=True``: the module's option types load."""

    def fit(root, max_steps: int, ckpt: str | None = None) -> tuple[QuestionsSeen, L.Trainer]:
        torch.manual_seed(0)
        module = AgonModule(
            model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
            grpo=GRPOOptions(num_generations=2), rollout=HFRollout(max_new_tokens=4),
            verifier=EvenLengthVerifier(), validate_at_start=False, kl=KLAnchors(drafter=KLAnchor(beta=0.01)),
            league=League(probability=0.5, seed=0),
        )  # fmt: skip
        seen = QuestionsSeen()
        trainer = L.Trainer(
            max_epochs=2, max_steps=max_steps, limit_train_batches=3, limit_val_batches=0, logger=False,
            callbacks=[seen, AgonCheckpoint(every_n_train_steps=100)], enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=root, accelerator="cpu",
        )  # fmt: skip
        trainer.fit(module, ReasoningGymDataModule(train_size=12, val_size=2, batch_size=2), ckpt_path=ckpt)
        return seen, trainer

    whole, straight = fit(tmp_path / "straight", 5)
    first, _ = fit(tmp_path / "stopped", 2)  # 2 of epoch 0's 3 batches; last.ckpt written as training ends
    last = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["epoch"] == 0
    with torch.serialization.safe_globals([LoraOptions, GRPOOptions, KLAnchors, League]):
        pass  # a block of the user's own: leaving it removes the types it names, the module's included
    rest, resumed = fit(tmp_path / "resumed", 5, str(last))
    assert len(whole.seen) == 5 and first.seen + rest.seen == whole.seen
    assert (resumed.global_step, resumed.current_epoch) == (straight.global_step, straight.current_epoch)


def test_a_games_own_adapter_drafts_in_its_bundles_and_a_name_it_lacks_is_refused_at_start(
    tiny_model_dir, tmp_path
):
    """``drafter`` takes the game's adapter names (the prover-verifier game's ``verifier``), and a name the
    game lacks (Agon's ``alpha``) stops the fit before its first step, with nothing written (it used to pass
    the CLI only for ``alpha``/``beta`` and fail at the first save)."""

    def fit(drafter: str, root) -> None:
        module = AgonModule(
            model_name_or_path=str(tiny_model_dir), game=ProverVerifierGame(),
            lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]), grpo=GRPOOptions(num_generations=2),
            rollout=HFRollout(max_new_tokens=4), verifier=EvenLengthVerifier(), validate_at_start=False,
        )  # fmt: skip
        trainer = L.Trainer(
            max_steps=1, limit_val_batches=0, logger=False, enable_progress_bar=False, enable_model_summary=False,
            callbacks=[AgonCheckpoint(drafter=drafter, monitor=None, every_n_train_steps=1)],
            default_root_dir=root, accelerator="cpu",
        )  # fmt: skip
        trainer.fit(module, ReasoningGymDataModule(train_size=4, val_size=2, batch_size=2))

    with pytest.raises(UsageError, match=r"drafter='alpha': drafter must be one of \['prover', 'verifier'\]"):
        fit("alpha", tmp_path / "refused")
    assert not list((tmp_path / "refused").rglob("*.ckpt"))
    fit("verifier", tmp_path / "ran")
    meta = read_bundle(tmp_path / "ran" / "checkpoints" / "last")
    assert (meta["deploy"], meta["drafter"], meta["answerer"]) == ("single", "verifier", "verifier")


def test_ckpt_path_last_is_found_by_a_new_process(fitted):
    fresh = AgonCheckpoint()  # as built by a new `agon fit --ckpt_path last`, before setup()
    trainer = SimpleNamespace(default_root_dir=str(fitted.root), loggers=[])
    assert fresh.last_checkpoint(trainer) == str(fitted.root / "checkpoints" / "last.ckpt")
    assert (
        AgonCheckpoint().last_checkpoint(SimpleNamespace(default_root_dir=str(fitted.root / "nothing")))
        is None
    )


def test_a_save_killed_midway_leaves_the_previous_checkpoint(fitted, monkeypatch):
    last = fitted.root / "checkpoints" / "last.ckpt"
    before = last.read_bytes()

    def dies_while_writing(path, weights_only=None):
        with open(path, "wb") as f:
            f.write(before[: len(before) // 3])  # half a checkpoint, then the process "dies"
        raise KeyboardInterrupt

    monkeypatch.setattr(fitted.trainer, "save_checkpoint", dies_while_writing)
    with pytest.raises(KeyboardInterrupt):
        fitted.callback.save(fitted.trainer, str(last))
    assert last.read_bytes() == before
    torch.load(last, map_location="cpu", weights_only=False)
    leftovers = list(last.parent.glob(".*.partial"))
    assert leftovers, "the interrupted write should sit in a partial file"
    fitted.callback.setup(fitted.trainer, fitted.module, "fit")  # the next run cleans up, holding the lock
    assert not list(last.parent.glob(".*.partial"))
    fitted.callback.teardown(fitted.trainer, fitted.module, "fit")
    assert not list(last.parent.glob(".*")), "the lock is released"


@pytest.mark.parametrize("ab,ba,choice,expected", [
    (0.5, 0.7, "auto", "beta"), (0.7, 0.5, "auto", "alpha"), (0.5, 0.5, "auto", "alpha"),
    (None, None, "auto", "alpha"), (0.5, 0.7, "alpha", "alpha"),
])  # fmt: skip
def test_bundle_drafter_follows_the_better_cascade(ab, ba, choice, expected):
    metrics = {
        k: torch.tensor(v) for k, v in (("val/cascade_ab/pass@1", ab), ("val/cascade_ba/pass@1", ba)) if v
    }
    module = SimpleNamespace(
        adapter_names=("alpha", "beta"), evaluator=SimpleNamespace(deployed_drafter="alpha")
    )
    trainer = SimpleNamespace(callback_metrics=metrics, lightning_module=module)
    assert AgonCheckpoint(drafter=choice).drafter_for_bundle(trainer) == expected


def test_bundle_drafter_defaults_to_the_deployed_policy_fixed_before_training():
    module = SimpleNamespace(
        adapter_names=("alpha", "beta"),
        evaluator=CascadeEvaluator(("alpha", "beta"), "cascade", deployed="cascade_ba"),
    )
    better_ab = {"val/cascade_ab/pass@1": torch.tensor(0.9), "val/cascade_ba/pass@1": torch.tensor(0.1)}
    trainer = SimpleNamespace(callback_metrics=better_ab, lightning_module=module)
    assert AgonCheckpoint().drafter_for_bundle(trainer) == "beta"  # the scores do not choose it
    module.evaluator = CascadeEvaluator(("alpha",), "single", self_cascade=True)
    assert AgonCheckpoint().drafter_for_bundle(trainer) == "alpha"


def test_rng_states_of_another_world_size_are_not_applied():
    callback = AgonCheckpoint()
    with pytest.warns(UserWarning, match="RNG states of 1 processes and this run has 2"):
        trainer = SimpleNamespace(world_size=2, global_rank=1, ckpt_path=None)
        callback.on_load_checkpoint(trainer, None, {"rng_states": [{}]})
    assert callback._rng_to_restore is None


def test_bad_options_are_named():
    with pytest.raises(ValueError, match="every_n_train_steps must be >= 1, got 0"):
        AgonCheckpoint(every_n_train_steps=0)
    with pytest.raises(ValueError, match="got ''"):
        AgonCheckpoint(drafter="")


# ---------------------------------------------------------------------------------------------
# Interrupts: the first signal is a request, the second (or one before any step) stops at once
# ---------------------------------------------------------------------------------------------
def test_a_first_signal_is_recorded_and_a_second_stops_at_once(capsys):
    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)
    signals = StopSignals()
    signals.install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        assert signals.received == signal.SIGTERM
        assert "SIGTERM: finishing this step" in capsys.readouterr().err
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    finally:
        signals.restore()

    nothing_to_save = StopSignals(defer=lambda: False)
    nothing_to_save.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
        assert nothing_to_save.received is None
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGTERM)) == before
    finally:
        nothing_to_save.restore()
