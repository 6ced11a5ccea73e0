"""One run at a time in a checkpoint directory: a lock file naming the process that holds it.

Two fits writing into one directory replace each other's ``last.ckpt`` and bundle, and each
reports the survivor as its own. While a run trains, its checkpoint directory holds
``.agon.lock``: the holder's pid, host and start time, as JSON. A second run that finds it
refuses in one message naming the holder and the directory. A lock left by a run that died
(a pid no longer alive on this host) is taken over, with a line saying so.

How liveness is told: on one host the kernel knows. The holder keeps an exclusive ``flock`` on
the file for as long as it runs, and the kernel drops it when the process ends, however it
ends; two processes starting at the same moment cannot both get it. From another host (a shared
file system, a job requeued on another node) the pid means nothing, so the holder also touches
the file every :data:`HEARTBEAT_S` seconds; a lock from another host untouched for
:data:`STALE_AFTER_S` seconds is stale. On a file system without ``flock`` the pid alone decides.

Releasing deletes the file before letting the ``flock`` go, so a process that opened the old
file in between finds it gone and starts over on a new one (:meth:`RunLock.acquire` checks).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from agon_lightning.infra.errors import UsageError

LOCK_NAME = ".agon.lock"
HEARTBEAT_S = 30.0
STALE_AFTER_S = 300.0


class DirectoryRefused(UsageError):
    """A fit that may not write into a checkpoint directory (another run's, or one holding checkpoints)."""

    refused = True  # refused before it trained: RunOutputs lists nothing as this run's


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunLock:
    """The lock file of one directory, held by this process between :meth:`acquire` and :meth:`release`."""

    def __init__(self) -> None:
        self.path: Path | None = None
        self._fd: int | None = None
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def acquire(self, directory: str | Path) -> str | None:
        """Take the lock of ``directory`` (created if missing).

        Returns:
            A line to log when a dead run's lock was taken over, else ``None``.

        Raises:
            DirectoryRefused: a live run holds it; the message names its pid, host and the directory.
        """
        if self._fd is not None:
            raise RuntimeError(f"this process already holds {self.path}")
        path = Path(directory) / LOCK_NAME
        path.parent.mkdir(parents=True, exist_ok=True)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                claimed, note = _claim(fd, path)
            except BaseException:
                os.close(fd)
                raise
            if claimed:
                break
            os.close(fd)
        self.path, self._fd = path, fd
        self._stop.clear()
        self._heartbeat = threading.Thread(target=self._beat, name="agon-lock-heartbeat", daemon=True)
        self._heartbeat.start()
        return note

    def release(self) -> None:
        """Give the lock back and delete the file (only this process's own); no-op when not held."""
        if self._fd is None:
            return
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join()
            self._heartbeat = None
        fd, path = self._fd, self.path
        self._fd = None
        try:
            if path is not None and os.stat(path).st_ino == os.fstat(fd).st_ino:
                os.unlink(path)  # before the flock goes: see the module docstring
        except FileNotFoundError:
            pass
        finally:
            os.close(fd)  # drops the flock

    def _beat(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            try:
                os.utime(self._fd)  # type: ignore[arg-type]  # an fd: supported on Linux and macOS
            except (OSError, TypeError):  # closed meanwhile
                return


def _claim(fd: int, path: Path) -> tuple[bool, str | None]:
    """Lock ``fd`` (open on ``path``) and write this process in it: ``(claimed, line to log)``.

    Not claimed when the file was released and deleted between our open and our lock: try again.
    """
    flocked = _try_flock(fd)
    holder = _read(fd)
    try:
        same_file = os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        same_file = False
    if not same_file:  # released meanwhile (deleted, or replaced by a new run's)
        return False, None  # closing fd drops any flock we took on the deleted file
    if flocked is False:
        raise DirectoryRefused(busy_message(path, holder))
    note = None
    if holder and not _is_this_process(holder):
        if _still_running(holder, fd, flocked):
            raise DirectoryRefused(busy_message(path, holder))
        note = f"took over {path} from a run that is gone ({describe(holder)})"
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps(_this_process()).encode(), 0)
    return True, note


def _try_flock(fd: int) -> bool | None:
    """``True``: locked; ``False``: another process holds it; ``None``: this file system has no ``flock``."""
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as err:
        if err.errno in (errno.ENOLCK, errno.ENOSYS, errno.EOPNOTSUPP, errno.EINVAL):
            return None
        raise
    return True


def _read(fd: int) -> dict[str, Any]:
    try:
        found = json.loads(os.pread(fd, 4096, 0).decode(errors="replace") or "{}")
    except json.JSONDecodeError:
        return {}
    return found if isinstance(found, dict) else {}


def _this_process() -> dict[str, Any]:
    return {
        "pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(sys.argv)[:300],
    }  # fmt: skip


def _is_this_process(holder: dict[str, Any]) -> bool:
    return holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname()


def _still_running(holder: dict[str, Any], fd: int, flocked: bool | None) -> bool:
    """Whether the run named in a lock we could ``flock`` (or could not try to) may still be alive."""
    if holder.get("host") != socket.gethostname():
        return time.time() - os.fstat(fd).st_mtime < STALE_AFTER_S
    # On this host a live holder would still have the flock: a live pid here is a reused one.
    return flocked is None and isinstance(holder.get("pid"), int) and pid_alive(holder["pid"])


def describe(holder: dict[str, Any]) -> str:
    """``pid 123 on host node1, started 2025-01-01 12:00:00`` from a lock's content."""
    return f"pid {holder.get('pid', '?')} on host {holder.get('host', '?')}, started {holder.get('started', '?')}"


def busy_message(path: Path, holder: dict[str, Any]) -> str:
    """The refusal: who holds ``path``, and what to do."""
    here = holder.get("host") == socket.gethostname()
    gone = here and isinstance(holder.get("pid"), int) and not pid_alive(holder["pid"])
    why = (
        f" (that process has ended, but one it started still holds the lock: see `fuser -v {path}`)"
        if gone
        else ""
    )
    elsewhere = (
        f"; if that run has ended, the lock goes stale {STALE_AFTER_S:.0f} s after its last heartbeat, "
        f"or delete {path}"
        if not here
        else ""
    )
    return (
        f"another run is writing checkpoints into {path.parent} ({describe(holder)}{why}){elsewhere}; "
        "wait for it to finish, or give this run another --trainer.default_root_dir"
    )
