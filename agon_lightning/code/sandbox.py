"""Run untrusted Python programs, one process tree per run, and say how each one ended.

The model writes the programs, so they are hostile by assumption: they may loop, fork, allocate,
flood stdout, write files, open sockets, read secrets or try to outlive the check. Each program
gets a launcher process (see :mod:`agon_lightning.code.launcher`) that runs it once per test,
each time in a fresh process tree with every protection the machine allows, and reports which
ones took effect, so a deployment can *require* the ones it relies on instead of trusting them.
This module decides which programs may run and as whom; :mod:`agon_lightning.code.session`
runs one program on input after input.

Programs are bounded by a pool of ``workers`` slots. When the trainer runs as root, each
running program also holds a uid of its own, claimed with a file lock so that no other
sandbox on the machine (another instance, another rank) uses it at the same time: then
``RLIMIT_NPROC`` (which does not bind root) caps one program's processes, and a fork bomb in
one program cannot starve the others.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import sys
import tempfile
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from agon_lightning.code.session import PROTECTIONS, RunResult, SandboxError, Session

UID_LOCKS = os.path.join(tempfile.gettempdir(), "agon-sandbox-uids")  # one lock file per uid in use


@dataclass
class SandboxConfig:
    """How programs are confined.

    Attributes:
        workers: Programs that may run at once (the pool size).
        python: Interpreter for the programs; ``None`` = the one running the trainer.
        site_packages: Let programs import installed packages (numpy, ...). Off by default:
            contest programs get the standard library, and start-up is ~4x faster.
        namespaces: Try PID, network and mount namespaces (needs root or CAP_SYS_ADMIN).
        drop_privileges: When running as root, run each program as an unprivileged uid of
            its own, from ``[uid_base, uid_base + uid_count)``.
        uid_base: First uid of that range; no account may own a uid in it.
        uid_count: Size of the range: at least the programs that run at once on the machine.
        max_processes: ``RLIMIT_NPROC`` (processes and threads of the program's uid).
        max_open_files: ``RLIMIT_NOFILE``.
        max_output_bytes: Cap on stdout, on stderr and on any file the program writes
            (``RLIMIT_FSIZE``); reaching it is an ``output_limit``.
        workdir_bytes: Size of the program's private tmpfs working directory.
        wall_factor: Wall-clock limit = ``wall_factor * time_limit + wall_slack_seconds``; the
            verdict itself uses CPU time, the wall limit only catches sleepers and stalls.
        wall_slack_seconds: See ``wall_factor``.
        require: Protections (names from :data:`PROTECTIONS`) without which a run raises
            :class:`SandboxError` instead of running unconfined.
        tmp_dir: Where run directories are created; ``None`` = the system default.
    """

    workers: int = 2
    python: str | None = None
    site_packages: bool = False
    namespaces: bool = True
    drop_privileges: bool = True
    uid_base: int = 60000
    uid_count: int = 1024
    max_processes: int = 16
    max_open_files: int = 64
    max_output_bytes: int = 8 << 20
    workdir_bytes: int = 16 << 20
    wall_factor: float = 2.0
    wall_slack_seconds: float = 1.0
    require: list[str] = field(default_factory=list)
    tmp_dir: str | None = None

    def __post_init__(self) -> None:
        for name in (
            "workers",
            "uid_count",
            "max_processes",
            "max_open_files",
            "max_output_bytes",
            "workdir_bytes",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"SandboxConfig.{name} must be >= 1, got {getattr(self, name)!r}")
        if self.wall_factor < 1.0 or self.wall_slack_seconds < 0:
            raise ValueError(
                f"SandboxConfig needs wall_factor >= 1 and wall_slack_seconds >= 0, "
                f"got {self.wall_factor!r} and {self.wall_slack_seconds!r}"
            )
        unknown = sorted(set(self.require) - set(PROTECTIONS))
        if unknown:
            raise ValueError(f"SandboxConfig.require has unknown protections {unknown}; known: {PROTECTIONS}")


class Sandbox:
    """Runs programs under the configured limits, at most ``workers`` at once; thread-safe.

    Args:
        config: Limits and protections; defaults to :class:`SandboxConfig`.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.interpreter = os.path.realpath(self.config.python or sys.executable)
        self.drop_privileges = self.config.drop_privileges and os.geteuid() == 0
        if os.geteuid() == 0 and not self.drop_privileges:
            warnings.warn(
                "Sandbox: drop_privileges is off while running as root: programs run as root, where "
                "RLIMIT_NPROC does not bind and, without namespaces, kill(-1) reaches every process",
                stacklevel=2,
            )
        if self.drop_privileges:
            uids = range(self.config.uid_base, self.config.uid_base + self.config.uid_count)
            taken = sorted({(p.pw_uid, p.pw_name) for p in pwd.getpwall() if p.pw_uid in uids})
            if taken:
                raise ValueError(
                    f"SandboxConfig uid range [{uids.start}, {uids.stop}) holds accounts {taken}"
                )
        self._slots = threading.BoundedSemaphore(self.config.workers)

    @contextmanager
    def session(self, source: str, time_limit: float, memory_bytes: int) -> Iterator[Session]:
        """Hold a slot and a launcher for ``source``; each ``session.run(stdin)`` is a fresh run.

        Args:
            source: The Python program.
            time_limit: CPU seconds allowed per run.
            memory_bytes: Address-space limit per run.
        """
        with self._slots, self._claim_uid() as uid:
            session = Session(self, source, time_limit, memory_bytes, uid)
            try:
                yield session
            finally:
                session.close()

    @contextmanager
    def _claim_uid(self) -> Iterator[int]:
        """A uid of the range that no sandbox on this machine is using, held until the block ends.

        Without privilege dropping the uid is unused (the program runs as the trainer's user).
        """
        if not self.drop_privileges:
            yield -1
            return
        os.makedirs(UID_LOCKS, mode=0o700, exist_ok=True)
        for uid in range(self.config.uid_base, self.config.uid_base + self.config.uid_count):
            fd = os.open(os.path.join(UID_LOCKS, str(uid)), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield uid
            finally:
                os.close(fd)  # releases the lock
            return
        raise SandboxError(f"all {self.config.uid_count} sandbox uids from {self.config.uid_base} are in use")

    def run(self, source: str, stdin: str, time_limit: float, memory_bytes: int) -> RunResult:
        """Run ``source`` once on ``stdin`` (see :meth:`Session.run`)."""
        with self.session(source, time_limit, memory_bytes) as session:
            return session.run(stdin)

    def probe(self) -> dict[str, bool]:
        """Run a trivial program and return which protections took effect on this machine."""
        return self.run("print('ok')", "", time_limit=5.0, memory_bytes=512 << 20).protections
