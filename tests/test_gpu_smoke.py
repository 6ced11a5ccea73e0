"""scripts/gpu_smoke.py's matrix holds the rank-dependent-lengths case for every multi-process strategy.

The GPU run itself needs GPUs; here: the cells it plans, the command lines of the case (parsed
by the CLI as the run would), the callback that gives rank 1 a longer budget, and the case
skipped by name on a machine with fewer than 2 GPUs. ``--cpu-dry-run --cases rank_lengths``
runs the cells on 2 CPU processes (about 20 s a cell).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "scripts/gpu_smoke.py")
smoke = importlib.util.module_from_spec(spec)
sys.modules["gpu_smoke"] = smoke
spec.loader.exec_module(smoke)


def test_every_multi_process_strategy_gets_the_rank_lengths_case():
    cells = smoke.cells(list(smoke.STRATEGIES), ["hf", "vllm"], list(smoke.CASES))
    lengths = [(s, r) for s, r, case in cells if case == "rank_lengths"]
    assert lengths == [
        (s, r) for s in ("ddp", "fsdp2", "deepspeed_zero2", "deepspeed_zero3") for r in ("hf", "vllm")
    ]
    assert len([c for c in cells if c[2] == "plain"]) == 8
    assert smoke.cells(["single"], ["hf"], ["rank_lengths"]) == [("ddp", "hf", "rank_lengths")]


@pytest.mark.parametrize("strategy", ["ddp", "deepspeed_zero3"])
def test_the_rank_lengths_command_line_parses_on_two_processes(strategy, tmp_path):
    if strategy.startswith("deepspeed"):
        pytest.importorskip("deepspeed")
    from agon_lightning.cli import AgonCLI

    args = smoke.cli_args(strategy, "hf", "agon:tiny-qwen3", 2, tmp_path, cpu=True, case="rank_lengths")
    assert "--trainer.devices=2" in args and str(ROOT / smoke.RANK_LENGTHS[strategy]) in args
    cli = AgonCLI(args=args, run=False)
    assert cli.trainer.num_devices == 2
    assert type(cli.trainer.strategy).__name__ == (
        "DDPStrategy" if strategy == "ddp" else "DeepSpeedZeroStrategy"
    )


def test_rank_one_decodes_more_during_each_step_only():
    callback = smoke.rank_lengths_callback(32)
    module = SimpleNamespace(rollout=SimpleNamespace(max_new_tokens=128))
    for rank, budget in ((0, 128), (1, 160)):
        trainer = SimpleNamespace(global_rank=rank)
        callback.on_train_batch_start(trainer, module, None, 0)
        assert module.rollout.max_new_tokens == budget
        callback.on_train_batch_end(trainer, module, None, None, 0)
        assert module.rollout.max_new_tokens == 128


def test_with_one_gpu_the_case_is_skipped_by_name(monkeypatch, tmp_path):
    monkeypatch.setattr(smoke, "_gpus", lambda: 1)
    monkeypatch.setattr(smoke, "build_model", lambda path, cpu: None)
    monkeypatch.setattr(smoke.subprocess, "run", lambda *a, **k: pytest.fail("a cell ran"))
    out = tmp_path / "smoke.json"
    monkeypatch.setattr(
        sys, "argv", ["gpu_smoke.py", "--cases", "rank_lengths", "--rollouts", "hf", "--out", str(out)]
    )
    with pytest.raises(SystemExit) as stopped:
        smoke.main()
    assert stopped.value.code == 0  # skipped is not failed
    import json

    rows = json.loads(out.read_text())["rows"]
    assert [r["strategy"] for r in rows] == ["ddp", "fsdp2", "deepspeed_zero2", "deepspeed_zero3"]
    assert all(r["skipped"].startswith("needs 2 GPUs, 1 visible") for r in rows)


def test_a_variant_runs_as_its_shipped_overlay_after_the_strategy(tmp_path):
    from agon_lightning.cli import AgonCLI

    args = smoke.cli_args("single", "hf", "agon:tiny-qwen3", 2, tmp_path, cpu=True, variant="league")
    assert args[:4] == [
        "--config",
        str(ROOT / "configs/agon.yaml"),
        "--config",
        str(smoke.variant_overlay("league")),
    ]
    cli = AgonCLI(args=args, run=False)
    league = next(f for f in cli.model.features if f.option == "model.league")
    assert league.active and league.league.probability == 0.25


def test_an_unknown_variant_is_refused_by_name_before_anything_is_built(monkeypatch, tmp_path):
    monkeypatch.setattr(smoke, "build_model", lambda path, cpu: pytest.fail("a model was built"))
    monkeypatch.setattr(
        sys, "argv", ["gpu_smoke.py", "--variant", "leage", "--out", str(tmp_path / "o.json")]
    )
    with pytest.raises(SystemExit, match="'leage' is not a shipped variant; one of .*'league'"):
        smoke.main()


def test_a_model_dir_that_holds_a_model_is_reused(monkeypatch, tmp_path):
    (tmp_path / "config.json").write_text("{}")
    monkeypatch.setattr(smoke, "build_model", lambda path, cpu: pytest.fail("the model was rebuilt"))
    monkeypatch.setattr(smoke, "_gpus", lambda: 1)
    out = tmp_path / "smoke.json"
    argv = f"gpu_smoke.py --cases rank_lengths --rollouts hf --variant kl_anchor --model-dir {tmp_path} --out {out}"
    monkeypatch.setattr(sys, "argv", argv.split())
    with pytest.raises(SystemExit):
        smoke.main()
    import json

    saved = json.loads(out.read_text())
    assert saved["variant"] == "kl_anchor" and {r["variant"] for r in saved["rows"]} == {"kl_anchor"}
