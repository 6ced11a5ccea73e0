"""BundleWriter: which adapter drafts, where a bundle lives, and that AgonCheckpoint writes through it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from agon_lightning.infra.errors import UsageError
from agon_lightning.training.deployment import Deployment
from callbacks.bundle import DRAFTER_MODES, BundleWriter, bundle_dir
from callbacks.checkpoint import AgonCheckpoint


def test_a_bundle_lives_beside_its_checkpoint(tmp_path):
    assert bundle_dir(tmp_path / "best-step=4.ckpt") == tmp_path / "best-step=4"


def test_the_drafter_is_any_adapter_of_the_runs_game_and_is_checked_against_it():
    with pytest.raises(ValueError, match="adapter's name, got ''"):
        BundleWriter("")

    def module(kind: str) -> SimpleNamespace:
        deployment = Deployment(kind) if kind == "graph" else Deployment(kind, "prover", "verifier")
        return SimpleNamespace(
            adapter_names=("prover", "verifier"), evaluator=SimpleNamespace(deployment=deployment)
        )

    for drafter in (*DRAFTER_MODES, "prover", "verifier"):
        BundleWriter(drafter).check(module("cascade"))
    with pytest.raises(UsageError, match=r"drafter='alpha': drafter must be one of \['prover', 'verifier'\]"):
        BundleWriter("alpha").check(module("cascade"))  # a name of Agon's game, not of this one
    with pytest.raises(UsageError, match="answer graph"):
        BundleWriter("prover").check(module("graph"))
    BundleWriter("deployed").check(module("graph"))


def test_the_drafter_follows_the_option():
    metrics = {"val/cascade_ab/pass@1": torch.tensor(0.2), "val/cascade_ba/pass@1": torch.tensor(0.5)}
    trainer = SimpleNamespace(
        callback_metrics=metrics,
        lightning_module=SimpleNamespace(
            adapter_names=("alpha", "beta"), evaluator=SimpleNamespace(deployed_drafter="beta")
        ),
    )
    assert BundleWriter("auto").drafter_for(trainer) == "beta"
    assert BundleWriter("alpha").drafter_for(trainer) == "alpha"
    assert BundleWriter("deployed").drafter_for(trainer) == "beta"


def test_remove_deletes_the_bundle_only(tmp_path):
    ckpt = tmp_path / "last.ckpt"
    ckpt.write_text("state")
    (bundle_dir(ckpt) / "alpha").mkdir(parents=True)
    BundleWriter().remove(ckpt)
    BundleWriter().remove(tmp_path / "never.ckpt")  # no bundle: nothing to do
    assert ckpt.exists() and not bundle_dir(ckpt).exists()


def test_agon_checkpoint_keeps_its_options_and_writes_through_the_writer():
    callback = AgonCheckpoint(drafter="beta", bundles=False)
    assert isinstance(callback.bundle_writer, BundleWriter)
    assert callback.drafter == callback.bundle_writer.drafter == "beta"
    assert callback.bundles is False
