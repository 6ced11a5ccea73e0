"""SFT: example building, loss masking, a few training steps, stopping on a threshold, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import lightning as L
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from agon_lightning.cli.sft import SFTCLI
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.text import extract_answer
from agon_lightning.infra.tiny import TinyArchitecture, build_tokenizer
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.summarizers.basic import StripTraceSummarizer
from agon_lightning.testbeds.chain_sum.sft import (
    DEFAULT_RIVAL_MIX,
    ArithmeticExamples,
    build_examples,
    eval_examples,
)
from agon_lightning.training.sft import SFTModule, StopAtThreshold, encode_sft_batch
from agon_lightning.training.sft_data import RIVALS, SFTDataModule

TASKS = {"chain_sum": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1}}
CHALLENGE = "{question}\nRival: {summary}"
SMALL = TinyArchitecture(hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1, intermediate_size=64)
CONFIG = Path(__file__).resolve().parents[1] / "configs" / "sft_tiny.yaml"


@pytest.fixture(scope="module")
def data() -> SFTDataModule:
    dm = SFTDataModule(tasks=TASKS, train_size=256, val_size=8, batch_size=16, val_batch_size=16)
    dm.setup()
    return dm


def small_module(**kwargs) -> SFTModule:
    torch.manual_seed(0)
    return SFTModule(
        architecture=SMALL,
        prompts=Prompts(challenge=CHALLENGE),
        rollout=HFRollout(max_new_tokens=8),
        **kwargs,
    )


def test_examples_mix_roles_and_rivals(data: SFTDataModule) -> None:
    examples = build_examples(
        data.train_problems, challenge_fraction=0.5, rival_mix=DEFAULT_RIVAL_MIX, seed=0
    )
    assert examples == build_examples(data.train_problems, 0.5, DEFAULT_RIVAL_MIX, seed=0)
    kinds = [e.kind for e in examples]
    assert 0.35 < kinds.count("draft") / len(kinds) < 0.65
    assert all(kinds.count(f"challenge_{rival}") > 0 for rival in RIVALS)
    summarizer = StripTraceSummarizer()
    for e in examples:
        assert extract_answer(e.target) == e.problem.answer  # the target is always right
        if e.kind == "challenge_slipped":
            assert extract_answer(e.rival_draft) != e.problem.answer
        if e.kind == "challenge_right":
            assert e.rival_draft == e.target
        if e.kind == "challenge_empty":
            assert summarizer.summarize(e.rival_draft, e.problem) == ""
        if e.rival_draft is not None:  # no summary a challenger reads holds the answer
            assert e.problem.answer not in summarizer.summarize(e.rival_draft, e.problem).split(",")
    assert {e.kind for e in build_examples(data.train_problems, 0.0, DEFAULT_RIVAL_MIX, seed=0)} == {"draft"}


def test_eval_examples_cover_each_problem_in_both_roles(data: SFTDataModule) -> None:
    examples = eval_examples(data.val_problems, seed=0)
    n = len(data.val_problems)
    rivals = [f"challenge_{RIVALS[i % len(RIVALS)]}" for i in range(n)]
    assert [e.kind for e in examples] == ["draft"] * n + rivals
    assert not {p.question for p in data.val_problems} & {p.question for p in data.train_problems}


def test_loss_covers_the_completion_only() -> None:
    tokenizer = build_tokenizer()
    enc = encode_sft_batch(tokenizer, ["ab", "abcd"], ["<think>1</think>", "2"])
    assert enc["input_ids"].shape == (2, 6)
    # Row 0: 2 prompt tokens, 3 target tokens, EOS; row 1: 4 prompt tokens, 1 target token, EOS.
    assert enc["labels"][0].tolist()[:2] == [-100, -100] and enc["labels"][0, -1] == tokenizer.eos_token_id
    assert enc["labels"][1].tolist() == [-100] * 4 + [enc["input_ids"][1, 4].item(), tokenizer.eos_token_id]
    assert enc["attention_mask"].tolist() == [[1] * 6, [1] * 6]
    short = encode_sft_batch(tokenizer, ["a"], ["1"]) | {}
    padded = encode_sft_batch(tokenizer, ["a", "abcd"], ["1", "2"])
    assert padded["input_ids"][0, 3:].tolist() == [tokenizer.pad_token_id] * 3
    assert padded["labels"][0, 3:].tolist() == [-100] * 3
    assert torch.equal(padded["labels"][0, :3], short["labels"][0])


def test_prompts_are_the_ones_rl_sends(data: SFTDataModule) -> None:
    module = small_module()
    example = next(e for e in build_examples(data.train_problems, 1.0, {"slipped": 1.0}, seed=0))
    summary = example.rival_draft.split("</think>")[1].split("<answer>")[0]
    assert module.prompt(example) == Prompts(challenge=CHALLENGE).challenge_prompt(
        module.tokenizer, example.problem, summary
    )
    assert module.prompt(example).endswith(f"\nRival: {summary}<|im_end|>\n<|im_start|>assistant\n")


def test_a_few_steps_lower_the_loss(data: SFTDataModule) -> None:
    module = small_module(learning_rate=3e-3, warmup_steps=0)
    optimizer = module.configure_optimizers()["optimizer"]
    batch = next(iter(data.train_dataloader()))
    losses = []
    for step in range(15):
        loss = module.training_step(batch, step)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


def fit(module: SFTModule, data: SFTDataModule, callback: StopAtThreshold, tmp_path: Path) -> L.Trainer:
    trainer = L.Trainer(
        max_steps=6, val_check_interval=3, check_val_every_n_epoch=None, num_sanity_val_steps=0,
        callbacks=[callback], logger=False, enable_checkpointing=False, enable_progress_bar=False,
        enable_model_summary=False, default_root_dir=tmp_path,
    )  # fmt: skip
    trainer.fit(module, datamodule=data)
    return trainer


def test_stops_at_the_evaluation_that_crosses_the_threshold(data: SFTDataModule, tmp_path: Path) -> None:
    module = small_module(output_dir=str(tmp_path / "model"))
    callback = StopAtThreshold(monitor="val/truncated", threshold=1.0, mode="min")
    trainer = fit(module, data, callback, tmp_path)
    assert trainer.global_step == 3 and callback.stopped_at == 3
    report = json.loads((tmp_path / "model" / "sft_eval.json").read_text())
    assert report["global_step"] == 3
    assert set(report["evaluations"][0]) >= {"step", "val/draft_acc", "val/challenge_slipped_acc"}
    # The written directory is a model `agon fit` can load.
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "model")
    assert torch.equal(reloaded.model.embed_tokens.weight, module.model.model.embed_tokens.weight)
    assert AutoTokenizer.from_pretrained(tmp_path / "model").get_vocab() == module.tokenizer.get_vocab()


def test_runs_to_max_steps_and_warns_when_never_reached(data: SFTDataModule, tmp_path: Path) -> None:
    callback = StopAtThreshold(monitor="val/draft_acc", threshold=1.5)
    with pytest.warns(UserWarning, match="never reached 1.5 in 6 steps"):
        trainer = fit(small_module(), data, callback, tmp_path)
    assert trainer.global_step == 6 and callback.stopped_at is None
    assert [r["step"] for r in trainer.lightning_module.history] == [3, 6]


def test_a_resumed_run_writes_the_whole_evaluation_history(data: SFTDataModule, tmp_path: Path) -> None:
    def trainer(max_steps: int) -> L.Trainer:
        return L.Trainer(
            max_steps=max_steps, val_check_interval=3, check_val_every_n_epoch=None, num_sanity_val_steps=0,
            logger=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=tmp_path,
            callbacks=[L.pytorch.callbacks.ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True)],
        )  # fmt: skip

    trainer(3).fit(small_module(), datamodule=data)
    resumed = small_module(output_dir=str(tmp_path / "model"))
    trainer(6).fit(resumed, datamodule=data, ckpt_path=str(tmp_path / "ckpt" / "last.ckpt"))
    report = json.loads((tmp_path / "model" / "sft_eval.json").read_text())
    assert report["global_step"] == 6
    assert [r["step"] for r in report["evaluations"]] == [3, 6]


def test_errors_name_the_bad_value() -> None:
    with pytest.raises(ValueError, match="mode must be 'max' or 'min', got 'up'"):
        StopAtThreshold(mode="up")
    with pytest.raises(ValueError, match="cannot be combined with model_name_or_path='agon:tiny-qwen3'"):
        SFTModule(model_name_or_path="agon:tiny-qwen3", architecture=SMALL)
    with pytest.raises(ValueError, match="challenge_fraction must be in"):
        SFTDataModule(tasks=TASKS, challenge_fraction=1.5)
    with pytest.raises(ValueError, match="rival_mix must map"):
        SFTDataModule(tasks=TASKS, rival_mix={"wrong": 1.0})


def test_the_default_examples_come_through_their_entry_point_and_its_absence_names_the_fix(
    monkeypatch,
) -> None:
    # The training floor does not import a testbed: the chain_sum testbed registers its examples.
    from agon_lightning.training import sft_data

    (registered,) = sft_data.entry_points(group=sft_data.EXAMPLES_GROUP, name=sft_data.DEFAULT_EXAMPLES)
    assert registered.load() is ArithmeticExamples
    monkeypatch.setattr(sft_data, "entry_points", lambda **selection: [])
    with pytest.raises(
        LookupError, match=r"'arithmetic' in the entry-point group 'agon_lightning.examples'.*data.examples"
    ):
        SFTDataModule(tasks=TASKS)


def test_shipped_config_parses(tmp_path: Path) -> None:
    cli = SFTCLI(
        SFTModule,
        SFTDataModule,
        args=[
            "--config",
            str(CONFIG),
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger",
            "false",
        ],
        run=False,
    )
    assert cli.model.prompts.challenge == CHALLENGE
    assert cli.model.rollout.max_new_tokens == 80
    assert cli.datamodule.val_seed == 10_001 and cli.datamodule.data_seed != cli.datamodule.val_seed
    assert any(isinstance(c, StopAtThreshold) for c in cli.trainer.callbacks)
    examples = cli.datamodule.examples
    assert isinstance(examples, ArithmeticExamples) and examples.rival_mix == DEFAULT_RIVAL_MIX


def test_the_default_examples_are_the_arithmetic_ones_with_the_data_level_shares(monkeypatch) -> None:
    # Configs written before the examples moved into the chain_sum testbed set the shares on the data module.
    dm = SFTDataModule(tasks=TASKS, challenge_fraction=0.25, rival_mix={"slipped": 1.0})
    assert isinstance(dm.examples, ArithmeticExamples)
    assert (dm.examples.challenge_fraction, dm.examples.rival_mix) == (0.25, {"slipped": 1.0})
    assert SFTDataModule(tasks=TASKS).examples.challenge_fraction == 0.5
    # ... and the names the data module's file defined still import from it, deprecated (moved.py)
    from agon_lightning import moved
    from agon_lightning.training import sft_data

    monkeypatch.setattr(moved, "_WARNED", set())  # each old name warns once per process
    with pytest.warns(
        DeprecationWarning, match=r"testbeds\.chain_sum\.sft\.(build_examples|DEFAULT_RIVAL_MIX)"
    ):
        assert sft_data.build_examples is build_examples and sft_data.DEFAULT_RIVAL_MIX is DEFAULT_RIVAL_MIX


def test_a_run_resumed_mid_epoch_trains_on_the_batches_an_uninterrupted_run_would(
    data: SFTDataModule, tmp_path: Path
) -> None:
    """Resumed from its step-3 checkpoint, a run sees the straight run's batches 4-6 (not the epoch's first
    three again) and ends with its weights."""

    class Batches(L.Callback):
        def __init__(self) -> None:
            self.seen: list[list[str]] = []

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            self.seen.append([pl_module.prompt(e) + e.target for e in batch])

    def fit_to(module: SFTModule, root: Path, ckpt: str | None = None) -> Batches:
        batches = Batches()
        every_3 = L.pytorch.callbacks.ModelCheckpoint(
            dirpath=root / "ckpt", filename="{step}", every_n_train_steps=3, save_top_k=-1
        )
        L.Trainer(
            max_steps=6, limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
            enable_model_summary=False, default_root_dir=root, callbacks=[batches, every_3],
        ).fit(module, datamodule=data, ckpt_path=ckpt)  # fmt: skip
        return batches

    straight = small_module()
    whole = fit_to(straight, tmp_path / "straight")
    step_3 = tmp_path / "straight" / "ckpt" / "step=3.ckpt"
    # The same checkpoint as a run before the loader kept its place wrote it: the progress counters only.
    old = torch.load(step_3, weights_only=False)
    assert old["loops"]["fit_loop"]["state_dict"].pop("combined_loader") == [{"epoch": 0, "batches": 3}]
    torch.save(old, tmp_path / "old.ckpt")
    for ckpt in (step_3, tmp_path / "old.ckpt"):
        resumed = small_module()
        rest = fit_to(resumed, tmp_path / ckpt.stem, str(ckpt))
        assert len(whole.seen) == 6 and rest.seen == whole.seen[3:], ckpt.name
        for (name, a), b in zip(straight.model.named_parameters(), resumed.model.parameters(), strict=True):
            assert torch.equal(a, b), (ckpt.name, name)


class StopAfter(L.Callback):
    """Sets ``should_stop`` after ``steps`` steps, as ``max_time`` (Lightning's ``Timer``) and early stopping do."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step >= self.steps:
            trainer.should_stop = True


@pytest.mark.parametrize("stop", ["max_steps", "should_stop"])
def test_a_checkpoint_saved_after_a_fit_stopped_inside_an_epoch_resumes_inside_it(
    data: SFTDataModule, tmp_path: Path, stop: str
) -> None:
    """``trainer.save_checkpoint`` after a fit stopped 3 batches into an epoch of 16 (by ``max_steps``, or by a
    callback's ``should_stop``): a resume to 6 steps trains on the epoch's batches 4-6, as a run never stopped
    does (it used to start the next epoch)."""
    seen: list[list[str]] = []

    class Batches(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            seen.append([pl_module.prompt(e) + e.target for e in batch])

    def trainer(max_steps: int, *callbacks: L.Callback) -> L.Trainer:
        return L.Trainer(
            max_steps=max_steps, limit_val_batches=0, num_sanity_val_steps=0, logger=False, enable_progress_bar=False,
            enable_model_summary=False, enable_checkpointing=False, default_root_dir=tmp_path,
            callbacks=[Batches(), *callbacks],
        )  # fmt: skip

    trainer(6).fit(small_module(), datamodule=data)
    whole, seen[:] = list(seen), []
    stopped = trainer(3) if stop == "max_steps" else trainer(6, StopAfter(3))
    stopped.fit(small_module(), datamodule=data)
    assert stopped.global_step == 3
    stopped.save_checkpoint(tmp_path / "stopped.ckpt")
    trainer(6).fit(small_module(), datamodule=data, ckpt_path=tmp_path / "stopped.ckpt")
    assert len(whole) == 6 and seen == whole


def test_the_training_order_is_the_plain_shuffled_loaders_every_epoch(data: SFTDataModule) -> None:
    """The resumable loader hands out what ``DataLoader(shuffle=True)`` with the seeded generator did."""
    plain = torch.utils.data.DataLoader(
        list(range(len(data.train_dataloader().dataset))), batch_size=data.batch_size, shuffle=True,
        generator=torch.Generator().manual_seed(data.seed), drop_last=True,
    )  # fmt: skip
    expected = [[b.tolist() for b in plain] for _ in range(3)]
    loader = data.train_dataloader()
    order = []
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)  # what Lightning does at the start of each epoch
        order.append(
            [list(batch) for batch in torch.utils.data.BatchSampler(loader.sampler, data.batch_size, True)]
        )
    assert order == expected
