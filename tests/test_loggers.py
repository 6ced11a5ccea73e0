"""The loggers users choose (``--trainer.logger``) receive the per-function rewards and the sample games.

TensorBoard is tested end to end, offline: a two-step fit with two reward functions, then its
event file read back. The W&B and MLflow idioms are checked on the logger objects themselves
when those packages are installed (they are not required).
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

import pytest

from agon_lightning.cli import main

ROOT = Path(__file__).resolve().parents[1]

REWARDS = textwrap.dedent(
    """
    def exact(completions, answer, **kwargs):
        return [1.0 if a in c else 0.0 for c, a in zip(completions, answer)]

    def short(completions, **kwargs):
        return [-len(c) / 100 for c in completions]
    """
)


@pytest.mark.slow
def test_tensorboard_receives_each_reward_function_and_the_sample_table(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard", reason="needs tensorboard: pip install -e '.[dev]'")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (tmp_path / "logger_rewards.py").write_text(REWARDS)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "logger_rewards", raising=False)
    monkeypatch.chdir(tmp_path)
    main([
        "fit", "--config", str(ROOT / "configs" / "agon.yaml"), "--threads=1",
        "--trainer.logger=TensorBoardLogger", f"--trainer.logger.save_dir={tmp_path / 'tb'}",
        "--trainer.limit_train_batches=2", "--data.init_args.batch_size=2", "--data.init_args.val_size=4",
        "--data.init_args.hard_size=4", "--model.grpo.num_generations=2", "--model.rollout.init_args.max_new_tokens=16",
        "--model.verifier=reward_function", "--model.verifier.init_args.reward_funcs=[logger_rewards.exact,logger_rewards.short]",
        "--model.verifier.init_args.reward_weights=[1.0,0.1]", "--model.reward=graded",
        "--skip_callbacks=[DivergenceMonitor]", f"--trainer.default_root_dir={tmp_path / 'run'}",
    ])  # fmt: skip
    (events,) = (tmp_path / "tb").rglob("events.out.tfevents.*")
    acc = EventAccumulator(str(events.parent), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    scalars = set(acc.Tags()["scalars"])
    for name in ("exact", "short"):
        assert {f"reward/{name}/mean", f"reward/{name}/std", f"challenge_reward/{name}/mean"} <= scalars, (
            sorted(scalars)
        )
    texts = [t for t in acc.Tags()["tensors"] if t.startswith("samples")]
    assert texts, acc.Tags()
    table = acc.Tensors(texts[0])[0].tensor_proto.string_val[0].decode()
    assert "draft_functions" in table and '"short"' in table


def test_mlflow_gets_a_table_artifact_per_step_and_other_loggers_are_named_once(caplog):
    from lightning.pytorch.loggers import Logger

    from agon_lightning.callbacks.samples import COLUMNS, send_table

    rows = [dict.fromkeys(COLUMNS, "x") | {"step": 3}]

    tables = []

    class Client:
        def log_table(self, run_id, data, artifact_file):
            tables.append((run_id, data, artifact_file))

    class MLFlowLogger:  # Lightning's logger as the callback sees it: a run id and the MLflow client
        run_id = "r1"
        experiment = Client()

    send_table(MLFlowLogger(), rows, 3, set())
    ((run_id, data, artifact),) = tables
    assert run_id == "r1" and artifact == "samples/step_000003.json" and data["step"] == [3]

    class Other(Logger):
        name = version = None
        log_hyperparams = log_metrics = lambda *a, **k: None

    told: set[str] = set()
    with caplog.at_level("INFO"):
        send_table(Other(), rows, 3, told)
        send_table(Other(), rows, 4, told)
    assert [r.getMessage() for r in caplog.records].count(
        "SampleTable: Other shows no tables; the sample games are in samples.jsonl in the run directory"
    ) == 1
