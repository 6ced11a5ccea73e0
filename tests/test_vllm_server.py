"""VLLMServerRollout against real vLLM servers on 127.0.0.1 (the ``vllm_server`` CI stage).

Two servers start once for the whole module (``agon vllm-serve --config configs/agon.yaml
--run``, which starts them from an empty working directory, on the shipped tiny Qwen3; ~1 min,
each engine on a core of its own) and are always stopped. Every test but the last uses both; the last kills the second mid-run, so it
runs last (pytest keeps the file's order). Skipped, with the reason, where vllm is not
installed. Run alone with ``pytest -m vllm_server``.
"""

from __future__ import annotations

import csv
import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import lightning as L
import pytest
import torch

from agon_lightning.adapters.policy import LoraOptions, sample_with
from agon_lightning.cli import main
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.server import VLLMServerRollout
from agon_lightning.rollout.server_http import ReplicaError
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.update import policy_logprobs
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

# vllm: skipped without it, naming the install (tests/conftest.py); CI runs these in its `-m vllm` stage.
pytestmark = [pytest.mark.vllm, pytest.mark.vllm_server]

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs/agon.yaml"
START_TIMEOUT_S = 420  # two servers starting at once on two busy cores
LOGP_TOL = 1e-3  # |server − trainer| per token: the in-process backend's bound (tests/test_vllm_rollout.py)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def pinned(core: int | None) -> dict[str, str]:
    """The environment of a server whose engine runs on ``core``. vLLM's CPU backend binds its
    OpenMP threads to the same cores for every server on the machine (on 2 cores: core 0), so
    two servers would share one core and leave the other idle. ``None``, or a
    binding the caller set, keeps vLLM's choice."""
    env = dict(os.environ)
    if core is not None:
        env.setdefault("VLLM_CPU_OMP_THREADS_BIND", str(core))
    return env


class Server:
    """One vLLM server started by ``agon vllm-serve --run``, in a process group of its own."""

    def __init__(self, workdir: Path, core: int | None = None) -> None:
        workdir.mkdir()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = workdir / "server.log"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agon_lightning.cli", "vllm-serve", "--config", str(CONFIG), "--host", "127.0.0.1",
             "--port", str(self.port), "--device", "cpu", "--max-model-len", "512", "--run"],
            cwd=workdir, stdout=self.log.open("w"), stderr=subprocess.STDOUT, start_new_session=True,
            env=pinned(core),
        )  # fmt: skip

    def wait(self, deadline: float) -> None:
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(
                    f"the vLLM server exited with {self.proc.returncode}:\n{self.log.read_text()[-3000:]}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(1)
        pytest.fail(
            f"the vLLM server at {self.url} was not up in {START_TIMEOUT_S} s:\n{self.log.read_text()[-3000:]}"
        )

    def kill(self) -> None:
        """SIGKILL the server and its engine process (its process group)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.kill()

    def models(self) -> set[str]:
        return {m["id"] for m in httpx.get(f"{self.url}/v1/models", timeout=30).json()["data"]}


@pytest.fixture(scope="session")
def servers(tmp_path_factory):
    root = tmp_path_factory.mktemp("vllm-servers")
    started = time.monotonic()
    cores = sorted(os.sched_getaffinity(0))
    fleet = [Server(root / f"s{i}", cores[i % len(cores)]) for i in range(2)]
    try:
        for s in fleet:
            s.wait(started + START_TIMEOUT_S)
        print(f"two vLLM servers up in {time.monotonic() - started:.0f} s")
        yield fleet
    finally:
        for s in fleet:
            s.stop()


@pytest.fixture(scope="module")
def module(servers):
    """An AgonModule on both servers, alpha and beta noise-initialised so base, alpha and beta differ."""
    m = AgonModule(
        model_name_or_path="agon:tiny-qwen3", lora=LoraOptions(beta_init_std=0.02),
        grpo=GRPOOptions(num_generations=2), verifier=ReasoningGymVerifier(), validate_at_start=False,
        rollout=VLLMServerRollout([s.url for s in servers], max_new_tokens=24, temperature=0.7),
    )  # fmt: skip
    m.configure_model()
    torch.manual_seed(0)
    with torch.no_grad():
        for n, p in m.policy.named_parameters():
            if "lora_B" in n and ".alpha." in n:
                p.normal_(0, 0.05)
    return m


def prompts(module, n: int = 6) -> list[str]:
    dm = ReasoningGymDataModule(train_size=n, val_size=1, data_seed=5, batch_size=n)
    return [module.prompts.draft_prompt(module.tokenizer, p) for p in dm.train_problems[:n]]


def greedy(module, adapter, texts):
    return module.rollout.generate(
        module.policy, module.tokenizer, texts, 1, greedy=True, adapter_names=[adapter] * len(texts)
    )


def hf_greedy(module, adapter, texts):
    hf = HFRollout(max_new_tokens=module.rollout.max_new_tokens)
    return sample_with(module.policy, hf, module.tokenizer, adapter, texts, 1, True, module.trainable).texts


def test_alpha_beta_and_the_base_give_three_answers_each_the_trainers(module, servers):
    texts = prompts(module)
    answers = {a: greedy(module, a, texts).texts for a in ("alpha", "beta", None)}
    assert answers["alpha"] != answers["beta"] != answers[None] != answers["alpha"]
    for adapter, got in answers.items():
        assert got == hf_greedy(module, adapter, texts), adapter
    for s in servers:  # both replicas received both adapters
        assert {"alpha-v1", "beta-v1"} <= s.models()


def test_a_push_reaches_every_replica_changes_the_answer_and_unloads_the_old_version(module, servers):
    texts = prompts(module)
    before = greedy(module, "alpha", texts)
    with torch.no_grad():
        for n, p in module.policy.named_parameters():
            if "lora_B" in n and ".alpha." in n:
                p.add_(torch.randn_like(p) * 0.05)
    module.rollout.on_weights_updated(module.policy, ["alpha"])
    after = greedy(module, "alpha", texts)
    assert set(before.versions) == {"alpha-v1"} and set(after.versions) == {"alpha-v2"}
    assert after.texts != before.texts and after.texts == hf_greedy(module, "alpha", texts)
    for s in servers:
        held = s.models()
        assert "alpha-v2" in held and "beta-v1" in held and "alpha-v1" not in held, (s.url, held)
        stale = httpx.post(
            f"{s.url}/v1/completions",
            json={"model": "alpha-v1", "prompt": "1+1", "max_tokens": 2},
            timeout=30,
        )
        assert stale.status_code == 404, stale.text


def test_server_log_probs_are_the_trainers_within_the_in_process_bound(module):
    texts = prompts(module, 4)
    for adapter in ("alpha", "beta", None):
        rb = module.rollout.generate(module.policy, module.tokenizer, texts, 2, adapter_names=[adapter] * 4)
        with torch.no_grad():
            ours = policy_logprobs(module, adapter, rb, slice(0, len(rb)))[0]
            other = policy_logprobs(module, "beta" if adapter != "beta" else "alpha", rb, slice(0, len(rb)))[
                0
            ]
        mask = rb.completion_mask.bool()
        gap = float((ours - rb.logprobs).abs()[mask].max())
        assert gap < LOGP_TOL, (adapter, gap)
        assert float((other - rb.logprobs).abs()[mask].max()) > LOGP_TOL  # the check can tell policies apart
    # One call mixing all three: sent as concurrent requests the server may batch together
    names = ["alpha", "beta", None] * 2
    rb = module.rollout.generate(module.policy, module.tokenizer, prompts(module, 6), 2, adapter_names=names)
    for adapter in ("alpha", "beta", None):
        rows = [i for i, n in enumerate(n for n in names for _ in range(2)) if n == adapter]
        with torch.no_grad():
            ours = policy_logprobs(module, adapter, rb, slice(0, len(rb)))[0]
        gap = ((ours - rb.logprobs).abs() * rb.completion_mask)[rows].max()
        assert float(gap) < LOGP_TOL, (adapter, float(gap))


@pytest.mark.parametrize(
    "strategy",
    [
        "fsdp2",
        pytest.param(
            "deepspeed_zero3",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed"
            ),
        ),
    ],
)
def test_a_two_process_sharded_fit_pushes_whole_adapters_from_rank_zero(servers, tmp_path, strategy):
    first = servers[0]
    held = first.models()
    before = {
        a: max((int(m.rsplit("-v", 1)[1]) for m in held if m.startswith(f"{a}-v")), default=0)
        for a in ("alpha", "beta")
    }
    root = tmp_path / strategy
    args = fit_args(root, [first.url], "[]")
    args[args.index("--trainer.limit_train_batches=3")] = "--trainer.limit_train_batches=2"
    args += [
        "--config",
        str(ROOT / f"configs/strategy/{strategy}.yaml"),
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
    ]
    run = subprocess.run(
        [sys.executable, "-m", "agon_lightning.cli", *args, "--threads", "1"], cwd=tmp_path,
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    rows = [r for f in root.rglob("metrics.csv") for r in csv.DictReader(f.open()) if r.get("train/drafter")]
    assert len(rows) == 2
    # sharded training, whole adapters served: the server samples the trainer's policy on every rank
    assert all(float(r["train/logprob_mismatch"]) < LOGP_TOL for r in rows), [
        r["train/logprob_mismatch"] for r in rows
    ]
    held = {m for m in first.models() if "-v" in m}
    assert held == {f"{a}-v{before[a] + 2}" for a in before}, (
        before,
        held,
    )  # pushed at the start and after step 1 (nothing samples after step 2)


@pytest.mark.parametrize("staleness", [0, 1])
def test_a_three_step_fit_in_sync_and_in_k1_mode(servers, tmp_path, staleness):
    """K = 0 samples each step's drafts in the step; K = 1 samples steps 2 and 3's drafts during the update before."""
    urls = [s.url for s in servers]
    held = servers[0].models() | servers[1].models()
    before = {
        a: max((int(m.rsplit("-v", 1)[1]) for m in held if m.startswith(f"{a}-v")), default=0)
        for a in ("alpha", "beta")
    }
    root = tmp_path / f"k{staleness}"
    main([*fit_args(root, urls, "[]"), f"--model.rollout.init_args.max_staleness={staleness}"])
    rows = [r for f in root.rglob("metrics.csv") for r in csv.DictReader(f.open()) if r.get("train/drafter")]
    assert [float(r["train/drafter"]) for r in rows] == [0.0, 1.0, 0.0]
    assert all(
        0 < float(r["train/ess"]) <= 1 + 1e-6 and 0 <= float(r["train/tis_clip_fraction"]) <= 1 for r in rows
    )
    assert float(rows[0]["train/logprob_mismatch"]) < LOGP_TOL  # step 0 samples its own drafts either way
    if staleness:
        assert [float(r["rollout/staleness"]) for r in rows] == [0.0, 1.0, 1.0]
        assert [float(r["rollout/dropped_samples"]) for r in rows] == [0.0, 0.0, 0.0]
    else:
        assert "rollout/staleness" not in rows[0]
        assert all(float(r["train/logprob_mismatch"]) < LOGP_TOL for r in rows)
    for server in servers:  # pushed at the start and after steps 1 and 2; the old versions unloaded
        assert {m for m in server.models() if "-v" in m} == {f"{a}-v{before[a] + 3}" for a in before}


class KillServer(L.Callback):
    """SIGKILLs the process group ``pgid`` (a vLLM server) once ``after_step`` steps are done."""

    def __init__(self, pgid: int, after_step: int) -> None:
        self.pgid, self.after_step = pgid, after_step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.after_step:
            os.killpg(self.pgid, signal.SIGKILL)
            time.sleep(1)


def fit_args(root: Path, urls: list[str], callbacks: str) -> list[str]:
    return [
        "fit", "--config", str(CONFIG), "--model.rollout=vllm_server", f"--model.rollout.init_args.urls={urls}",
        "--model.rollout.init_args.max_new_tokens=24", "--model.rollout.init_args.timeout_s=60",
        "--model.grpo.num_generations=2", "--model.grpo.tis_cap=2.0", "--model.validate_at_start=false",
        "--trainer.limit_train_batches=3", "--trainer.limit_val_batches=0", f"--trainer.callbacks={callbacks}",
        f"--trainer.default_root_dir={root}", "--data.init_args.batch_size=2", "--data.init_args.train_size=20",
        "--data.init_args.val_size=4", "--data.init_args.hard_size=4", "--data.init_args.val_batch_size=4",
    ]  # fmt: skip


def test_a_killed_server_stops_the_fit_in_one_line_and_it_resumes_with_the_adapters_sent_again(
    servers, tmp_path, caplog
):
    first, doomed = servers
    root = tmp_path / "run"
    checkpoint = (
        '{"class_path": "agon_lightning.callbacks.AgonCheckpoint", "init_args": {"every_n_train_steps": 1}}'
    )
    kill = f'{{"class_path": "test_vllm_server.KillServer", "init_args": {{"pgid": {doomed.proc.pid}, "after_step": 2}}}}'
    validating = fit_args(
        root, [first.url, doomed.url], f"[{checkpoint}, {kill}]"
    )  # validates at the start too
    validating[validating.index("--model.validate_at_start=false")] = "--model.validate_at_start=true"
    validating[validating.index("--trainer.limit_val_batches=0")] = "--trainer.limit_val_batches=1"
    with pytest.raises(ReplicaError) as err:
        main(validating)
    line = str(err.value)
    assert "\n" not in line and f"vLLM server {doomed.url} failed on POST /v1/" in line
    assert "(adapter alpha-v" in line and "unreachable" in line and "--ckpt_path last" in line
    assert (
        f"stopped during step 3: {line}; --ckpt_path last resumes from " in caplog.text
    )  # the checkpoint's line
    assert "last.ckpt (step 2)" in caplog.text
    left = {m for m in first.models() if "-v" in m}
    assert left and all(int(m.rsplit("-v", 1)[1]) >= 2 for m in left), left  # pushed after each update
    main([*fit_args(root, [first.url], f"[{checkpoint}]"), "--ckpt_path", "last"])
    held = {m for m in first.models() if "-v" in m}
    assert not held & left and len(held) == 2, (
        left,
        held,
    )  # the first process's versions gone, both sent again
    assert max(int(m.rsplit("-v", 1)[1]) for m in held) > max(int(m.rsplit("-v", 1)[1]) for m in left)
    rows = [
        r
        for f in sorted(root.rglob("metrics.csv"))
        for r in csv.DictReader(f.open())
        if r.get("train/drafter")
    ]
    assert [float(r["train/drafter"]) for r in rows] == [0.0, 1.0, 0.0]  # steps 1-2, then 3 after the resume
    assert all(float(r["train/logprob_mismatch"]) < LOGP_TOL for r in rows), [
        r["train/logprob_mismatch"] for r in rows
    ]
    evaluated = {
        k for f in root.rglob("metrics.csv") for r in csv.DictReader(f.open()) for k, v in r.items() if v
    }
    for key in ("base", "alpha", "beta", "cascade_ab", "cascade_ba", "deployed"):  # mixed-adapter sampling
        assert f"val/{key}/pass@1" in evaluated, key
