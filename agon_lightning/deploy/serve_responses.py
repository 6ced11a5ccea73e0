"""What ``agon serve`` answers: OpenAI's response and error bodies, usage of both stages, the event stream.

Every response is OpenAI's shape plus a documented ``agon`` field per choice (who drafted and
answered, the draft and the summary the answerer read) and ``usage.stages`` (each stage's
prompt and completion tokens; ``usage`` itself sums them). Where the model was not shown part of
the request as asked, a top-level ``warnings`` list says what (in a stream: in its first chunk).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi.responses import JSONResponse

from agon_lightning.deploy.serve_api import APIError
from agon_lightning.deploy.serve_engine import Choice, Job, Result
from agon_lightning.deploy.serve_queue import BatchQueue
from agon_lightning.game.names import BASE

log = logging.getLogger(__name__)


def usage(job: Job, result: Result) -> dict[str, Any]:
    """OpenAI's ``usage`` (both stages summed) with each stage's own counts in ``stages``."""
    first_of_question = [c for i, c in enumerate(result.choices) if i % job.n == 0]
    cascade = job.model.drafter is not None
    # A cascade's second-stage prompts differ choice by choice (each holds its own draft's summary).
    final_prompt = sum(c.final_prompt_tokens for c in (result.choices if cascade else first_of_question))
    stages = {
        "final": {
            "prompt_tokens": final_prompt,
            "completion_tokens": sum(c.final_tokens for c in result.choices),
        }
    }
    if cascade:
        stages = {
            "draft": {
                "prompt_tokens": result.draft_prompt_tokens,
                "completion_tokens": sum(c.draft_tokens for c in result.choices),
            },
            **stages,
        }
    prompt = sum(s["prompt_tokens"] for s in stages.values())
    completion = sum(s["completion_tokens"] for s in stages.values())
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "stages": stages,
    }


def agon_field(job: Job, choice: Choice) -> dict[str, Any]:
    """The ``agon`` extension of a choice: who drafted and answered (or the game whose answer graph
    answered), the draft and the summary read."""
    m = job.model
    if m.graph is not None:
        who = {"game": m.graph, "drafter": None, "answerer": None}
    else:
        who = {"drafter": m.drafter, "answerer": m.answerer or BASE}
    return who | {
        "draft": choice.draft, "summary": choice.summary, "draft_tokens": choice.draft_tokens,
        "draft_truncated": choice.draft_truncated,
    }  # fmt: skip


def response(job: Job, result: Result, chat: bool) -> dict[str, Any]:
    choices = []
    for i, c in enumerate(result.choices):
        body: dict[str, Any] = {"index": i, "finish_reason": c.finish_reason}
        if chat:
            body["message"] = {"role": "assistant", "content": c.text}
        else:
            body.update(text=c.text, logprobs=None)
        choices.append(body | {"agon": agon_field(job, c)})
    reply = {
        "id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
        "object": "chat.completion" if chat else "text_completion",
        "created": int(time.time()), "model": job.model.name, "choices": choices, "usage": usage(job, result),
    }  # fmt: skip
    return reply | ({"warnings": job.warnings} if job.warnings else {})


def error_response(err: APIError) -> JSONResponse:
    headers = {"Retry-After": "1"} if err.status == 503 else None
    return JSONResponse(err.body(), status_code=err.status, headers=headers)


async def stream(job: Job, queue: BatchQueue, chat: bool, include_usage: bool) -> AsyncIterator[str]:
    """Server-sent events: each choice's role, its draft and summary, the final stage's text as it comes."""
    loop, events = asyncio.get_running_loop(), asyncio.Queue()

    def put(item: Any) -> None:  # from the worker thread
        try:
            loop.call_soon_threadsafe(events.put_nowait, item)
        except RuntimeError:  # the loop is gone (client left at shutdown): nothing to tell
            pass

    job.emit = lambda index, item: put((index, item))
    job.future.add_done_callback(lambda _: put(None))
    queue.submit(job)
    rid, created = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}", int(time.time())

    def chunk(choices: list[dict[str, Any]], **extra: Any) -> str:
        body = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion", "created": created,
                "model": job.model.name, "choices": choices, **extra}  # fmt: skip
        return f"data: {json.dumps(body)}\n\n"

    def delta(index: int, text: str | None, finish: str | None = None, **extra: Any) -> dict[str, Any]:
        if chat:
            body = {"content": text} if text is not None else {}
            return {"index": index, "delta": body, "finish_reason": finish, **extra}
        return {"index": index, "text": text or "", "finish_reason": finish, "logprobs": None, **extra}

    if chat:  # warnings come of chat messages only
        warned = {"warnings": job.warnings} if job.warnings else {}
        yield chunk([{"index": i, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
                     for i in range(job.rows)], **warned)  # fmt: skip
    else:
        yield ": accepted\n\n"  # an SSE comment: the response starts once the job is queued
    while (event := await events.get()) is not None:
        index, item = event
        if isinstance(item, Choice):  # the draft is known: the first stage is done
            yield chunk([delta(index, None, agon=agon_field(job, item))])
        else:
            yield chunk([delta(index, item)])
    try:
        result = job.future.result()
    except APIError as err:
        yield f"data: {json.dumps(err.body())}\n\n"
    except Exception as err:  # noqa: BLE001 — reported to the client and logged; the server goes on
        log.exception("a streamed request failed")
        yield f"data: {json.dumps(APIError(500, f'{type(err).__name__}: {err}', 'server_error').body())}\n\n"
    else:
        yield chunk([delta(i, None, c.finish_reason) for i, c in enumerate(result.choices)])
        if include_usage:
            yield chunk([], usage=usage(job, result))
    yield "data: [DONE]\n\n"
