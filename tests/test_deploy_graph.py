"""Evaluation and deployment carry every adapter of a game and its deploy graph.

A three-adapter game (``a1`` drafts, ``a2`` answers after reading ``a1``'s summary, ``judge`` answers
after reading ``a2``'s) is fitted for two steps; validation scores each adapter and the game's answer
graph (``val/game/…``, the deployed key); its bundle holds all three adapters and the game, and
answers through the game's graph — loaded in-process, through ``agon predict`` and through
``agon serve`` — exactly what validation answered. Bundles of other deployments: a single adapter
answers alone, and a bundle written before the game was recorded still loads as the Agon cascade.
"""

from __future__ import annotations

import json
import os
import signal
import zlib
from pathlib import Path

import lightning as L
import pytest
import torch

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.cli import main
from agon_lightning.data.files import write_problems
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.deploy.bundle import save_bundle
from agon_lightning.deploy.cascade import Cascade
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.games.base import Game, draft_stage
from agon_lightning.games.spec import GameSpec
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.pipeline import CascadeResult, solve_batch
from agon_lightning.training.deployment import Answer, Deployment
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.validation import CascadeEvaluator
from agon_lightning.verifiers.base import Verifier
from callbacks.bundle import BundleWriter

ADAPTERS = ("a1", "a2", "judge")
VAL = 4  # held-out problems: one validation batch


class LastDigitParity(Verifier):
    """Right when the completion's CRC-32 is even: about half right on an untrained model, and any change
    to any character flips the verdict half the time, so equal pass@1 over many problems means equal text."""

    def verify(self, completion: str, problem: Problem) -> Verdict:
        ok = zlib.crc32(completion.encode()) % 2 == 0
        return Verdict(correct=ok, score=float(ok), reason="ok" if ok else "wrong_answer")


class ThreeStageGame(Game):
    """``a1`` drafts, ``a2`` answers after reading a draft's summary, ``judge`` after reading ``judge_reads``'s.

    Args:
        judge_reads: Whose answer the judge reads (the test builds it with ``a2``, not the default: the
            bundle must record it).
    """

    def __init__(self, judge_reads: str = "a1") -> None:
        self.judge_reads = judge_reads

    @property
    def spec(self) -> GameSpec:
        roles = ("drafter", "reader", "judge")
        return GameSpec(policies=ADAPTERS, roles=roles, first_stage="drafter", answers=roles, deploy="graph")

    def play(self, player, problems):
        record, _ = draft_stage(player, problems, "a1")
        record.draft.rewards = record.draft.correct
        grouped = [p for p in problems for _ in range(player.num_generations)]
        record.challenge = self._stage(player, "reader", "a2", grouped, record.draft.rollouts)
        read = record.challenge if self.judge_reads == "a2" else record.draft
        record.others = [self._stage(player, "judge", "judge", grouped, read.rollouts)]
        return record

    @staticmethod
    def _stage(player, role, adapter, problems, read):
        """``adapter`` answers each problem once after reading a summary of ``read``, paid its correctness."""
        _, prompts = player.read(problems, read)
        rollouts = player.sample(adapter, prompts, 1)
        verdicts = player.verify(rollouts.texts, problems)
        answered = player.role(role, adapter, rollouts, verdicts, torch.zeros(len(rollouts)))
        answered.rewards = answered.correct
        return answered

    def answer(self, player, problems):
        prompts = [player.prompts.draft_prompt(player.tokenizer, p) for p in problems]
        seen = {"a1": player.sample("a1", prompts, 1, greedy=True)}
        _, prompts = player.read(problems, seen["a1"])
        seen["a2"] = player.sample("a2", prompts, 1, greedy=True)
        _, prompts = player.read(problems, seen[self.judge_reads])
        return player.sample("judge", prompts, 1, greedy=True)


def distinct_adapters(module: AgonModule) -> AgonModule:
    """Build the module's policy with each adapter's LoRA weights drawn apart (fresh ``B`` is zero in all)."""
    module.configure_model()
    generator = torch.Generator().manual_seed(0)
    for name, param in module.policy.named_parameters():
        if "lora_" in name:
            param.data.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return module


def make_module(model_dir: Path, **kwargs) -> AgonModule:
    return AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=2), rollout=HFRollout(max_new_tokens=8), verifier=LastDigitParity(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5), validate_at_start=False, **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="module")
def fitted(tiny_model_dir, tmp_path_factory):
    """Two steps of the three-adapter game, validation after them, and the bundle its checkpoint would write."""
    root = tmp_path_factory.mktemp("graph")
    module = distinct_adapters(make_module(tiny_model_dir, game=ThreeStageGame(judge_reads="a2")))
    dm = ReasoningGymDataModule(train_size=8, val_size=VAL, batch_size=2, val_batch_size=VAL)
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=2, num_sanity_val_steps=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )  # fmt: skip
    trainer.fit(module, dm)
    writer = BundleWriter()
    bundle = writer.write(trainer, root / "last.ckpt", writer.gather(trainer))
    return module, dm.val_problems, bundle, root


def test_validation_scores_every_adapter_and_the_game_graph_as_deployed(fitted):
    module, _, _, _ = fitted
    step, metrics = module.evaluator.history[-1]
    assert step == 2 and module.evaluator.deployed_key == "game"
    for key in ("base", *ADAPTERS, "game"):
        assert {f"val/{key}/{s}" for s in ("pass@1", "length", "cap_hit", "cost/wall_s")} <= set(metrics), key
    assert {k.removeprefix("val/deployed/") for k in metrics if k.startswith("val/deployed/")} == {
        k.removeprefix("val/game/") for k in metrics if k.startswith("val/game/")
    }
    assert all(metrics[f"val/deployed/{k}"] == metrics[f"val/game/{k}"] for k in ("pass@1", "length"))
    assert not any("cascade" in k or "overlap" in k for k in metrics)  # a graph game with three adapters
    # Every token of the graph's three stages, per problem; its length is the judge's alone.
    assert metrics["val/game/cost/total_tokens"] > metrics["val/game/length"]
    outcomes = module.evaluator.last_outcomes
    assert metrics["val/game/pass@1"] == sum(o["game"] for o in outcomes) / VAL
    assert metrics["val/judge/pass@1"] == sum(o["judge"] for o in outcomes) / VAL


def test_the_bundle_holds_every_adapter_and_the_game_and_answers_through_its_graph(fitted, tmp_path, capsys):
    module, problems, bundle, _ = fitted
    meta = json.loads((bundle / "agon.json").read_text())
    assert meta["adapters"] == list(ADAPTERS) and all(
        (bundle / a / "adapter_config.json").is_file() for a in ADAPTERS
    )
    assert (meta["deploy"], meta["drafter"], meta["answerer"]) == ("graph", None, None)
    assert meta["game"] == {
        "class_path": "test_deploy_graph.ThreeStageGame",
        "init_args": {"judge_reads": "a2"},
    }

    cascade = Cascade.from_pretrained(bundle, device="cpu")
    assert cascade.deployment == Deployment("graph") and cascade.game.judge_reads == "a2"
    answers = cascade.solve(problems, batch_size=VAL)
    assert all(isinstance(a, Answer) and (a.kind, a.by) == ("graph", "ThreeStageGame") for a in answers)
    validated = [o["game"]["text"] for o in module.evaluator.last_outputs]
    assert [a.final.final for a in answers] == validated  # what validation scored, word for word
    assert len(set(validated)) > 1, "answers that do not depend on the question prove nothing"
    assert sum(a.verdict.correct for a in answers) / VAL == module.evaluator.history[-1][1]["val/game/pass@1"]
    two = cascade.solve(problems[:2])
    assert [a.to_dict()["final"] for a in two] == validated[:2]
    with pytest.raises(ValueError, match="answer graph, where no adapter is chosen to draft"):
        cascade.solve(problems[:1], drafter="a1")
    with pytest.raises(ValueError, match="answers through its answer graph, greedily"):
        cascade.solve(problems[:1], k=3)

    heldout, out = write_problems(problems, tmp_path / "heldout.jsonl"), tmp_path / "out.jsonl"
    main(
        [
            "predict",
            "--bundle",
            str(bundle),
            "--input",
            str(heldout),
            "--output",
            str(out),
            "--batch-size",
            str(VAL),
        ]
    )
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["final"] for r in records] == validated and {r["game"] for r in records} == {"ThreeStageGame"}

    main(["export", "--bundle", str(bundle), "--lora-out", str(tmp_path / "lora")])
    printed = capsys.readouterr().out
    assert "--max-loras 3" in printed and all(f"{a}={tmp_path / 'lora' / a}" in printed for a in ADAPTERS)
    with pytest.raises(SystemExit):  # a graph deploys no one adapter: --adapter must say which to merge
        main(["export", "--bundle", str(bundle), "--merged-out", str(tmp_path / "merged")])
    assert (
        "name the adapter to merge with --adapter (one of ['a1', 'a2', 'judge'])" in capsys.readouterr().err
    )


def test_agon_serve_answers_through_the_game_graph(fitted, monkeypatch):
    pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
    httpx = pytest.importorskip("httpx", reason="needs httpx: pip install -e '.[dev]'")
    from benchmarks.bench_serve import launch

    _, problems, bundle, _ = fitted
    (expected,) = Cascade.from_pretrained(bundle, device="cpu").solve([problems[0].question])
    # The server process imports the game and the verifier from this file, as the bundle names them.
    monkeypatch.setenv(
        "PYTHONPATH", os.pathsep.join([str(Path(__file__).parent), os.environ.get("PYTHONPATH", "")])
    )
    url, proc, lines = launch(bundle)
    try:
        models = httpx.get(f"{url}/models", timeout=60).json()["data"]
        assert [m["id"] for m in models] == ["game", *ADAPTERS, "base"] and models[0]["agon"]["default"]
        body = {"messages": [{"role": "user", "content": problems[0].question}], "temperature": 0}
        reply = httpx.post(f"{url}/chat/completions", json=body, timeout=120).json()
        assert reply["model"] == "game" and reply["choices"][0]["message"]["content"] == expected.final.final
        assert reply["choices"][0]["agon"]["game"] == "ThreeStageGame"
        refused = httpx.post(f"{url}/chat/completions", json={**body, "n": 2}, timeout=60)
        assert refused.status_code == 400 and "n must be 1" in refused.json()["error"]["message"]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, "".join(lines)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_bundle_written_before_the_game_was_recorded_loads_as_the_agon_cascade(tiny_model_dir, tmp_path):
    module = distinct_adapters(make_module(tiny_model_dir))
    bundle = save_bundle(module, tmp_path / "old")
    meta = json.loads((bundle / "agon.json").read_text())
    assert (meta["deploy"], meta["drafter"], meta["answerer"]) == ("cascade", "alpha", "beta")
    for new in ("deploy", "answerer", "game"):
        del meta[new]
    (bundle / "agon.json").write_text(json.dumps(meta))
    cascade = Cascade.from_pretrained(bundle, device="cpu")
    assert cascade.deployment == Deployment("cascade", "alpha", "beta") and cascade.game is None
    problems = [Problem("12+30=", "42"), Problem("7+8=", "15")]
    results = cascade.solve(problems)
    assert all(isinstance(r, CascadeResult) and (r.drafter, r.answerer) == ("alpha", "beta") for r in results)
    assert [r.final.final for r in results] == [
        r.final.final for r in solve_batch(module, problems, "alpha", "beta")
    ]
    assert [r.answerer for r in cascade.solve(problems[:1], drafter="beta")] == ["alpha"]


def test_a_single_deployment_answers_with_its_adapter_alone(tiny_model_dir, tmp_path):
    module = distinct_adapters(make_module(tiny_model_dir, game="grpo"))
    cascade = Cascade.from_pretrained(save_bundle(module, tmp_path / "single"), device="cpu")
    assert cascade.deployment == Deployment("single", "alpha", "alpha")
    problems = [Problem("12+30=", "42"), Problem("7+8=", "15")]
    answers = cascade.solve(problems)
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems]
    assert [a.final.final for a in answers] == module.sample("alpha", prompts, 1, greedy=True).texts
    record = answers[0].to_dict()
    assert (record["deploy"], record["adapter"]) == ("single", "alpha") and "draft" not in record


def test_the_evaluator_keys_of_any_number_of_adapters():
    cascade = CascadeEvaluator(ADAPTERS, "cascade")
    pairs = [f"cascade_{d}_{a}" for d in ADAPTERS for a in ADAPTERS if d != a]
    assert cascade.keys == ["base", *ADAPTERS, *pairs] and "overlap" not in cascade.stats
    assert cascade.deployed_key == "cascade_a1_a2" and cascade.deployment == Deployment("cascade", "a1", "a2")
    single = CascadeEvaluator(ADAPTERS, "single", deployed="judge")
    assert single.keys == ["base", *ADAPTERS] and single.deployment == Deployment("single", "judge", "judge")
    graph = CascadeEvaluator(ADAPTERS, "graph", game=ThreeStageGame())
    assert graph.keys == ["base", *ADAPTERS, "game"] and graph.deployment == Deployment("graph")
    with pytest.raises(ValueError, match="deploy='graph' scores the game's own answer graph"):
        CascadeEvaluator(ADAPTERS, "graph")
    with pytest.raises(ValueError, match=r"rename them in the game's GameSpec.policies"):
        CascadeEvaluator(("game", "a2"), "graph", game=ThreeStageGame())


def test_a_game_given_in_the_config_is_recorded_as_the_config_gave_it(tiny_model_dir):
    from agon_lightning.cli import AgonCLI
    from agon_lightning.deploy.bundle import build_component, game_spec

    root = Path(__file__).resolve().parents[1]
    args = ["--config", str(root / "configs/agon.yaml"), f"--model.model_name_or_path={tiny_model_dir}",
            "--model.game=AgonGame", "--model.game.schedule=fixed"]  # fmt: skip
    spec = game_spec(AgonCLI(args=args, run=False).model)
    assert spec["init_args"] == {"schedule": "fixed", "pairing": "per_rollout"}
    rebuilt = build_component(spec)
    assert type(rebuilt).__name__ == "AgonGame" and rebuilt.schedule == "fixed"
