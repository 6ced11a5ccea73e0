"""A checkpoint or bundle that is not what was saved is refused in one line naming the file; a resume
with options that change a tensor's shape names the option.

One real two-step ``agon fit`` of the tiny model keeps a checkpoint per step (``best-step=1``,
``best-step=2``) and ``last``, each with its ``.sha256``; each case damages a copy of its directory
and resumes it with ``agon fit --ckpt_path last`` in this process. The save order that keeps a
checkpoint verifiable through a kill is checked on the functions themselves.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
import zipfile
from pathlib import Path

import pytest
import torch

from agon_lightning.cli import main
from agon_lightning.deploy.bundle import DamagedBundle
from agon_lightning.infra.checksum import (
    DamagedCheckpoint,
    digest,
    digest_file,
    listed_digests,
    publish_with_digest,
    verify_checkpoint,
)
from faults.test_run_directory import CONFIG, fit_args, overrides


@pytest.fixture(scope="module")
def saved_run(tiny_model_dir, tmp_path_factory) -> Path:
    """A finished two-step run: ``best-step=1.ckpt``, ``best-step=2.ckpt`` and ``last.ckpt``, with bundles."""
    root = tmp_path_factory.mktemp("saved")
    every_step = root.parent / "every_step.yaml"
    every_step.write_text(json.dumps({"trainer": {"callbacks": [{
        "class_path": "agon_lightning.callbacks.AgonCheckpoint",
        "init_args": {"monitor": None, "save_top_k": -1, "every_n_train_steps": 1},
    }]}}))  # fmt: skip
    main(fit_args(tiny_model_dir, root, "--config", str(every_step)))
    names = sorted(p.name for p in (root / "checkpoints").iterdir())
    assert names == [
        "best-step=1", "best-step=1.ckpt", "best-step=1.ckpt.sha256", "best-step=2", "best-step=2.ckpt",
        "best-step=2.ckpt.sha256", "last", "last.ckpt", "last.ckpt.sha256",
    ], names  # fmt: skip
    return root


@pytest.fixture
def run_copy(saved_run, tmp_path) -> Path:
    return Path(shutil.copytree(saved_run, tmp_path / "run"))


def flip_tensor_bytes(path: Path, count: int) -> None:
    """Flip ``count`` bytes inside the largest tensor of a torch checkpoint (its zip archive stays whole)."""
    with zipfile.ZipFile(path) as archive:
        storages = [i for i in archive.infolist() if re.search(r"/data/\d+$", i.filename)]  # not the pickle
        largest = max(storages, key=lambda info: info.file_size)
    data = bytearray(path.read_bytes())
    header = largest.header_offset  # local header: 30 bytes, then the name and the extra field
    start = header + 30 + int.from_bytes(data[header + 26 : header + 28], "little")
    start += int.from_bytes(data[header + 28 : header + 30], "little")
    for i in random.Random(0).sample(range(start, start + largest.file_size), count):
        data[i] ^= 0xFF
    path.write_bytes(data)


def resume_refused(model_dir: Path, root: Path, capfd: pytest.CaptureFixture[str], *extra: str) -> str:
    """``agon fit --ckpt_path last`` in ``root`` must exit 2 with one line; that line."""
    with pytest.raises(SystemExit) as exit_info:
        main(fit_args(model_dir, root, "--ckpt_path", "last", *extra))
    err = capfd.readouterr().err
    assert exit_info.value.code == 2, err[-2000:]
    lines = [line for line in err.splitlines() if line.startswith("agon fit: error:")]
    assert len(lines) == 1 and "Traceback" not in err and "size mismatch" not in err, err[-2000:]
    return lines[0]


def test_a_checkpoint_with_flipped_bytes_is_refused_naming_the_newest_intact_one(
    run_copy, tiny_model_dir, capfd
):
    last = run_copy / "checkpoints" / "last.ckpt"
    flip_tensor_bytes(last, 200)
    torch.load(last, map_location="cpu", weights_only=False)  # still loads: only the digest tells
    line = resume_refused(tiny_model_dir, run_copy, capfd)
    assert f"cannot resume from {last}: its SHA-256 differs from the one saved in last.ckpt.sha256" in line, (
        line
    )
    newest = run_copy / "checkpoints" / "best-step=2.ckpt"
    assert line.endswith(f"resume from the newest intact one beside it: --ckpt_path {newest}"), line


def test_a_truncated_checkpoint_is_refused_naming_the_newest_intact_one(run_copy, tiny_model_dir, capfd):
    last = run_copy / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[: last.stat().st_size // 2])
    (run_copy / "checkpoints" / "best-step=2.ckpt").write_bytes(b"")  # damaged too: the next one is named
    line = resume_refused(tiny_model_dir, run_copy, capfd)
    assert f"cannot resume from {last}: its SHA-256" in line, line
    assert line.endswith(
        f"intact one beside it: --ckpt_path {run_copy / 'checkpoints' / 'best-step=1.ckpt'}"
    ), line


def test_a_resume_with_another_lora_rank_names_the_option(run_copy, tiny_model_dir, capfd):
    line = resume_refused(tiny_model_dir, run_copy, capfd, "--model.lora.r=8")
    assert "the checkpoint does not fit this run: model.lora.r: 16 in the checkpoint, 8 now" in line, line
    assert "lora_A.alpha.weight: [16, 32] in the checkpoint, [8, 32] now" in line, line


def test_a_bundle_with_truncated_adapter_weights_names_the_file(run_copy, tmp_path, capsys):
    from agon_lightning.deploy.cascade import Cascade

    bundle = run_copy / "checkpoints" / "last"
    weights = bundle / "alpha" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(
        DamagedBundle, match=f"cannot read {re.escape(str(weights))} .*bundle {re.escape(str(bundle))}"
    ):
        Cascade.from_pretrained(bundle)
    problems = tmp_path / "problems.jsonl"
    problems.write_text(json.dumps({"question": "1+1", "answer": "2"}) + "\n")
    predict = ["predict", "--bundle", str(bundle), "--input", str(problems), "--output", str(tmp_path / "o")]
    with pytest.raises(SystemExit) as exit_info:
        main(predict)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"agon predict: error: cannot read {weights}" in err, err[-2000:]


def test_training_from_a_bundle_with_truncated_adapter_weights_names_the_file(
    run_copy, tiny_model_dir, capfd
):
    bundle = run_copy / "checkpoints" / "last"
    weights = bundle / "beta" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:5000])
    with pytest.raises(SystemExit) as exit_info:
        main(fit_args(tiny_model_dir, run_copy / "fresh", f"--model.lora.init_from={bundle}"))
    err = capfd.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("agon fit: error:")]
    assert exit_info.value.code == 2 and len(lines) == 1 and "Traceback" not in err, err[-2000:]
    assert f"cannot read {weights}" in lines[0], lines[0]


def test_a_checkpoint_saved_before_digests_resumes_with_a_note(run_copy, tiny_model_dir, caplog):
    last = run_copy / "checkpoints" / "last.ckpt"
    digest_file(last).unlink()
    with caplog.at_level(logging.INFO):
        main(
            fit_args(tiny_model_dir, run_copy, "--ckpt_path", "last", "--trainer.max_epochs=2")
        )  # 2 more steps
    note = f"{last} has no .sha256 file beside it (saved before checksums were kept): resuming it unverified"
    assert [r.getMessage() for r in caplog.records].count(note) == 1, caplog.text[-3000:]
    assert listed_digests(last) == [digest(last)], "the resumed run's save keeps a digest again"
    # Without a digest, a truncated file is still told by its archive.
    digest_file(last).unlink()
    last.write_bytes(last.read_bytes()[:1000])
    with pytest.raises(DamagedCheckpoint, match="it is not a whole checkpoint archive"):
        verify_checkpoint(last)


def test_a_resume_from_python_checks_the_digest_too(run_copy, tiny_model_dir):
    from agon_lightning import from_config

    last = run_copy / "checkpoints" / "last.ckpt"
    last.write_bytes(last.read_bytes()[:-1] + bytes([last.read_bytes()[-1] ^ 1]))
    model, data, trainer = from_config(CONFIG, *overrides(tiny_model_dir, run_copy))
    with pytest.raises(DamagedCheckpoint, match=f"cannot resume from {re.escape(str(last))}"):
        trainer.fit(model, datamodule=data, ckpt_path=str(last))


# ---------------------------------------------------------------------------------------------
# The save order: a kill between any two steps leaves a checkpoint whose digest is listed
# ---------------------------------------------------------------------------------------------
class Killed(Exception):
    pass


@pytest.mark.parametrize("kill_at", ["before_move", "after_move"])
def test_a_kill_between_the_renames_leaves_a_verifiable_checkpoint(tmp_path, kill_at, monkeypatch):
    import agon_lightning.infra.checksum as checksum

    target, partial = tmp_path / "last.ckpt", tmp_path / ".last.ckpt.partial"
    torch.save({"step": 1}, partial)
    publish_with_digest(partial, target, lambda a, b: a.rename(b))
    torch.save({"step": 2}, partial)
    writes = []
    real_write = checksum.write_digests

    def write_or_die(path, digests):  # after the move: killed before the listing drops the old digest
        writes.append(list(digests))
        if kill_at == "after_move" and len(writes) == 2:
            raise Killed
        real_write(path, digests)

    def move(a: Path, b: Path) -> None:
        if kill_at == "before_move":
            raise Killed
        a.rename(b)

    monkeypatch.setattr(checksum, "write_digests", write_or_die)
    with pytest.raises(Killed):
        publish_with_digest(partial, target, move)
    assert verify_checkpoint(target) is None  # whichever file is in place, its digest is listed
    step = torch.load(target, weights_only=True)["step"]
    assert step == (1 if kill_at == "before_move" else 2)
    assert len(listed_digests(target)) == 2, "the listing in between names both files"


def test_a_checkpoint_saved_before_digests_stays_verifiable_through_its_first_replacement(tmp_path):
    target, partial = tmp_path / "last.ckpt", tmp_path / ".last.ckpt.partial"
    torch.save({"step": 1}, target)  # no digest file
    torch.save({"step": 2}, partial)
    old = digest(target)

    def killed(a: Path, b: Path) -> None:
        raise Killed

    with pytest.raises(Killed):
        publish_with_digest(partial, target, killed)
    assert old in listed_digests(target) and verify_checkpoint(target) is None
