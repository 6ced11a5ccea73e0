"""The deployed cascade: it reproduces validation exactly, votes over k samples, names bad input."""

import csv
import hashlib
import json

import lightning as L
import pytest
import torch
from conftest import build_char_tokenizer, build_tiny_model
from lightning.pytorch.loggers import CSVLogger

from agon_lightning.adapters import fast_lora
from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.cli import main
from agon_lightning.data.files import load_problems, write_problems
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.deploy.bundle import canonical_base, save_bundle
from agon_lightning.deploy.cascade import Cascade
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.pipeline import majority_vote, solve_batch
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.verifiers.base import Verifier

VAL_SIZE, VAL_BATCH = 8, 4  # k/8 is exact in float32, so logged and recomputed pass@1 compare with ==


class HashParityVerifier(Verifier):
    """Correct when the first byte of the completion's SHA-256 is even: about half right on an untrained model, and
    any change to any character flips the verdict half the time, so equal pass@1 means equal text."""

    def verify(self, completion: str, problem: Problem) -> Verdict:
        ok = hashlib.sha256(completion.encode()).digest()[0] % 2 == 0
        return Verdict(correct=ok, score=float(ok), reason="ok" if ok else "wrong_answer")


@pytest.fixture(scope="module")
def noisy_model_dir(tmp_path_factory):
    """A tiny Qwen3 with weights large enough that greedy text varies from prompt to prompt."""
    path = tmp_path_factory.mktemp("noisy-qwen3")
    tokenizer = build_char_tokenizer()
    model = build_tiny_model(tokenizer, seed=4)
    generator = torch.Generator().manual_seed(4)
    for param in model.parameters():
        param.data.add_(torch.randn(param.shape, generator=generator))
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


PAIRS = [("alpha", "beta"), ("beta", "alpha")]


def make_module(model_dir):
    return AgonModule(
        model_name_or_path=str(model_dir),
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"], beta_init_std=0.3),
        grpo=GRPOOptions(num_generations=2),
        rollout=HFRollout(max_new_tokens=12),
        verifier=HashParityVerifier(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        validate_at_start=False,
    )


@pytest.fixture(scope="module")
def fitted(noisy_model_dir, tmp_path_factory):
    """Two game steps, validation after them logged to CSV, then a bundle."""
    root = tmp_path_factory.mktemp("fit")
    module = make_module(noisy_model_dir)
    dm = ReasoningGymDataModule(train_size=20, val_size=VAL_SIZE, batch_size=2, val_batch_size=VAL_BATCH)
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=2, num_sanity_val_steps=0, logger=CSVLogger(root), accelerator="cpu",
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )  # fmt: skip
    trainer.fit(module, dm)
    heldout = write_problems(dm.val_problems, root / "heldout.jsonl")  # with reasoning-gym's metadata
    (metrics_file,) = root.rglob("metrics.csv")
    logged = [r for r in csv.DictReader(metrics_file.open()) if r.get("val/cascade_ab/pass@1")]
    return module, save_bundle(module, root / "bundle"), heldout, logged


def read_jsonl(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_predict_reproduces_the_logged_cascade_pass_at_1(fitted, tmp_path, capsys):
    module, bundle, heldout, logged = fitted
    assert [int(r["step"]) for r in logged] == [2]  # after the last step
    final = logged[-1]
    last_batch = module.evaluator.last_outputs  # the texts of validation's last batch
    for drafter, key in (("alpha", "cascade_ab"), ("beta", "cascade_ba")):
        out = tmp_path / f"{key}.jsonl"
        main(["predict", "--bundle", str(bundle), "--input", str(heldout), "--output", str(out),
              "--drafter", drafter, "--batch-size", str(VAL_BATCH)])  # fmt: skip
        records = read_jsonl(out)
        correct = [r["verdict"]["correct"] for r in records]
        assert len(correct) == VAL_SIZE and 0 < sum(correct) < VAL_SIZE, "a verdict that cannot discriminate"
        assert sum(correct) / VAL_SIZE == float(final[f"val/{key}/pass@1"]), key
        assert [r["final"] for r in records[-VAL_BATCH:]] == [o[key]["text"] for o in last_batch]
        assert f"pass@1 {sum(correct)}/{VAL_SIZE}" in capsys.readouterr().out


def test_lightning_predict_gives_the_same_records(fitted, noisy_model_dir, tmp_path):
    _, bundle, heldout, _ = fitted
    config = tmp_path / "predict.yaml"
    config.write_text(f"""
trainer: {{accelerator: cpu, logger: false, enable_progress_bar: false, default_root_dir: {tmp_path}}}
model:
  model_name_or_path: {noisy_model_dir}
  lora: {{init_from: {bundle}}}
  rollout: {{class_path: agon_lightning.rollout.hf.HFRollout, init_args: {{max_new_tokens: 12}}}}
  verifier: {{class_path: test_cascade.HashParityVerifier}}
data:
  class_path: agon_lightning.data.files.FileProblemDataModule
  init_args: {{train_source: {heldout}, val_source: {heldout}, val_batch_size: {VAL_BATCH}}}
""")
    main(["predict", "--config", str(config), "--trainer.callbacks+=agon_lightning.deploy.predict.JsonlPredictionWriter",
          f"--trainer.callbacks.output={tmp_path / 'lightning.jsonl'}"])  # fmt: skip
    main(["predict", "--bundle", str(bundle), "--input", str(heldout), "--output", str(tmp_path / "bundle.jsonl"),
          "--batch-size", str(VAL_BATCH)])  # fmt: skip
    lightning_records, bundle_records = (
        read_jsonl(tmp_path / "lightning.jsonl"),
        read_jsonl(tmp_path / "bundle.jsonl"),
    )
    assert [r["index"] for r in lightning_records] == list(range(VAL_SIZE))
    for r in bundle_records:
        del r["source"]
    assert lightning_records == bundle_records


def test_greedy_outputs_do_not_depend_on_batching(fitted):
    _, bundle, heldout, _ = fitted
    cascade = Cascade.from_pretrained(bundle)
    questions = [p.question for p in load_problems(str(heldout))]
    one_by_one = [r.final.final for r in cascade.solve(questions, batch_size=1)]
    assert [r.final.final for r in cascade.solve(questions, batch_size=VAL_SIZE)] == one_by_one
    assert len(set(one_by_one)) > 1


def test_greedy_outputs_of_every_policy_and_cascade_unchanged_by_the_fast_path(fitted):
    module, _, heldout, _ = fitted
    problems = load_problems(str(heldout))
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems]

    def outputs():
        drafts = [module.sample(a, prompts, 1, greedy=True).texts for a in (None, "alpha", "beta")]
        cascades = [[r.final.final for r in solve_batch(module, problems, d, a)] for d, a in PAIRS]
        return drafts, cascades

    fast = outputs()
    fast_lora.uninstall(module.policy)  # PEFT's own LoRA layers, nothing merged, sampled by generate
    module.rollout.merge_adapter = module.rollout.fused_decode = False
    try:
        plain = outputs()
    finally:
        fast_lora.install(module.policy)
        module.rollout.merge_adapter = module.rollout.fused_decode = True
    assert fast == plain
    assert len({t for texts in fast[0] for t in texts}) > 3  # the policies write different texts


def test_k_samples_are_voted_and_reproducible(fitted):
    _, bundle, _, _ = fitted
    cascade = Cascade.from_pretrained(bundle, device="cpu")
    results = cascade.solve(["12+30=", "7+8="], drafter="beta", k=3, seed=1)
    assert [len(r.samples) for r in results] == [3, 3]
    assert all(r.drafter == "beta" and r.answerer == "alpha" and r.verdict is None for r in results)
    drafts = [s.draft for r in results for s in r.samples]
    assert len(set(drafts)) > 1, "k > 1 must sample, not repeat the greedy draft"
    for r in results:
        assert r.chosen == majority_vote([s.extracted for s in r.samples])[0]
        record = r.to_dict()
        assert record["final"] == r.samples[r.chosen].final and len(record["samples"]) == 3
    again = cascade.solve(["12+30=", "7+8="], drafter="beta", k=3, seed=1)
    assert [s.final for r in again for s in r.samples] == [s.final for r in results for s in r.samples]


def test_majority_vote_most_common_then_earliest_and_none_abstains():
    assert majority_vote(["1", "2", "2", None]) == (1, {"1": 1, "2": 2})
    assert majority_vote([None, "7", " 8.", "8"]) == (2, {"7": 1, "8": 2})  # "8." and "8" normalise alike
    assert majority_vote(["a", "b", "B", "A"]) == (0, {"a": 2, "b": 2})  # a tie goes to the earliest
    assert majority_vote([None, None]) == (0, {})


def test_bad_rows_are_reported_and_the_others_solved(fitted, tmp_path, capsys):
    _, bundle, _, _ = fitted
    source = tmp_path / "mixed.jsonl"
    source.write_text(
        '{"question": "1+2=", "answer": "3"}\n{"question": \n{"question": ""}\n{"question": "4+4="}\n'
    )
    with pytest.raises(SystemExit) as exit_info:
        main(
            [
                "predict",
                "--bundle",
                str(bundle),
                "--input",
                str(source),
                "--output",
                str(tmp_path / "o.jsonl"),
            ]
        )
    assert exit_info.value.code == 1
    records = read_jsonl(tmp_path / "o.jsonl")
    assert [r["index"] for r in records] == [0, 1, 2, 3]
    assert records[1]["error"].startswith(f"{source}:2: not valid JSON")
    assert records[2]["error"] == f"{source}:3: empty question in field 'question'"
    assert records[0]["verdict"] is not None and records[3]["verdict"] is None and "final" in records[3]
    assert "2 input rows could not be read" in capsys.readouterr().err


def test_broken_bundles_fail_with_a_clear_message(fitted, tmp_path):
    import shutil

    _, bundle, _, _ = fitted
    copy = tmp_path / "b"
    shutil.copytree(bundle, copy)
    (copy / "beta" / "adapter_model.safetensors").unlink()
    with pytest.raises(
        FileNotFoundError, match=r"adapter 'beta' has no weights: .*beta/adapter_model.safetensors"
    ):
        Cascade.from_pretrained(copy)
    shutil.rmtree(copy / "beta")
    with pytest.raises(
        FileNotFoundError, match=r"names adapter 'beta' but .*beta/adapter_config.json is missing"
    ):
        Cascade.from_pretrained(copy)
    shutil.copytree(bundle / "beta", copy / "beta")
    config = json.loads((copy / "alpha" / "adapter_config.json").read_text())
    config["base_model_name_or_path"] = "someone/other-model"
    (copy / "alpha" / "adapter_config.json").write_text(json.dumps(config))
    with pytest.raises(
        ValueError, match=r"trained on 'someone/other-model', but .*agon.json names base_model"
    ):
        Cascade.from_pretrained(copy)


def test_a_shipped_base_matches_itself_on_any_install():
    # PEFT records the resolved path; agon.json records agon:NAME. Both mean the same model anywhere.
    assert canonical_base("/opt/env/site-packages/agon_lightning/assets/tiny-qwen3") == "agon:tiny-qwen3"
    assert canonical_base("agon:tiny-qwen3") == "agon:tiny-qwen3"
    assert canonical_base("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B" != canonical_base("Qwen/Qwen3-1.7B")


def test_api_rejects_empty_questions_and_unknown_drafters(fitted):
    _, bundle, _, _ = fitted
    cascade = Cascade.from_pretrained(bundle)
    with pytest.raises(ValueError, match="problem 1 has an empty question"):
        cascade.solve(["1+1=", "  "])
    with pytest.raises(ValueError, match=r"drafter must be one of \['alpha', 'beta'\], got 'gamma'"):
        cascade.solve(["1+1="], drafter="gamma")


REWARD_FUNCTIONS = "agon_lightning.verifiers.reward_function.RewardFunctionVerifier"


def with_verifier(bundle, tmp_path, class_path, init_args):
    """A copy of ``bundle`` under ``tmp_path`` whose ``agon.json`` names another verifier."""
    import shutil

    copy = tmp_path / "bundle_copy"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(bundle, copy)
    meta = json.loads((copy / "agon.json").read_text())
    meta["verifier"] = {"class_path": class_path, "init_args": init_args}
    (copy / "agon.json").write_text(json.dumps(meta))
    return copy


def test_rows_the_verifier_cannot_judge_keep_their_answers(fitted, tmp_path, capsys):
    """A bundle trained with reasoning-gym's verifier, given plain question/answer rows (no task metadata)."""
    copy = with_verifier(
        fitted[1], tmp_path, "agon_lightning.verifiers.reasoning_gym.ReasoningGymVerifier", {}
    )
    source = tmp_path / "mine.jsonl"
    source.write_text(
        "".join(json.dumps({"question": f"{i}+{i}=", "answer": str(2 * i)}) + "\n" for i in range(6))
    )
    out = tmp_path / "out.jsonl"
    main(
        ["predict", "--bundle", str(copy), "--input", str(source), "--output", str(out), "--batch-size", "4"]
    )
    records = read_jsonl(out)
    assert [r["index"] for r in records] == list(range(6))
    assert all(r["final"] is not None for r in records)
    for r in records:
        assert r["verdict"]["correct"] is False
        assert r["verdict"]["reason"].startswith(
            "unverifiable: ReasoningGymVerifier: ReasoningGymVerifier needs"
        )
    streams = capsys.readouterr()
    assert "6 could not be judged" in streams.out and "6 rows could not be judged" in streams.err
    results = Cascade.from_pretrained(copy).solve([Problem(question="1+1=", answer="2"), "2+2="])
    assert results[0].verdict.reason.startswith("unverifiable") and results[1].verdict is None


def test_a_bundle_whose_reward_functions_were_defined_in_the_script_still_answers(fitted, tmp_path, capsys):
    """A script's own reward functions are recorded as ``__main__.<name>``, which no other process imports."""
    copy = with_verifier(fitted[1], tmp_path, REWARD_FUNCTIONS, {"reward_funcs": ["__main__.accuracy"]})
    source = tmp_path / "mine.jsonl"
    source.write_text(
        "".join(json.dumps({"prompt": f"{i}+{i}=", "solution": str(2 * i)}) + "\n" for i in range(3))
    )
    out = tmp_path / "out.jsonl"
    main(["predict", "--bundle", str(copy), "--input", str(source), "--output", str(out)])
    records = read_jsonl(out)
    assert all(r["final"] is not None for r in records)
    assert all("cannot import reward function '__main__.accuracy'" in r["verdict"]["reason"] for r in records)
    assert all(r["verdict"]["reason"].startswith("unverifiable") for r in records)
    assert "3 rows could not be judged" in capsys.readouterr().err
    (answered,) = Cascade.from_pretrained(copy).solve(["2+2="])  # a bare question: answered, not graded
    assert answered.final.final and answered.verdict is None
    # The same function in a module: the bundle grades with it, from the input's own columns.
    copy = with_verifier(
        fitted[1], tmp_path, REWARD_FUNCTIONS, {"reward_funcs": ["test_reward_function.graded_accuracy"]}
    )
    main(["predict", "--bundle", str(copy), "--input", str(source), "--output", str(out)])
    graded = read_jsonl(out)
    assert len(graded) == 3 and {r["verdict"]["reason"] for r in graded} <= {"ok", "wrong_answer"}


def test_api_takes_mappings_like_problems_or_names_what_it_takes(fitted):
    _, bundle, _, _ = fitted
    cascade = Cascade.from_pretrained(bundle)
    row = {"question": "12+30=", "answer": 42, "metadata": {"source": "test"}, "id": 7}
    (from_mapping,) = cascade.solve([row])
    metadata = {"answer": 42, "metadata": {"source": "test"}, "id": 7, "source": "test"}  # every column
    (from_problem,) = cascade.solve([Problem("12+30=", "42", metadata)])
    assert from_mapping.problem == from_problem.problem
    assert from_mapping.to_dict() == from_problem.to_dict() and from_mapping.verdict is not None
    accepted = r"a Problem, a question string, or a mapping with 'prompt' or 'question'"
    with pytest.raises(TypeError, match=rf"problem 1 is a int; each problem must be {accepted}"):
        cascade.solve(["1+1=", 3])
    with pytest.raises(TypeError, match=rf"problems must be a list, each {accepted}.*got a single dict"):
        cascade.solve({"question": "1+1="})
    with pytest.raises(ValueError, match=r"problem 0: no 'prompt' or 'question' column \(the row has"):
        cascade.solve([{"text": "1+1="}])
