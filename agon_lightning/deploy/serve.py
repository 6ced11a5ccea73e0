"""``agon serve``: a bundle's deployed policy behind an OpenAI-compatible HTTP endpoint.

::

    agon serve --bundle runs/agon/checkpoints/last [--backend hf|vllm] [--host 127.0.0.1] [--port 8000]

``POST /v1/chat/completions``, ``POST /v1/completions`` and ``GET /v1/models`` speak the OpenAI
API, so evaluation harnesses, chat front ends and the ``openai`` client work unchanged; ``model``
picks a cascade (``cascade_ab``, ``cascade_ba``, …), the game's answer graph (``game``, in a bundle of
a game that deploys as one), an adapter alone (``alpha``, …) or ``base`` (default: the bundle's
deployed policy). Each choice of a cascade carries the draft and its summary in an ``agon`` field, and
``usage`` counts both stages (``usage.stages.draft`` / ``usage.stages.final``; for ``game``, the final
stage of its graph). The game's answer graph decodes greedily, one completion per question: ``n`` must
be 1, and a temperature asked for is named in ``warnings``. What of a request the model
was not shown as asked (a system message the bundle's training never showed, earlier turns) is
named in the response's ``warnings``.

**Bounded work.** A request's body (``--max-body-bytes``), its prompts (``--max-prompts``), ``n``,
``max_tokens`` and the tokens in flight over every request (``--max-tokens-in-flight``) have limits
checked before the model sees it (:mod:`agon_lightning.deploy.serve_limits`); a job runs in parts
of ``--max-batch-size`` rows with other clients' requests between them
(:mod:`agon_lightning.deploy.serve_queue`).

**Why FastAPI + uvicorn.** They are the serving stack of vLLM's own OpenAI server (installed
with it), well kept, typed with pydantic (a bad request is a 400 before it reaches the model)
and stream with server-sent events. LitServe, Lightning's server, runs the model in worker
processes behind its own batching loop made for one ``predict`` per request; the cascade needs
requests grouped by sampling settings, a first stage whose output feeds a second, and a stream
of only the second: a plain ASGI app with one worker thread (:mod:`agon_lightning.deploy.serve_queue`)
says that in less code. SIGTERM and SIGINT stop the server gracefully: it stops accepting,
answers what it has accepted (streams included, up to 60 s), then exits with status 0.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

try:
    from fastapi import FastAPI, Request
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.exceptions import HTTPException
except ImportError as err:  # an optional dependency: say how to get it
    raise ImportError(
        f"agon serve needs FastAPI and uvicorn ({err}); install them: pip install 'agon-lightning[serve]'"
    ) from err

from agon_lightning.adapters.peft_boundary import base_model
from agon_lightning.deploy.bundle import bundle_parser
from agon_lightning.deploy.cascade import BACKENDS, Cascade
from agon_lightning.deploy.serve_api import (
    APIError,
    ChatRequest,
    CompletionRequest,
    SamplingRequest,
    shown_system,
    validation_error,
)
from agon_lightning.deploy.serve_engine import CascadeRunner, Job, Sampling, served_models
from agon_lightning.deploy.serve_limits import DEFAULT_MAX_BODY_BYTES, DEFAULT_MAX_PROMPTS, BodyLimit
from agon_lightning.deploy.serve_queue import DEFAULT_MAX_TOKENS_IN_FLIGHT, BatchQueue
from agon_lightning.deploy.serve_responses import error_response, response, stream
from agon_lightning.rollout.hf import HFRollout

log = logging.getLogger(__name__)


class Server:
    """The served bundle: its models, limits and queue (one per app).

    Args:
        cascade: The loaded bundle.
        backend: ``hf`` or ``vllm`` (what samples; seeds are honoured on ``hf`` only).
        max_tokens: Largest ``max_tokens`` accepted (default: the model's context length).
        max_n: Largest ``n`` accepted.
        max_prompts: Most prompts in one request.
    """

    def __init__(
        self,
        cascade: Cascade,
        backend: str = "hf",
        max_tokens: int | None = None,
        max_n: int = 16,
        max_prompts: int = DEFAULT_MAX_PROMPTS,
    ) -> None:
        self.cascade, self.backend, self.max_n, self.max_prompts = cascade, backend, max_n, max_prompts
        self.models, self.default = served_models(cascade)
        config = base_model(cascade.policy).config
        self.context = getattr(config, "max_position_embeddings", None)
        self.max_tokens = max_tokens or self.context
        self.runner = CascadeRunner(cascade, self.context)
        self.created = int(time.time())

    def job(self, req: SamplingRequest, questions: list[str]) -> Job:
        """The request as a queued job; an :class:`APIError` names what cannot be served."""
        name = req.model or self.default
        if name not in self.models:
            raise APIError(
                404, f"the model {name!r} does not exist; this server serves {list(self.models)}",
                param="model", code="model_not_found",
            )  # fmt: skip
        where = "prompt" if isinstance(req, CompletionRequest) else "messages"
        if len(questions) > self.max_prompts:
            raise APIError(
                400, f"a request takes at most {self.max_prompts} prompts (agon serve --max-prompts), got "
                f"{len(questions)}; send them in several requests", param=where, code="too_many_prompts",
            )  # fmt: skip
        if req.n > self.max_n:
            raise APIError(400, f"n must be <= {self.max_n} (agon serve --max-n), got {req.n}", param="n")
        graph = self.models[name].graph is not None
        if graph and req.n != 1:
            raise APIError(
                400, f"n must be 1 for the model {name!r} (the game's answer graph gives one greedy completion per "
                f"question), got {req.n}", param="n",
            )  # fmt: skip
        budget = req.budget or self.cascade.rollout.max_new_tokens
        if self.max_tokens is not None and budget > self.max_tokens:
            raise APIError(
                400, f"max_tokens must be <= {self.max_tokens} (this model's limit), got {budget}",
                param="max_tokens", code="max_tokens_exceeded",
            )  # fmt: skip
        if req.seed is not None and self.backend != "hf":
            raise APIError(
                400, "seed is honoured on the hf backend only (agon serve --backend hf)", param="seed"
            )
        for i, q in enumerate(questions):
            if not q.strip():
                raise APIError(400, f"problem {i} is empty", param=where)
        rollout = self.cascade.rollout
        temperature = rollout.temperature if req.temperature is None else req.temperature
        top_k = rollout.top_k if req.top_k is None else max(req.top_k, 0)
        if temperature == 0 or graph:  # greedy: one key for every greedy request, whatever else it says
            sampling = Sampling(True, rollout.temperature, 1.0, 0, budget)
        else:
            sampling = Sampling(
                False, temperature, rollout.top_p if req.top_p is None else req.top_p, top_k, budget
            )
        c = self.cascade
        system, warnings = (
            shown_system(req, c.system_messages, c.prompts, c.tokenizer)
            if isinstance(req, ChatRequest)
            else (None, [])
        )
        if graph and req.temperature not in (None, 0):
            warnings.append(
                f"temperature={req.temperature} was not applied: the model {name!r} (the game's answer graph) decodes "
                "greedily"
            )
        return Job(
            self.models[name], questions, req.n, sampling, req.seed, list(req.stop or []), system, warnings
        )

    def model_list(self) -> dict[str, Any]:
        data = [
            {"id": m.name, "object": "model", "created": self.created, "owned_by": "agon",
             "agon": {"drafter": m.drafter, "answerer": m.answerer, "default": m.name == self.default,
                      "description": m.describe(), **({"game": m.graph} if m.graph else {})}}
            for m in self.models.values()
        ]  # fmt: skip
        return {"object": "list", "data": data}


def create_app(
    server: Server,
    queue: BatchQueue | None = None,
    api_key: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
) -> FastAPI:
    """The ASGI app: the OpenAI routes over ``server``, its batching queue started and stopped with the
    app, request bodies over ``max_body_bytes`` refused (:class:`~agon_lightning.deploy.serve_limits.BodyLimit`)."""
    queue = queue or BatchQueue(server.runner.run)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        queue.start()
        yield
        await asyncio.to_thread(queue.stop)  # the queued requests are answered first

    app = FastAPI(title="agon serve", lifespan=lifespan)
    app.state.server, app.state.queue = server, queue
    app.add_middleware(BodyLimit, limit=max_body_bytes)  # inside the key check: a stranger's body is not read

    @app.middleware("http")
    async def authorize(request: Request, call_next: Any) -> Any:
        if api_key and request.url.path.startswith("/v1"):
            given = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
            if not secrets.compare_digest(given.encode(), api_key.encode()):
                return error_response(APIError(401, "incorrect or missing API key", code="invalid_api_key"))
        return await call_next(request)

    @app.exception_handler(APIError)
    async def api_error(request: Request, err: APIError) -> JSONResponse:
        return error_response(err)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request: Request, err: RequestValidationError) -> JSONResponse:
        return error_response(validation_error(list(err.errors())))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException) -> JSONResponse:
        kind = "not_found_error" if err.status_code == 404 else "invalid_request_error"
        return error_response(
            APIError(err.status_code, f"{request.method} {request.url.path}: {err.detail}", kind)
        )

    @app.exception_handler(Exception)
    async def server_error(request: Request, err: Exception) -> JSONResponse:
        log.exception("request %s failed", request.url.path)
        return error_response(APIError(500, f"{type(err).__name__}: {err}", "server_error"))

    async def answer(req: ChatRequest | CompletionRequest, chat: bool) -> Any:
        job = server.job(req, req.questions())
        if req.stream:
            include = bool(req.stream_options and req.stream_options.include_usage)
            events = stream(job, queue, chat, include)
            first = await anext(events)  # a full queue or a bad request fails here, before the 200
            return StreamingResponse(_prepend(first, events), media_type="text/event-stream")
        result = await asyncio.wrap_future(queue.submit(job).future)
        return response(job, result, chat)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", "batches": queue.batches}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return server.model_list()

    @app.post("/v1/chat/completions")
    async def chat_completions(req: ChatRequest) -> Any:
        return await answer(req, chat=True)

    @app.post("/v1/completions")
    async def completions(req: CompletionRequest) -> Any:
        return await answer(req, chat=False)

    return app


async def _prepend(first: str, rest: AsyncIterator[str]) -> AsyncIterator[str]:
    yield first
    async for piece in rest:
        yield piece


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free one).

    It listens before the address is printed: a client that connects as soon as it reads the line
    waits in the backlog until uvicorn accepts, rather than being refused while uvicorn starts.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(socket.SOMAXCONN)
    return sock


def uvicorn_server(config: Any) -> Any:
    """uvicorn's server, shutting down gracefully on SIGTERM/SIGINT and then returning (exit status 0).

    uvicorn itself re-raises the signal once it has shut down, so the process would end by the
    signal before ``serve_main`` could say it stopped.
    """
    import signal

    import uvicorn

    class GracefulServer(uvicorn.Server):
        @contextmanager
        def capture_signals(self) -> Iterator[None]:
            signals = (signal.SIGINT, signal.SIGTERM)
            previous = {s: signal.signal(s, self.handle_exit) for s in signals}
            try:
                yield
            finally:
                for s, handler in previous.items():
                    signal.signal(s, handler)

    return GracefulServer(config)


def build_parser() -> Any:
    parser = bundle_parser(
        "agon serve", "Serve a bundle's deployed policy behind an OpenAI-compatible HTTP endpoint."
    )
    parser.add_argument(
        "--backend", default=None, choices=sorted(BACKENDS),
        help="sample with transformers (hf) or one vLLM engine holding every adapter (vllm); default: the bundle's",
    )  # fmt: skip
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    parser.add_argument(
        "--port", type=int, default=8000, help="port (0: any free port; the one taken is printed)"
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("AGON_API_KEY"),
        help="require 'Authorization: Bearer KEY' (or AGON_API_KEY)",
    )
    parser.add_argument(
        "--max-batch-size", type=int, default=32,
        help="most sequences (prompts x n) per batch; a larger request runs in parts, others between them",
    )  # fmt: skip
    parser.add_argument("--max-queue", type=int, default=256, help="most requests waiting; more get 503")
    parser.add_argument(
        "--max-prompts",
        type=int,
        default=DEFAULT_MAX_PROMPTS,
        help="most prompts in one request; more get 400",
    )
    parser.add_argument(
        "--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
        help="largest request body; larger gets 413 before it is read",
    )  # fmt: skip
    parser.add_argument(
        "--max-tokens-in-flight", type=int, default=DEFAULT_MAX_TOKENS_IN_FLIGHT,
        help="most prompts x n x max_tokens over the requests queued and running; a request over it alone "
        "gets 400, one that does not fit beside them 503",
    )  # fmt: skip
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="how long a batch waits for company")
    parser.add_argument(
        "--max-tokens", type=int, default=None, help="largest max_tokens (default: the context)"
    )
    parser.add_argument("--max-n", type=int, default=16, help="largest n a request may ask for")
    parser.add_argument(
        "--device", default=None, help="cpu, cuda, cuda:1, ... (default: cuda when available)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    return parser


def serve_main(argv: list[str] | None = None) -> None:
    """Entry point of ``agon serve``: load the bundle, warm it up, serve until SIGTERM or SIGINT."""
    import torch
    import uvicorn

    parser = build_parser()
    args = parser.parse_args(argv)
    for option in (
        "max_batch_size",
        "max_queue",
        "max_prompts",
        "max_body_bytes",
        "max_tokens_in_flight",
        "max_n",
    ):
        if getattr(args, option) < 1:
            parser.error(f"--{option.replace('_', '-')} must be >= 1, got {getattr(args, option)}")
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    cascade = Cascade.from_pretrained(args.bundle, args.device, args.dtype, args.base_model, args.backend)
    backend = "hf" if isinstance(cascade.rollout, HFRollout) else "vllm"
    server = Server(cascade, backend, args.max_tokens, args.max_n, args.max_prompts)
    queue = BatchQueue(
        server.runner.run,
        args.max_batch_size,
        args.max_queue,
        args.batch_wait_ms / 1000,
        args.max_tokens_in_flight,
    )
    warm = server.job(CompletionRequest(prompt="1", max_tokens=1, temperature=0), ["1"])
    server.runner.run(
        [warm.take(warm.rows)]
    )  # the first request does not pay for start-up (a vLLM engine starts here)
    warm.future.result()
    sock = bind(args.host, args.port)
    host, port = sock.getsockname()[:2]
    app = create_app(server, queue, args.api_key, args.max_body_bytes)
    config = uvicorn.Config(app, log_level=args.log_level, timeout_graceful_shutdown=60)
    print(
        f"agon serve: http://{host}:{port}/v1 ({args.backend or backend}; models {', '.join(server.models)}; "
        f"default {server.default})",
        flush=True,
    )
    uvicorn_server(config).run(sockets=[sock])
    print("agon serve: stopped", flush=True)
