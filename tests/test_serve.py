"""``agon serve`` through the real ``openai`` client: a server on 127.0.0.1 that the module starts and stops.

The bundle is the shipped tiny Qwen3 with fresh adapters (``beta`` with its Gaussian init, so
the two differ) and the default config's prompts (``benchmarks.bench_serve.make_bundle``). One
``agon serve`` process (the installed command) serves every test; the last one stops it with
SIGTERM while a stream is in flight.
"""

from __future__ import annotations

import concurrent.futures
import json
import signal
import sys
import time
from pathlib import Path

import pytest

# the serve extra (FastAPI, uvicorn) and the client the tests speak through; dev brings all three
pytest.importorskip("fastapi", reason="needs the serve extra: pip install -e '.[serve]'")
pytest.importorskip("openai", reason="needs the openai client: pip install -e '.[dev]'")
pytest.importorskip("httpx", reason="needs httpx: pip install -e '.[dev]'")
import httpx  # noqa: E402
import openai  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from agon_lightning.cli import main  # noqa: E402
from agon_lightning.data.files import write_problems
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.deploy.cascade import Cascade
from agon_lightning.deploy.serve import Server, create_app
from agon_lightning.deploy.serve_engine import Job, Sampling, ServedModel
from agon_lightning.deploy.serve_queue import BatchQueue, QueueFull
from agon_lightning.deploy.serve_stream import TextDeltas, cut_at_stop

# benchmarks/ lives in the checkout, not in the installed package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.bench_serve import launch, make_bundle  # noqa: E402

MAX_NEW = 40


@pytest.fixture(scope="module")
def bundle(tmp_path_factory) -> Path:
    return make_bundle(tmp_path_factory.mktemp("serve") / "bundle", MAX_NEW)


@pytest.fixture(scope="module")
def questions(tmp_path_factory) -> tuple[list[str], Path]:
    dm = ReasoningGymDataModule(train_size=4, val_size=16, val_seed=11)
    problems = dm.val_problems[:16]
    return [p.question for p in problems], write_problems(problems, tmp_path_factory.mktemp("q") / "q.jsonl")


@pytest.fixture(scope="module")
def served(bundle):
    """``(base URL, process, output)`` of ``agon serve --port 0`` on the bundle, stopped after the module."""
    url, proc, lines = launch(bundle, "--batch-wait-ms", "20")
    yield url, proc, lines
    if proc.poll() is None:
        proc.kill()
        proc.wait()


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[0], api_key="unused", max_retries=0, timeout=120)


def test_models_lists_both_cascades_each_adapter_and_the_base(client):
    models = client.models.list().data
    assert [m.id for m in models] == ["cascade_ab", "cascade_ba", "alpha", "beta", "base"]
    assert models[0].model_extra["agon"] == {
        "drafter": "alpha", "answerer": "beta", "default": True,
        "description": "alpha drafts, beta answers after reading its summary",
    }  # fmt: skip


def test_chat_and_completion_count_both_stages(client, bundle, questions):
    question = questions[0][0]
    chat = client.chat.completions.create(
        model="cascade_ab", messages=[{"role": "user", "content": question}], temperature=0
    )
    text = client.completions.create(model="cascade_ab", prompt=question, temperature=0)
    assert chat.choices[0].message.content == text.choices[0].text  # the same problem, the same cascade
    agon = chat.choices[0].model_extra["agon"]
    assert agon["drafter"] == "alpha" and agon["answerer"] == "beta" and agon["draft"]
    cascade = Cascade.from_pretrained(bundle)
    (expected,) = cascade.solve([question])
    assert chat.choices[0].message.content == expected.final.final and agon["draft"] == expected.final.draft
    assert agon["summary"] == expected.final.summary
    stages = chat.usage.model_extra["stages"]
    tok, prompts = cascade.tokenizer, cascade.prompts
    draft_prompt = len(
        tok(prompts.draft_prompt(tok, expected.problem), add_special_tokens=False)["input_ids"]
    )
    final_prompt = len(
        tok(
            prompts.challenge_prompt(tok, expected.problem, expected.final.summary), add_special_tokens=False
        )["input_ids"]
    )
    assert stages == {
        "draft": {"prompt_tokens": draft_prompt, "completion_tokens": expected.final.draft_tokens},
        "final": {"prompt_tokens": final_prompt, "completion_tokens": expected.final.final_tokens},
    }
    assert chat.usage.prompt_tokens == draft_prompt + final_prompt
    assert chat.usage.completion_tokens == expected.final.draft_tokens + expected.final.final_tokens
    assert chat.usage.total_tokens == chat.usage.prompt_tokens + chat.usage.completion_tokens
    single = client.completions.create(model="beta", prompt=question, temperature=0, n=2)
    assert set(single.usage.model_extra["stages"]) == {"final"}
    assert single.usage.prompt_tokens == draft_prompt  # one prompt, counted once for its two samples
    assert single.choices[0].text == single.choices[1].text  # greedy


def test_16_concurrent_requests_get_the_greedy_answers_of_agon_predict(
    client, served, bundle, questions, tmp_path
):
    texts, heldout = questions
    out = tmp_path / "predict.jsonl"
    main(["predict", "--bundle", str(bundle), "--input", str(heldout), "--output", str(out)])
    expected = [json.loads(line) for line in out.read_text().splitlines()]
    health = served[0].removesuffix("/v1") + "/health"
    before = httpx.get(health).json()["batches"]

    def ask(question: str):
        return client.chat.completions.create(
            model="cascade_ab", messages=[{"role": "user", "content": question}], temperature=0
        )

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, texts))
    batches = httpx.get(health).json()["batches"] - before
    assert [a.choices[0].message.content for a in answers] == [r["final"] for r in expected]
    assert [a.choices[0].model_extra["agon"]["draft"] for a in answers] == [r["draft"] for r in expected]
    assert len({r["final"] for r in expected}) > 1, "answers that do not depend on the question prove nothing"
    assert batches <= 8, f"16 concurrent requests ran in {batches} batches: they were not batched"


def test_stream_sends_the_draft_first_then_the_final_stage_token_by_token(client, questions):
    question = questions[0][1]
    plain = client.chat.completions.create(
        model="cascade_ab", messages=[{"role": "user", "content": question}], temperature=0
    )
    chunks = list(
        client.chat.completions.create(
            model="cascade_ab", messages=[{"role": "user", "content": question}], temperature=0, stream=True,
            stream_options={"include_usage": True},
        )
    )  # fmt: skip
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(deltas) == plain.choices[0].message.content
    assert len(deltas) > 3  # piece by piece, not one block
    drafts = [c.choices[0].model_extra.get("agon") for c in chunks if c.choices]
    first_draft = next(i for i, d in enumerate(drafts) if d)
    assert drafts[first_draft]["draft"] == plain.choices[0].model_extra["agon"]["draft"]
    assert first_draft < next(i for i, c in enumerate(chunks) if c.choices and c.choices[0].delta.content)
    assert chunks[-1].usage.total_tokens == plain.usage.total_tokens
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == plain.choices[0].finish_reason


def test_seed_stop_and_n(client, questions):
    question = questions[0][2]
    kwargs = dict(model="alpha", prompt=question, temperature=1.0, n=3, max_tokens=24)
    first = client.completions.create(seed=7, **kwargs)
    again = client.completions.create(seed=7, **kwargs)
    assert [c.text for c in first.choices] == [c.text for c in again.choices] and len(first.choices) == 3
    greedy = client.completions.create(model="alpha", prompt=question, temperature=0).choices[0].text
    assert "=" in greedy
    cut = client.completions.create(model="alpha", prompt=question, temperature=0, stop=["="]).choices[0]
    assert cut.text == greedy[: greedy.index("=")] and cut.finish_reason == "stop"
    streamed = client.completions.create(
        model="alpha", prompt=question, temperature=0, stop=["="], stream=True
    )
    assert "".join(c.choices[0].text for c in streamed if c.choices) == cut.text


def test_bad_requests_are_openai_errors_and_the_server_lives_on(client, served):
    url = served[0]
    raw = httpx.post(
        f"{url}/chat/completions", content=b'{"messages": [', headers={"content-type": "application/json"}
    )
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    default = httpx.post(f"{url}/completions", json={"prompt": "1+1", "max_tokens": 2}, timeout=60).json()
    assert default["model"] == "cascade_ab"  # the bundle's cascade when a request names none
    with pytest.raises(openai.BadRequestError, match="temperature"):
        client.chat.completions.create(
            model="cascade_ab", messages=[{"role": "user", "content": "1+1"}], temperature=5
        )
    with pytest.raises(openai.BadRequestError, match="messages"):
        client.chat.completions.create(messages=[], model="alpha")
    with pytest.raises(openai.BadRequestError, match="last message"):
        client.chat.completions.create(model="cascade_ab", messages=[{"role": "assistant", "content": "hi"}])
    with pytest.raises(openai.BadRequestError, match="logprobs"):
        client.completions.create(model="alpha", prompt="1+1", logprobs=2)
    with pytest.raises(openai.NotFoundError, match="gpt-4o"):
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "1+1"}])
    with pytest.raises(openai.BadRequestError, match="max_tokens must be <= 512"):
        client.chat.completions.create(
            model="cascade_ab", messages=[{"role": "user", "content": "1+1"}], max_tokens=100_000
        )
    with pytest.raises(openai.BadRequestError, match="context"):  # within the limit, but not with this prompt
        client.completions.create(model="alpha", prompt="1+" * 200, max_tokens=500)
    assert len(client.models.list().data) == 5  # still serving


@pytest.fixture(scope="module")
def server(bundle) -> Server:
    return Server(Cascade.from_pretrained(bundle))


def test_api_key_and_a_full_queue(server):
    app = create_app(server, BatchQueue(server.runner.run, max_pending=1), api_key="s3cret")
    web = TestClient(app)  # no lifespan: the worker never starts, so the queue stays full
    body = {"messages": [{"role": "user", "content": "1+1"}]}
    assert web.post("/v1/chat/completions", json=body).status_code == 401
    assert web.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
    ok = {"Authorization": "Bearer s3cret"}
    assert web.get("/v1/models", headers=ok).status_code == 200
    app.state.queue.submit(server.job(app_request(), ["1+1"]))
    full = web.post("/v1/chat/completions", json=body, headers=ok)
    assert full.status_code == 503 and full.headers["retry-after"] == "1"
    assert full.json()["error"]["code"] == "queue_full"


def app_request():
    from agon_lightning.deploy.serve_api import CompletionRequest

    return CompletionRequest(prompt="1+1")


def test_the_queue_batches_compatible_jobs_only():
    greedy = Sampling(True, 1.0, 1.0, 0, 8)
    model = ServedModel("alpha", None, "alpha")
    ran: list[list[Job]] = []
    queue = BatchQueue(ran.append, max_rows=4, max_pending=5, wait_s=0)
    jobs = [
        Job(model, ["a"], 1, greedy), Job(model, ["b"], 1, Sampling(False, 0.7, 1.0, 0, 8)),
        Job(model, ["c", "d"], 1, greedy), Job(model, ["e"], 1, greedy, seed=3), Job(model, ["f", "g"], 1, greedy),
    ]  # fmt: skip
    for job in jobs:
        queue.submit(job)
    with pytest.raises(QueueFull):
        queue.submit(Job(model, ["h"], 1, greedy))
    queue.start()
    queue.stop(timeout=10)
    # oldest first; compatible jobs join up to 4 rows; a seeded job runs alone
    assert [[part.job.questions for part in batch] for batch in ran] == [
        [["a"], ["c", "d"]], [["b"]], [["e"]], [["f", "g"]],
    ]  # fmt: skip


def test_text_deltas_hold_back_what_may_become_a_stop_string():
    class Chars:
        def decode(self, ids, skip_special_tokens=True):
            return "".join(chr(i) for i in ids)

    sent: list[str] = []
    deltas = TextDeltas(Chars(), eos_ids=[0], stops=["STOP"], emit=sent.append)
    for c in "ab STxSTOP more":
        deltas.add(ord(c))
    deltas.finish()
    assert "".join(sent) == "ab STx" and cut_at_stop("ab STxSTOP more", ["STOP"]) == ("ab STx", True)
    sent.clear()
    deltas = TextDeltas(Chars(), eos_ids=[0], stops=["STOP"], emit=sent.append)
    for c in "abcST":
        deltas.add(ord(c))
    deltas.add(0)  # EOS: what was held back goes out
    assert "".join(sent) == "abcST" and len(sent) > 1


def test_sigterm_answers_the_stream_in_flight_then_exits(served, client, questions):
    """Last in the module: it stops the server."""
    _, proc, lines = served
    stream = client.chat.completions.create(
        model="cascade_ab",
        messages=[{"role": "user", "content": questions[0][3]}],
        temperature=0,
        stream=True,
    )
    chunks = iter(stream)
    first = next(chunks)
    proc.send_signal(signal.SIGTERM)
    rest = list(chunks)
    assert first.choices and rest and rest[-1].choices[0].finish_reason in ("stop", "length")
    assert proc.wait(timeout=60) == 0
    time.sleep(0.2)
    assert any("agon serve: stopped" in line for line in lines), "".join(lines)
    with pytest.raises(openai.APIConnectionError):
        client.models.list()
