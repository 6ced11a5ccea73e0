"""``agon serve`` bounds its work: oversize requests are refused before the model sees them, a large
job runs in parts with other clients' requests between them, and a request's system message is
shown to the model or the response says why not.

The server is the installed command on 127.0.0.1 (any free port) over the shipped tiny Qwen3 with
fresh adapters (``benchmarks.bench_serve``, as ``tests/test_serve.py``), with ``--max-batch-size 8``
and every other limit at its default; the module stops it.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("httpx", reason="needs httpx: pip install -e '.[dev]'")
import httpx  # noqa: E402
import torch  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from agon_lightning.deploy.bundle import training_system_messages  # noqa: E402
from agon_lightning.deploy.cascade import Cascade  # noqa: E402
from agon_lightning.deploy.serve import Server, create_app  # noqa: E402
from agon_lightning.deploy.serve_api import APIError, ChatRequest  # noqa: E402
from agon_lightning.deploy.serve_engine import Choice, Job, Part, Sampling, ServedModel  # noqa: E402
from agon_lightning.deploy.serve_queue import BatchQueue, TokensInFlightFull  # noqa: E402
from agon_lightning.game.prompts import Prompts  # noqa: E402
from agon_lightning.game.types import Problem  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks.bench_serve import launch, make_bundle  # noqa: E402

GOOD = {
    "model": "alpha",
    "messages": [{"role": "user", "content": "12 + 30 ="}],
    "max_tokens": 8,
    "temperature": 0,
}
MB = 10**6


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    """The tiny bundle, recorded as trained on problems with their own system messages."""
    path = make_bundle(tmp_path_factory.mktemp("serve_limits") / "bundle", 40)
    meta = json.loads((path / "agon.json").read_text())
    (path / "agon.json").write_text(json.dumps({**meta, "system_messages": "per_row"}))
    return path


@pytest.fixture(scope="module")
def served(bundle):
    """``(base URL, process)`` of ``agon serve --port 0 --max-batch-size 8``, stopped after the module."""
    url, proc, _ = launch(bundle, "--max-batch-size", "8")
    yield url, proc
    proc.terminate()
    try:
        proc.wait(timeout=60)
    except Exception:
        proc.kill()
        proc.wait()


def rss_mb(pid: int) -> float:
    """The resident memory of process ``pid`` in MB (Linux)."""
    line = next(x for x in Path(f"/proc/{pid}/status").read_text().splitlines() if x.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def chunks(total: int, size: int = MB):
    """``total`` bytes in pieces: httpx sends a generator without Content-Length (chunked)."""
    for start in range(0, total, size):
        yield b"x" * min(size, total - start)


def good_request(url: str) -> tuple[httpx.Response, float]:
    start = time.perf_counter()
    reply = httpx.post(f"{url}/chat/completions", json=GOOD, timeout=60)
    return reply, time.perf_counter() - start


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the server's memory from /proc")
def test_oversize_requests_are_refused_before_the_model_and_the_next_is_answered_within_a_second(served):
    url, proc = served
    good_request(url)  # the first request pays for lazy imports on the server, not the measurement
    before = rss_mb(proc.pid)
    start = time.perf_counter()
    many = httpx.post(
        f"{url}/completions", json={"prompt": ["1 + 1 ="] * 2000, "n": 16, "max_tokens": 64}, timeout=60
    )
    assert many.status_code == 400 and time.perf_counter() - start < 5
    assert (
        many.json()["error"]["code"] == "too_many_prompts"
        and "--max-prompts" in many.json()["error"]["message"]
    )
    tokens = httpx.post(
        f"{url}/completions", json={"prompt": ["1 + 1 ="] * 200, "n": 16, "max_tokens": 512}, timeout=60
    )
    assert tokens.status_code == 400 and tokens.json()["error"]["code"] == "request_too_large"
    assert "200 prompts x n=16 x max_tokens=512" in tokens.json()["error"]["message"]
    for body in (b"x" * (20 * MB), chunks(20 * MB)):  # with a Content-Length, and chunked
        start = time.perf_counter()
        big = httpx.post(
            f"{url}/completions", content=body, headers={"content-type": "application/json"}, timeout=60
        )
        assert big.status_code == 413 and time.perf_counter() - start < 10
        error = big.json()["error"]
        assert error["code"] == "request_body_too_large" and "--max-body-bytes" in error["message"]
    assert rss_mb(proc.pid) - before < 100, "an oversize request was read or run, not refused"
    reply, seconds = good_request(url)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] is not None
    assert seconds < 1.0, f"a good request after the oversize ones took {seconds:.2f} s"
    small = httpx.post(  # a body under the limit without a Content-Length still reaches the model
        f"{url}/chat/completions", content=iter([json.dumps(GOOD).encode()]),
        headers={"content-type": "application/json"}, timeout=60,
    )  # fmt: skip
    assert small.status_code == 200 and proc.poll() is None


def test_a_large_job_runs_in_parts_and_a_good_request_is_answered_meanwhile(served):
    url, _ = served
    health = url.removesuffix("/v1") + "/health"
    before = httpx.get(health).json()["batches"]
    large = {
        "model": "alpha",
        "prompt": [f"{i} + {i} =" for i in range(32)],
        "n": 4,
        "max_tokens": 16,
        "temperature": 0,
    }
    answers: dict[str, httpx.Response] = {}
    job = threading.Thread(
        target=lambda: answers.update(large=httpx.post(f"{url}/completions", json=large, timeout=120))
    )
    job.start()
    for _ in range(200):  # until its first part runs
        if httpx.get(health).json()["batches"] > before:
            break
        time.sleep(0.05)
    reply, seconds = good_request(url)
    still_running = job.is_alive()
    job.join(timeout=120)
    assert reply.status_code == 200 and seconds < 1.0, (
        f"a good request took {seconds:.2f} s beside a large job"
    )
    assert still_running, "the good request waited for the whole large job"
    assert answers["large"].status_code == 200 and len(answers["large"].json()["choices"]) == 32 * 4
    assert httpx.get(health).json()["batches"] - before >= 32 * 4 // 8  # 128 rows, at most 8 a batch


def test_the_queue_runs_a_large_job_in_parts_with_the_others_between():
    greedy = Sampling(True, 1.0, 1.0, 0, 8)
    model = ServedModel("alpha", None, "alpha")
    ran: list[list[tuple[str, int, int]]] = []

    def run(parts: list[Part]) -> None:
        ran.append([(p.job.questions[0], p.start, p.stop) for p in parts])
        for p in parts:
            assert p.job.begin()
            p.job.settle(
                p, [Choice(f"{p.job.questions[0]}{r}", "stop", 1, 1) for r in range(p.start, p.stop)], 1
            )

    queue = BatchQueue(run, max_rows=4, wait_s=0)
    large, small = Job(model, ["large"] * 5, 2, greedy), Job(model, ["small"], 1, greedy)
    queue.submit(large)
    queue.submit(small)
    assert queue.tokens == (10 + 1) * 8
    queue.start()
    queue.stop(timeout=10)
    assert ran == [[("large", 0, 4)], [("small", 0, 1)], [("large", 4, 8)], [("large", 8, 10)]]
    result = large.future.result(timeout=1)
    assert [c.text for c in result.choices] == [f"large{r}" for r in range(10)]
    assert queue.tokens == 0  # released once answered


def test_tokens_in_flight_refuse_what_does_not_fit():
    sampling = Sampling(True, 1.0, 1.0, 0, 10)
    model = ServedModel("alpha", None, "alpha")
    queue = BatchQueue(lambda parts: None, max_tokens_in_flight=100)  # no worker: what is queued stays
    with pytest.raises(APIError, match="asks for 110 tokens") as alone:
        queue.submit(Job(model, ["q"] * 11, 1, sampling))
    assert alone.value.status == 400 and alone.value.code == "request_too_large"
    first = queue.submit(Job(model, ["q"] * 6, 1, sampling))
    with pytest.raises(TokensInFlightFull) as busy:
        queue.submit(Job(model, ["q"] * 5, 1, sampling))
    assert busy.value.status == 503 and "60 tokens are in flight" in busy.value.message
    first.future.cancel()  # answered (or given up): its tokens are free again
    queue.submit(Job(model, ["q"] * 5, 1, sampling))
    assert queue.tokens == 50


def test_a_seeded_job_keeps_its_random_stream_across_parts():
    job = Job(ServedModel("alpha", None, "alpha"), ["q"], 1, Sampling(False, 1.0, 1.0, 0, 8), seed=5)
    torch.manual_seed(5)
    expected = torch.rand(4)
    with job.random_stream():
        first = torch.rand(2)
    torch.rand(3)  # another job's batch between the parts
    with job.random_stream():
        second = torch.rand(2)
    assert torch.equal(torch.cat([first, second]), expected)


@pytest.fixture(scope="module")
def server(bundle) -> Server:
    return Server(Cascade.from_pretrained(bundle))


def test_the_key_is_checked_before_the_body_is_read_and_the_body_before_the_request(server):
    web = TestClient(create_app(server, api_key="s3cret", max_body_bytes=1000))  # no lifespan: no worker
    big = json.dumps({"prompt": "1 + 1 =" * 200}).encode()
    assert web.post("/v1/completions", content=big).status_code == 401
    key = {"Authorization": "Bearer s3cret", "content-type": "application/json"}
    refused = web.post("/v1/completions", content=big, headers=key)
    assert refused.status_code == 413 and "at most 1000" in refused.json()["error"]["message"]
    bad = web.post("/v1/completions", content=b'{"prompt": []}', headers=key)
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "prompt"


def chat(*messages: tuple[str, str]) -> ChatRequest:
    return ChatRequest(messages=[{"role": r, "content": c} for r, c in messages], temperature=0)


def test_the_system_message_is_shown_where_training_showed_one_and_said_where_not(server, served):
    c = server.cascade
    request = chat(("system", "Answer in French."), ("user", "12 + 30 ="))
    job = server.job(request, request.questions())
    assert job.system == "Answer in French." and job.warnings == []  # the bundle trained per row
    assert "Answer in French." in c.prompts.draft_prompt(c.tokenizer, job.problem(0))
    reply = httpx.post(
        f"{served[0]}/chat/completions", json=request.model_dump(exclude_none=True), timeout=60
    )
    plain = httpx.post(
        f"{served[0]}/chat/completions",
        json=chat(("user", "12 + 30 =")).model_dump(exclude_none=True),
        timeout=60,
    )
    assert reply.status_code == plain.status_code == 200 and "warnings" not in reply.json()
    draft_prompt = lambda r: r.json()["usage"]["stages"]["draft"]["prompt_tokens"]  # noqa: E731
    assert draft_prompt(reply) > draft_prompt(plain)  # the system message reached the model

    cases = {  # how training showed system messages -> (shown, what the warning says)
        "none": (None, "was not shown to the model"),
        None: ("Answer in French.", "does not record"),
    }
    try:
        for trained, (shown, says) in cases.items():
            c.system_messages = trained
            job = server.job(request, request.questions())
            assert job.system == shown and len(job.warnings) == 1 and says in job.warnings[0]
        c.system_messages, c.prompts.system = "template", "You solve arithmetic."
        job = server.job(request, request.questions())
        assert job.system == "Answer in French." and "replaced the bundle's" in job.warnings[0]
        c.system_messages, c.prompts.chat_template = "per_row", False
        job = server.job(request, request.questions())
        assert job.system is None and "chat template" in job.warnings[0]
        assert job.problem(0) == Problem("12 + 30 =")
    finally:
        c.system_messages, c.prompts.system, c.prompts.chat_template = "per_row", None, True


def test_earlier_turns_are_named_in_the_streams_first_chunk(served):
    body = chat(("user", "1 + 1 ="), ("assistant", "2"), ("user", "12 + 30 =")).model_dump(exclude_none=True)
    with httpx.stream(
        "POST", f"{served[0]}/chat/completions", json={**body, "stream": True}, timeout=60
    ) as r:
        events = [line.removeprefix("data: ") for line in r.iter_lines() if line.startswith("data: ")]
    warnings = json.loads(events[0])["warnings"]
    assert len(warnings) == 1 and "2 earlier turns (roles ['user', 'assistant'])" in warnings[0]
    assert events[-1] == "[DONE]" and "warnings" not in json.loads(events[1])


def test_the_bundle_records_how_training_showed_system_messages():
    def module(problems, system=None):
        return SimpleNamespace(
            trainer=SimpleNamespace(datamodule=SimpleNamespace(train_problems=problems)),
            prompts=Prompts(system=system),
        )

    own = Problem.from_messages(
        [{"role": "system", "content": "Be terse."}, {"role": "user", "content": "1+1"}]
    )
    assert training_system_messages(module([Problem("2+2"), own])) == "per_row"
    assert training_system_messages(module([Problem("2+2")], system="You solve arithmetic.")) == "template"
    assert training_system_messages(module([Problem("2+2")])) == "none"
    assert training_system_messages(SimpleNamespace(trainer=SimpleNamespace(datamodule=None))) is None
