"""The DeepMath config end to end: two training steps on CPU, tiny local model, fixture data.

The recipe samples with vLLM on a GPU; here the same config samples with ``HFRollout`` (the
sampling options carry over) on the fixture's difficulty-7 rows (it has few of level 8).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from agon_lightning.cli import AgonCLI
from agon_lightning.data.deepmath import DeepMathDataModule
from agon_lightning.summarizers.qwen3 import Qwen3Summarizer
from agon_lightning.verifiers.math import MathVerifier

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "deepmath_qwen3_0.6b.yaml"
FIXTURE = ROOT / "tests" / "fixtures" / "deepmath_fixture.jsonl"
REASONS = {"ok", "wrong_answer", "no_answer", "no_think_close", "timeout", "verifier_error"}


@pytest.mark.slow
def test_deepmath_config_runs_two_steps_on_cpu(tiny_model_dir, tmp_path):
    cli = AgonCLI(
        args=[
            "--config", str(CONFIG),
            f"--model.model_name_or_path={tiny_model_dir}", "--model.dtype=float32", "--model.rollout=HFRollout",
            "--model.gradient_checkpointing=false", "--model.grpo.num_generations=2",
            "--model.rollout.init_args.max_new_tokens=4", "--model.verifier.init_args.num_workers=1",
            f"--data.init_args.source={FIXTURE}", "--data.init_args.val_size=2", "--data.init_args.min_difficulty=7",
            "--data.init_args.batch_size=2", "--data.init_args.val_batch_size=2",
            "--trainer.accelerator=cpu", "--trainer.limit_train_batches=2", "--trainer.max_epochs=1",
            "--trainer.limit_val_batches=1", "--trainer.enable_checkpointing=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
        run=False,
    )  # fmt: skip
    model = cli.model
    assert isinstance(model.verifier, MathVerifier) and isinstance(model.summarizer, Qwen3Summarizer)
    assert isinstance(cli.datamodule, DeepMathDataModule)
    assert model.rollout.temperature == 0.6 and model.rollout.top_p == 0.95 and model.rollout.top_k == 0
    assert model.verifier.answer == "tag" and cli.datamodule.drop_binary and cli.datamodule.train_size == 3000
    assert model.prompts.chat_template_kwargs == {"enable_thinking": True}
    try:
        cli.trainer.fit(model, datamodule=cli.datamodule)
        assert model.agon_step == 2
        record = model.last_record
        assert len(record.draft.verdicts) == 2 * 2 and len(record.challenge.verdicts) == 2 * 2
        assert {v.reason for v in record.draft.verdicts + record.challenge.verdicts} <= REASONS
        prompt = model.prompts.draft_prompt(model.tokenizer, record.problems[0])
        assert "give the final answer inside <answer></answer> tags." in prompt
        assert model.lr_schedulers().last_epoch == 2  # the paper's schedule, stepped per optimizer step
    finally:
        model.verifier.close()
