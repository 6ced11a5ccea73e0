"""How much one request may ask of ``agon serve``: its body's bytes, its prompts, its tokens.

Every limit is checked before the request reaches the model, so an oversize request costs the
server next to nothing and other clients do not notice it:

- the body (:class:`BodyLimit`, ``--max-body-bytes``): a ``Content-Length`` over the limit is a
  413 before a byte of the body is read; a body without one (chunked) is read until it passes
  the limit, then refused. What is read is held, at most the limit plus one network read, and
  handed to the app; what the client still sends after a 413 is read and dropped by uvicorn,
  so the client gets the answer rather than a broken connection.
- the prompts of one request (``--max-prompts``, :meth:`Server.job
  <agon_lightning.deploy.serve.Server.job>`): more is a 400.
- the tokens in flight (``--max-tokens-in-flight``,
  :class:`~agon_lightning.deploy.serve_queue.BatchQueue`): prompts x n x max_tokens summed over the
  work queued and running.
"""

from __future__ import annotations

from typing import Any

from agon_lightning.deploy.serve_api import APIError
from agon_lightning.deploy.serve_responses import error_response

DEFAULT_MAX_BODY_BYTES = 8 * 2**20
DEFAULT_MAX_PROMPTS = 256


def body_too_large(size: int | None, limit: int) -> APIError:
    """The 413 for a body of ``size`` bytes (``None``: more than ``limit``, still arriving)."""
    what = f"{size} bytes" if size is not None else f"more than {limit} bytes"
    return APIError(
        413,
        f"the request body is {what}; this server reads at most {limit} (agon serve --max-body-bytes): "
        "send fewer or shorter prompts per request",
        code="request_body_too_large",
    )


class BodyLimit:
    """ASGI middleware: a request body over ``limit`` bytes is refused with a 413 in OpenAI's error shape.

    Args:
        app: The ASGI app it guards.
        limit: Most bytes of a request body.
    """

    def __init__(self, app: Any, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"the body limit must be >= 1 byte, got {limit}")
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.limit:
            await error_response(body_too_large(int(declared), self.limit))(scope, receive, send)
            return
        chunks: list[bytes] = []
        size, more = 0, True
        while more:
            message = await receive()
            if message["type"] == "http.disconnect":  # the client left: there is no one to answer
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.limit:
                chunks.clear()
                await error_response(body_too_large(None, self.limit))(scope, receive, send)
                return
            chunks.append(chunk)
            more = message.get("more_body", False)
        body: bytes | None = b"".join(chunks)
        chunks.clear()

        async def replay() -> dict[str, Any]:
            nonlocal body
            if body is None:  # the body was read: what comes now is the client leaving
                return await receive()
            message, body = {"type": "http.request", "body": body, "more_body": False}, None
            return message

        await self.app(scope, replay, send)
