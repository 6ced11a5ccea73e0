"""Plain HTTP to the vLLM servers of :class:`~agon_lightning.rollout.server.VLLMServerRollout`.

One :class:`Replica` per server URL; every admin call (loading or unloading an adapter) goes to
each replica (:func:`fan_out`), concurrently. A server that is down, answers with an error or
does not answer within the timeout raises a :class:`ReplicaError` whose message is one line
naming the server, the call and the adapter, and saying how to continue. No Ray, no
collective: a replica is a URL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from agon_lightning.infra.errors import one_line

T = TypeVar("T")
HTTPX_HINT = "pip install 'httpx>=0.27' (or pip install 'agon-lightning[vllm-server]')"


class ReplicaError(RuntimeError):
    """A vLLM server did not answer a request; the message is one line naming it and the request.

    The run stops on it; the last checkpoint written resumes with ``--ckpt_path last`` once the
    server answers again (the adapters are sent again then).
    """

    resumable = True  # the checkpoint callback names the checkpoint to resume from


class AdapterVersionError(RuntimeError):
    """A sample came from another adapter version than the one the trainer expects."""


def replica_error(url: str, call: str, adapter: str | None, why: str) -> ReplicaError:
    """The :class:`ReplicaError` for ``call`` (``POST /v1/completions``) to ``url`` about ``adapter``."""
    what = "the base" if adapter is None else f"adapter {adapter}"
    return ReplicaError(
        one_line(
            f"vLLM server {url} failed on {call} ({what}): {why}; the run stops: once the server "
            "answers again, rerun the same command with --ckpt_path last"
        )
    )


def check_url(url: str) -> str:
    """``url`` without a trailing slash; a ValueError unless it is an ``http(s)://HOST[:PORT]`` address."""
    if not isinstance(url, str) or not url.startswith(("http://", "https://")) or "://" == url[-3:]:
        raise ValueError(f"a vLLM server URL looks like http://HOST:PORT, got {url!r}")
    return url.rstrip("/")


class Replica:
    """One vLLM server, reached at ``url``.

    Args:
        url: ``http://HOST:PORT`` of the server (its OpenAI-compatible API is under ``/v1``).
        timeout_s: Seconds a request may take before the server counts as gone.
        transport: An ``httpx`` transport to use instead of the network (tests).
    """

    def __init__(self, url: str, timeout_s: float, transport: Any = None) -> None:
        try:
            import httpx
        except ImportError as err:
            raise ImportError(f"VLLMServerRollout talks HTTP through httpx ({err}); {HTTPX_HINT}") from err
        self.url = check_url(url)
        self.timeout_s = timeout_s
        self._httpx = httpx
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s, transport=transport)

    def call(self, method: str, path: str, adapter: str | None, body: dict[str, Any] | None = None) -> Any:
        """The JSON answer (``None`` for a plain-text one) of ``method path``; a ReplicaError if none came."""
        call = f"{method} {path}"
        httpx = self._httpx
        try:
            response = self._client.request(method, path, json=body)
        except httpx.TimeoutException as err:
            raise replica_error(
                self.url, call, adapter, f"no answer within {self.timeout_s:g} s ({type(err).__name__})"
            ) from err
        except httpx.HTTPError as err:
            raise replica_error(
                self.url, call, adapter, f"unreachable ({type(err).__name__}: {err})"
            ) from err
        if response.status_code >= 400:
            raise replica_error(
                self.url, call, adapter, f"answered HTTP {response.status_code}: {response.text[:300]}"
            )
        if "json" not in response.headers.get("content-type", ""):
            return None  # load/unload answer in plain text
        return response.json()

    def close(self) -> None:
        self._client.close()


def fan_out(replicas: Sequence[Replica], work: Callable[[Replica], T]) -> list[T]:
    """``work(replica)`` for every replica at once; the results in order, or the first replica's error."""
    if len(replicas) == 1:
        return [work(replicas[0])]
    with ThreadPoolExecutor(max_workers=len(replicas)) as pool:
        futures = [pool.submit(work, r) for r in replicas]
        return [f.result() for f in futures]  # re-raises the first failure in replica order


def run_all(jobs: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``jobs`` concurrently (one thread each); their results in order, or the first error."""
    if len(jobs) == 1:
        return [jobs[0]()]
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = [pool.submit(job) for job in jobs]
        return [f.result() for f in futures]
