"""VLLMServerRollout's protocol, against in-memory fake servers (httpx's MockTransport; no network).

The fakes keep what a vLLM server keeps — the base and the loaded LoRA names — and answer
``/v1/models``, ``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter`` and
``/v1/completions`` (404 for a name they do not hold), logging every call, so the tests see
the order of the pushes on each replica. tests/test_vllm_server.py runs the same rollout
against a real vLLM server.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
import torch

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.rollout.server import VLLMServerRollout, check_versions, version_of
from agon_lightning.rollout.server_http import AdapterVersionError, ReplicaError
from agon_lightning.rollout.vllm import adapter_state
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.verifiers.exact import ExactMatchVerifier

BASE_ID = "/models/tiny"


class FakeServer:
    """One fake vLLM server: its LoRAs, its call log, and a way to break it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.loras: dict[str, str] = {}  # name → path
        self.calls: list[tuple[str, str]] = []  # (path, name)
        self.failure: Exception | None = None  # raised by every request while set
        self.answer_as: str | None = None  # report this model name in completions (a wrong version)

    def handle(self, request: httpx.Request) -> httpx.Response:
        if self.failure is not None:
            raise self.failure
        path = request.url.path
        body = json.loads(request.content) if request.content else {}
        if path == "/v1/models":
            data = [{"id": BASE_ID, "parent": None}] + [{"id": n, "parent": BASE_ID} for n in self.loras]
            return httpx.Response(200, json={"object": "list", "data": data})
        if path == "/v1/load_lora_adapter":
            self.calls.append(("load", body["lora_name"]))
            if body["lora_name"] in self.loras:
                return httpx.Response(400, json={"message": f"{body['lora_name']} already loaded"})
            self.loras[body["lora_name"]] = body["lora_path"]
            return httpx.Response(200, text="Success")
        if path == "/v1/unload_lora_adapter":
            self.calls.append(("unload", body["lora_name"]))
            if self.loras.pop(body["lora_name"], None) is None:
                return httpx.Response(404, json={"message": f"{body['lora_name']} not found"})
            return httpx.Response(200, text="Success")
        if path == "/v1/completions":
            name = body["model"]
            self.calls.append(("complete", name))
            if name != BASE_ID and name not in self.loras:
                return httpx.Response(404, json={"message": f"The model `{name}` does not exist."})
            choices = []
            for i, prompt in enumerate(body["prompt"]):
                for k in range(body["n"]):
                    tokens = [5 + len(prompt) % 7, 6, 2][: body["max_tokens"]]  # 2: EOS
                    choices.append({
                        "index": i * body["n"] + k, "text": "",
                        "logprobs": {"tokens": [f"token_id:{t}" for t in tokens], "token_logprobs": [-0.5] * len(tokens)},
                    })  # fmt: skip
            return httpx.Response(200, json={"model": self.answer_as or name, "choices": choices})
        return httpx.Response(404, json={"message": f"no route {path}"})


class Fleet(httpx.BaseTransport):
    def __init__(self, *servers: FakeServer) -> None:
        self.servers = {s.url: s for s in servers}

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        return self.servers[f"{request.url.scheme}://{request.url.host}:{request.url.port}"].handle(request)


@pytest.fixture(scope="module")
def module():
    m = AgonModule(
        model_name_or_path="agon:tiny-qwen3", lora=LoraOptions(r=4, beta_init_std=0.02),
        grpo=GRPOOptions(num_generations=2), rollout=VLLMServerRollout(["http://a:1"]),
        verifier=ExactMatchVerifier(), validate_at_start=False,
    )  # fmt: skip
    m.configure_model()
    return m


def rollout_on(*servers: FakeServer, **kwargs) -> VLLMServerRollout:
    r = VLLMServerRollout([s.url for s in servers], max_new_tokens=8, **kwargs)
    r.transport = Fleet(*servers)
    return r


def sample(r, module, names=("alpha", "beta", None), n=1):
    prompts = [f"{i}+3=" for i in range(len(names))]
    return r.generate(module.policy, module.tokenizer, prompts, n, adapter_names=list(names))


def test_every_replica_gets_both_new_versions_before_either_old_one_goes(module):
    a, b = FakeServer("http://a:1"), FakeServer("http://b:2")
    r = rollout_on(a, b)
    out = sample(r, module, n=2)
    assert out.versions == ["alpha-v1", "alpha-v1", "beta-v1", "beta-v1", BASE_ID, BASE_ID]
    r.on_weights_updated(module.policy, ["alpha", "beta"])
    out = sample(r, module)
    assert out.versions == ["alpha-v2", "beta-v2", BASE_ID]
    for server in (a, b):
        admin = [c for c in server.calls if c[0] != "complete"]
        assert admin == [("load", "alpha-v1"), ("load", "beta-v1"), ("load", "alpha-v2"), ("load", "beta-v2"),
                         ("unload", "alpha-v1"), ("unload", "beta-v1")]  # fmt: skip
        assert sorted(server.loras) == ["alpha-v2", "beta-v2"]
    a.calls.clear(), b.calls.clear()
    out = sample(
        r, module, names=("alpha", "beta", "alpha", "beta")
    )  # each version's prompts split over both
    assert a.calls == b.calls == [("complete", "alpha-v2"), ("complete", "beta-v2")]
    assert out.versions == ["alpha-v2", "beta-v2"] * 2


def test_only_the_changed_adapter_is_pushed_and_files_of_unloaded_versions_go(module, tmp_path):
    a = FakeServer("http://a:1")
    r = rollout_on(a, adapter_dir=str(tmp_path))
    sample(r, module)
    first = a.loras["alpha-v1"]
    r.on_weights_updated(module.policy, ["alpha"])
    sample(r, module)
    assert sorted(a.loras) == ["alpha-v2", "beta-v1"]
    assert not (tmp_path / first).exists() and str(tmp_path) in first
    pushed = a.loras["alpha-v2"]
    assert {p.name for p in (tmp_path / pushed).iterdir()} == {
        "adapter_config.json",
        "adapter_model.safetensors",
    }
    sample(r, module)  # no update, no push
    assert [c for c in a.calls if c[0] == "load"] == [
        ("load", "alpha-v1"),
        ("load", "beta-v1"),
        ("load", "alpha-v2"),
    ]


def test_a_new_process_unloads_what_an_earlier_one_left_and_numbers_on(module):
    a = FakeServer("http://a:1")
    a.loras = {"alpha-v6": "/gone", "beta-v6": "/gone", "alpha-v5": "/gone", "other-v1": "/theirs"}
    out = sample(rollout_on(a), module)  # a resumed run: a fresh rollout object
    assert out.versions[:2] == ["alpha-v7", "beta-v7"]
    assert sorted(a.loras) == ["alpha-v7", "beta-v7", "other-v1"]


def test_sampling_ahead_samples_the_held_versions_and_pushes_nothing(module):
    a = FakeServer("http://a:1")
    r = rollout_on(a, max_staleness=1)
    with pytest.raises(RuntimeError, match=r"adapters \['alpha', 'beta'\] are not pushed yet"):
        r.generate_ahead(module.policy, module.tokenizer, ["1+3="], 2, ["beta"])
    sample(r, module)
    a.calls.clear()
    out = r.generate_ahead(module.policy, module.tokenizer, ["1+3=", "2+3="], 2, ["beta", "beta"])
    assert out.versions == ["beta-v1"] * 4 and a.calls == [("complete", "beta-v1")]
    r.on_weights_updated(module.policy, ["alpha"])  # the module tells it only after sampling ahead is done
    with pytest.raises(RuntimeError, match=r"adapters \['alpha'\] are not pushed yet"):
        r.generate_ahead(module.policy, module.tokenizer, ["1+3="], 2, ["beta"])
    assert [c for c in a.calls if c[0] != "complete"] == []  # nothing was pushed from sampling ahead


def test_a_sample_from_another_version_fails_naming_both(module):
    a = FakeServer("http://a:1")
    r = rollout_on(a)
    sample(r, module)
    r.on_weights_updated(module.policy, ["alpha"])
    a.answer_as = "alpha-v1"
    with pytest.raises(
        AdapterVersionError, match=r"came from 'alpha-v1', but the trainer expects 'alpha-v2'"
    ):
        sample(r, module, names=("alpha",))


@pytest.mark.parametrize(
    "failure, why",
    [(httpx.ConnectError("[Errno 111] Connection refused"), "unreachable"), (httpx.ReadTimeout("timed out"), "no answer within 5 s")],
)  # fmt: skip
def test_a_dead_or_silent_replica_is_one_line_naming_it_and_the_request(module, failure, why):
    a, b = FakeServer("http://a:1"), FakeServer("http://b:2")
    r = rollout_on(a, b, timeout_s=5)
    sample(r, module)
    b.failure = failure
    with pytest.raises(ReplicaError) as err:
        sample(r, module, names=("beta", "beta"))
    message = str(err.value)
    assert "\n" not in message
    assert "http://b:2 failed on POST /v1/completions (adapter beta-v1)" in message and why in message
    assert "--ckpt_path last" in message
    r.on_weights_updated(module.policy, ["alpha"])
    with pytest.raises(
        ReplicaError, match=r"http://b:2 failed on POST /v1/load_lora_adapter \(adapter alpha-v2\)"
    ):
        sample(r, module)


def test_a_server_that_lost_its_adapters_answers_404_and_stops_the_run(module):
    a = FakeServer("http://a:1")
    r = rollout_on(a)
    sample(r, module)
    a.loras.clear()  # restarted
    with pytest.raises(ReplicaError, match=r"answered HTTP 404.*alpha-v1.*does not exist"):
        sample(r, module, names=("alpha",))


def test_log_probs_and_tokens_fill_the_batch(module):
    out = sample(rollout_on(FakeServer("http://a:1")), module)
    assert out.completion_ids.shape[1] == 3 and out.lengths.tolist() == [3, 3, 3]
    assert not out.truncated.any()
    assert torch.equal(out.logprobs, torch.full((3, 3), -0.5))
    assert out.select(slice(1, 2)).versions == ["beta-v1"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"urls": []}, "non-empty list"),
        ({"urls": "http://a:1"}, "non-empty list"),
        ({"urls": ["a:1"]}, "looks like http://HOST:PORT, got 'a:1'"),
        ({"urls": ["http://a:1", "http://a:1/"]}, "twice"),
        ({"urls": ["http://a:1"], "timeout_s": 0}, "timeout_s must be > 0, got 0"),
        ({"urls": ["http://a:1"], "adapter_dir": "/no/such/dir"}, "'/no/such/dir' is not a directory"),
    ],
)
def test_bad_settings_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        VLLMServerRollout(**kwargs)


def test_version_helpers():
    assert version_of("alpha-v12", "alpha") == 12
    assert version_of("alpha-v12", "beta") is None and version_of("alpha-x", "alpha") is None
    check_versions(["a-v1", "b-v2"], ["a-v1", "b-v2"])
    with pytest.raises(
        AdapterVersionError, match="sample 1 came from 'b-v1', but the trainer expects 'b-v2'"
    ):
        check_versions(["a-v1", "b-v2"], ["a-v1", "b-v1"])
    rb = RolloutBatch(*(torch.zeros(2, 1) for _ in range(4)), ["x", "y"], torch.zeros(2), torch.zeros(2))
    assert rb.select(slice(0, 1)).versions is None


# ------------------------------------------------------------------ agon vllm-serve
def test_vllm_serve_prints_the_command_the_config_needs(capsys, tmp_path):
    from agon_lightning.cli import main

    config = tmp_path / "run.yaml"
    config.write_text(
        "model:\n  lora:\n    r: 24\n  dtype: bfloat16\n  rollout:\n    class_path: vllm_server\n"
        "    init_args:\n      urls: [http://node7:8123]\n"
    )
    main(
        [
            "vllm-serve",
            "--config",
            "agon:agon.yaml",
            "--config",
            str(config),
            "--device",
            "cpu",
            "--",
            "--seed",
            "3",
        ]
    )
    line = capsys.readouterr().out.strip()
    assert line.startswith("VLLM_ALLOW_RUNTIME_LORA_UPDATING=True VLLM_CPU_KVCACHE_SPACE=")
    assert " python -m vllm.entrypoints.openai.api_server --model " in line
    assert "agon_lightning/assets/tiny-qwen3 " in line  # agon:tiny-qwen3, the shipped folder
    for flags in ("--port 8123", "--dtype bfloat16", "--enable-lora", "--max-loras 4", "--max-lora-rank 32",
                  "--logprobs-mode processed_logprobs", "--gpu-memory-utilization 0.2"):  # fmt: skip
        assert f" {flags}" in line, flags
    assert line.endswith("--seed 3")
    main(["vllm-serve", "--config", "agon:agon.yaml", "--device", "cuda", "--port", "9000"])
    line = capsys.readouterr().out
    assert (
        "--max-lora-rank 16" in line
        and "--port 9000" in line
        and "CPU" not in line
        and "gpu-memory" not in line
    )


def test_vllm_serve_names_a_bad_config(capsys, tmp_path):
    from agon_lightning.cli import main

    (tmp_path / "bad.yaml").write_text("model:\n  lora:\n    r: 0\n")
    for args, message in [
        ([], "required: -c/--config"),
        (["--config", str(tmp_path / "none.yaml")], "none.yaml: cannot be read"),
        (["--config", str(tmp_path / "bad.yaml")], "model.lora.r must be a positive integer, got 0"),
        (["--config", "agon:agon.yaml", "--device", "tpu"], "--device must be auto, cuda or cpu, got 'tpu'"),
    ]:
        with pytest.raises(SystemExit) as stop:
            main(["vllm-serve", *args])
        assert stop.value.code == 2
        assert message in capsys.readouterr().err, args


# ------------------------------------------------------------------ several processes
def _two_rank_worker(rank: int, port: int, out: str) -> None:
    """Rank ``rank`` of 2 (gloo): samples twice on its own fake server; rank 1's second call fails."""
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=2)
    try:
        m = AgonModule(
            model_name_or_path="agon:tiny-qwen3", lora=LoraOptions(r=4), grpo=GRPOOptions(num_generations=2),
            rollout=VLLMServerRollout(["http://a:1"]), verifier=ExactMatchVerifier(), validate_at_start=False,
        )  # fmt: skip
        m.configure_model()
        server = FakeServer("http://a:1")
        if rank == 1:  # one server seen from two ranks: what rank 0 loads, rank 1 can sample
            server.loras = {"alpha-v1": "", "beta-v1": ""}
        r = rollout_on(server)
        result = {"versions": sample(r, m).versions, "admin": [c for c in server.calls if c[0] != "complete"]}
        if rank == 1:
            server.failure = httpx.ConnectError("[Errno 111] Connection refused")
        try:
            sample(r, m)
        except ReplicaError as err:
            result["error"] = str(err)
        (Path(out) / f"rank{rank}.json").write_text(json.dumps(result))
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_rank_zero_pushes_for_all_and_a_failure_on_any_rank_stops_every_rank(tmp_path):
    import multiprocessing
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_two_rank_worker, args=(rank, port, str(tmp_path))) for rank in (0, 1)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert [p.exitcode for p in procs] == [0, 0]
    zero, one = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert zero["versions"] == one["versions"] == ["alpha-v1", "beta-v1", BASE_ID]
    assert zero["admin"] == [["load", "alpha-v1"], ["load", "beta-v1"]] and one["admin"] == []  # rank 0 alone
    assert zero["error"] == one["error"] and "http://a:1 failed on POST /v1/completions" in one["error"]


def test_a_league_step_pushes_the_past_drafter_to_the_servers_as_a_versioned_adapter(tmp_path):
    """A league on sampling servers: the slot goes up as ``alpha_league-vN`` holding the snapshot it was given."""
    import lightning as L
    from safetensors.torch import load_file

    from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
    from agon_lightning.training.features.league import League

    server = FakeServer("http://a:1")
    rollout = rollout_on(server, adapter_dir=str(tmp_path))
    m = AgonModule(
        model_name_or_path="agon:tiny-qwen3", lora=LoraOptions(r=4, beta_init_std=0.02),
        grpo=GRPOOptions(num_generations=2), rollout=rollout, verifier=ExactMatchVerifier(),
        validate_at_start=False, league=League(probability=1.0, max_age=2),
    )  # fmt: skip
    held: list[dict[str, torch.Tensor]] = []

    class Watch(L.Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            rival = pl_module.last_record.rival_drafts
            if rival is not None and rival.adapter == "alpha_league":
                held.append(adapter_state(pl_module.policy, "alpha_league"))

    L.Trainer(
        max_epochs=1, limit_train_batches=3, limit_val_batches=0, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False, accelerator="cpu", default_root_dir=tmp_path,
        callbacks=[Watch()],
    ).fit(m, ReasoningGymDataModule(train_size=12, val_size=2, batch_size=2, val_batch_size=2))  # fmt: skip
    league_loads = [name for kind, name in server.calls if kind == "load" and name.startswith("alpha_league")]
    assert held and league_loads, server.calls  # step 2: alpha drafts again and faces its past self
    assert ("complete", league_loads[-1]) in server.calls  # the rival's drafts came from the pushed version
    # the servers hold one version of the slot, and it is the snapshot the slot held at that step
    assert [n for n in server.loras if n.startswith("alpha_league")] == [league_loads[-1]]
    pushed = load_file(Path(server.loras[league_loads[-1]]) / "adapter_model.safetensors")
    assert pushed.keys() == held[-1].keys()
    assert all(torch.equal(pushed[k], held[-1][k]) for k in pushed)
    # and not alpha as it is now: the past differs from the present after alpha's update
    now = adapter_state(m.policy, "alpha")
    assert any(not torch.equal(pushed[k], now[k]) for k in pushed)
