"""Run untrusted Python programs, one process tree per run, and say how each one ended.

The model writes the programs, so they are hostile by assumption: they may loop, fork, allocate,
flood stdout, write files, open sockets, read secrets or try to outlive the check. Each program
gets a launcher process (see :mod:`agon_lightning.code.launcher`) that runs it once per test,
each time in a fresh process tree with every protection the machine allows, and reports which
ones took effect, so a deployment can *require* the ones it relies on instead of trusting them.

Programs are bounded by a pool of ``workers`` slots. When the trainer runs as root, each
running program also holds a uid of its own, claimed with a file lock so that no other
sandbox on the machine (another instance, another rank) uses it at the same time: then
``RLIMIT_NPROC`` (which does not bind root) caps one program's processes, and a fork bomb in
one program cannot starve the others.
"""

from __future__ import annotations

import fcntl
import marshal
import math
import os
import pwd
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agon_lightning.code.launcher import kill, receive

LAUNCHER = Path(__file__).with_name("launcher.py")
UID_LOCKS = os.path.join(tempfile.gettempdir(), "agon-sandbox-uids")  # one lock file per uid in use
# The program runs under ``python -I -S``: no site-packages, no environment, fast start-up.
# ``-S`` also drops site's ``exit``/``quit`` builtins, which contest solutions call; put them back.
BOOTSTRAP = (
    "import builtins, sys\n"
    "builtins.exit = builtins.quit = sys.exit\n"
    "sys.argv = ['main.py']\n"
    "with open('main.py', 'rb') as f:\n"
    "    code = compile(f.read(), 'main.py', 'exec')\n"
    "exec(code, {'__name__': '__main__', '__file__': 'main.py', '__builtins__': builtins})\n"
)
STATUSES = ("ok", "runtime_error", "time_limit", "memory_limit", "output_limit")
PROTECTIONS = (
    "pid_namespace",
    "net_namespace",
    "mount_namespace",
    "private_proc",
    "readonly_root",
    "private_workdir",
    "dropped_privileges",
    "no_new_privs",
    "subreaper",
)


class SandboxError(RuntimeError):
    """The sandbox itself failed (not the program): nothing was judged."""


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


@dataclass
class RunResult:
    """How one program run on one input ended.

    Attributes:
        status: One of :data:`STATUSES`.
        stdout: Standard output (at most ``max_output_bytes``, decoded as UTF-8 with replacement).
        stderr: The last 4 KiB of standard error.
        exit_code: The exit status; ``-N`` when signal N ended the program (as in ``subprocess``).
        cpu_seconds: User + system CPU time of the program (and of children it waited for).
        wall_seconds: Wall-clock time from start to exit.
        max_rss_bytes: Peak resident memory.
        protections: Which protections took effect (see :data:`PROTECTIONS`).
    """

    status: str
    stdout: str
    stderr: str
    exit_code: int
    cpu_seconds: float
    wall_seconds: float
    max_rss_bytes: int
    protections: dict[str, bool]


def classify(report: dict[str, Any], time_limit: float, output_bytes: int, stderr: str, cap: int) -> str:
    """The status of a finished run (one of :data:`STATUSES`).

    Args:
        report: The launcher's report.
        time_limit: CPU seconds allowed.
        output_bytes: The larger of the stdout and stderr sizes.
        stderr: The tail of stderr.
        cap: ``max_output_bytes``; a stream that reached it was cut off.
    """
    code = report["exit_code"]
    if report["timed_out"] or code == -signal.SIGXCPU or report["cpu_seconds"] > time_limit:
        return "time_limit"
    if output_bytes >= cap:
        return "output_limit"
    if code != 0 and "MemoryError" in "\n".join(stderr.strip().splitlines()[-2:]):
        return "memory_limit"
    return "runtime_error" if code != 0 else "ok"


def exposure_plan(interpreter: str, run_dir: str) -> dict[str, str] | None:
    """How to make ``interpreter`` reachable for an unprivileged uid, or ``None`` when it already is.

    The prefix (``<prefix>/bin/python``) may sit below a directory that others cannot enter
    (``/root/.pyenv/...``); the launcher then hides that directory behind an empty tmpfs and
    binds the prefix back at its own path, so the binary's absolute library paths still work.
    """
    prefix = Path(interpreter).parent.parent
    chain = [*reversed(prefix.parents), prefix]
    closed = next((p for p in chain if not os.stat(p).st_mode & 0o001), None)
    if closed is None:
        return None
    return {"prefix": str(prefix), "hidden": str(closed), "stash": os.path.join(run_dir, "python")}


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


class Session:
    """One program, one launcher, one slot and uid: run it on input after input. Use :meth:`Sandbox.session`."""

    def __init__(self, sandbox: Sandbox, source: str, time_limit: float, memory_bytes: int, uid: int) -> None:
        cfg = sandbox.config
        self.config, self.time_limit = cfg, time_limit
        self.run_dir = tempfile.mkdtemp(prefix="agon-sandbox-", dir=cfg.tmp_dir)
        self.proc: subprocess.Popen | None = None
        self.fds: list[int] = []
        try:
            self._start(sandbox, source, memory_bytes, uid)
        except BaseException:
            self.close()
            raise

    def _start(self, sandbox: Sandbox, source: str, memory_bytes: int, uid: int) -> None:
        cfg, run_dir = self.config, self.run_dir
        os.chmod(run_dir, 0o711)  # the program may cross it to reach its workdir, not list it
        workdir = os.path.join(run_dir, "work")
        os.mkdir(workdir, 0o700)
        if sandbox.drop_privileges:
            os.chown(workdir, uid, uid)  # used as is when no mount namespace is available
        Path(run_dir, "main.py").write_text(source, encoding="utf-8", errors="replace")
        expose = exposure_plan(sandbox.interpreter, run_dir) if sandbox.drop_privileges else None
        if expose:
            os.mkdir(expose["stash"])
        status_r, status_w = os.pipe()
        control_r, control_w = os.pipe()
        self.fds = [status_r, control_w]
        self.status, self.control, self.buffer = status_r, control_w, b""
        cpu = math.ceil(self.time_limit) + 1
        launch = {
            "argv": [sandbox.interpreter, "-I", *([] if cfg.site_packages else ["-S"]), "-c", BOOTSTRAP],
            "run_dir": run_dir,
            "source": os.path.join(run_dir, "main.py"),
            "workdir": workdir,
            "workdir_bytes": cfg.workdir_bytes,
            "expose_prefix": expose,
            "namespaces": cfg.namespaces,
            "drop_privileges": sandbox.drop_privileges,
            "uid": uid,
            "wall_seconds": cfg.wall_factor * self.time_limit + cfg.wall_slack_seconds,
            "status_fd": status_w,
            "control_fd": control_r,
            "rlimits": {
                "cpu": (cpu, cpu + 1),
                "address_space": (memory_bytes, memory_bytes),
                "processes": (cfg.max_processes, cfg.max_processes),
                "file_size": (cfg.max_output_bytes, cfg.max_output_bytes),
                "open_files": (cfg.max_open_files, cfg.max_open_files),
                "core": (0, 0),
            },
        }
        self.wall_seconds = launch["wall_seconds"]
        try:
            with open(os.path.join(run_dir, "launcher.log"), "wb") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", str(LAUNCHER), marshal.dumps(launch).hex()],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env={},
                    cwd=run_dir,
                    pass_fds=(status_w, control_r),
                    start_new_session=True,
                )
        finally:
            os.close(status_w)
            os.close(control_r)

    def run(self, stdin: str) -> RunResult:
        """Run the program once more on ``stdin``, in a fresh process tree; blocks until it ends.

        Raises:
            SandboxError: The sandbox could not run the program, or a required protection
                did not take effect. Whatever the program does is reported, never raised.
        """
        Path(self.run_dir, "stdin").write_text(stdin, encoding="utf-8", errors="replace")
        try:
            os.write(self.control, b"r")
        except BrokenPipeError:
            raise SandboxError(f"sandbox launcher is gone: {self._log()}") from None
        report = self._report()
        missing = [name for name in self.config.require if not report["protections"].get(name)]
        if missing:
            raise SandboxError(
                f"required protections did not take effect: {missing}; got {report['protections']}"
            )
        return self._result(report)

    def _report(self) -> dict[str, Any]:
        """Wait for the launcher's report on this run (with a backstop for a launcher that hangs)."""
        deadline = time.monotonic() + self.wall_seconds + 30  # the launcher enforces the wall clock itself
        child = None
        while True:
            records, self.buffer = receive(self.buffer)
            for record in records:
                if "child_pid" in record:
                    child = record["child_pid"]
                    continue
                if record["error"]:
                    raise SandboxError(f"sandbox could not run the program: {record['error']}")
                return record
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self.status], [], [], remaining)[0]:
                if child is not None:
                    kill(child)
                raise SandboxError(f"sandbox launcher hung past {self.wall_seconds + 30:.0f}s")
            chunk = os.read(self.status, 65536)
            if not chunk:
                raise SandboxError(f"sandbox launcher exited: {self._log()}")
            self.buffer += chunk

    def _log(self) -> str:
        log = Path(self.run_dir, "launcher.log")
        return log.read_bytes()[-2000:].decode(errors="replace") if log.exists() else ""

    def _result(self, report: dict[str, Any]) -> RunResult:
        cap = self.config.max_output_bytes
        stdout_path, stderr_path = Path(self.run_dir, "stdout"), Path(self.run_dir, "stderr")
        output_bytes = max(stdout_path.stat().st_size, stderr_path.stat().st_size)
        with open(stdout_path, "rb") as handle:
            stdout = handle.read(cap).decode(errors="replace")
        with open(stderr_path, "rb") as handle:
            handle.seek(max(0, stderr_path.stat().st_size - 4096))
            stderr = handle.read().decode(errors="replace")
        return RunResult(
            status=classify(report, self.time_limit, output_bytes, stderr, cap),
            stdout=stdout,
            stderr=stderr,
            exit_code=report["exit_code"],
            cpu_seconds=report["cpu_seconds"],
            wall_seconds=report["wall_seconds"],
            max_rss_bytes=report["max_rss_bytes"],
            protections={name: bool(report["protections"].get(name)) for name in PROTECTIONS},
        )

    def close(self) -> None:
        """End the launcher (any byte but ``r``, or EOF, tells it to exit) and remove the run directory."""
        if self.fds:
            try:
                os.write(self.control, b"q")  # a forked copy of our end would otherwise keep it waiting
            except BrokenPipeError:
                pass
        for fd in self.fds:
            os.close(fd)
        self.fds = []
        if self.proc is not None:
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                kill(self.proc.pid, group=True)
                self.proc.wait()
            self.proc = None
        shutil.rmtree(self.run_dir, ignore_errors=True)
