"""One program in the sandbox: its launcher, run after run, and how each run ended.

A :class:`Session` holds one program's launcher (:mod:`agon_lightning.code.launcher`) for all
of its tests: it writes the program and the launch spec (rlimits, namespaces, uid, wall clock),
asks for one run per input, reads the launcher's report back and turns it into a
:class:`RunResult` (:func:`classify`). Which runs may start, and under which uid, is the
:class:`~agon_lightning.code.sandbox.Sandbox`'s to decide: a session is opened with
:meth:`Sandbox.session <agon_lightning.code.sandbox.Sandbox.session>`.
"""

from __future__ import annotations

import marshal
import math
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from agon_lightning.code.launcher import kill, receive


class Host(Protocol):
    """What a session needs of the sandbox that opens it (:class:`~agon_lightning.code.sandbox.Sandbox`)."""

    config: Any  # a SandboxConfig: limits, namespaces, temporary directory
    interpreter: str
    drop_privileges: bool


LAUNCHER = Path(__file__).with_name("launcher.py")
# The program runs under ``python -I -S``: no site-packages, no environment, fast start-up.
# ``-S`` also drops site's ``exit``/``quit`` builtins, which contest solutions call; put them back.
# Python ignores SIGXFSZ at start-up, so a write past RLIMIT_FSIZE would raise an OSError the
# program may catch or report as a crash; the default action ends it with SIGXFSZ, which
# :func:`classify` reads as ``output_limit``. (``_signal``: ``signal`` would import ``enum``, ~6 ms a run.)
BOOTSTRAP = (
    "import _signal, builtins, sys\n"
    "_signal.signal(_signal.SIGXFSZ, _signal.SIG_DFL)\n"
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

    The output cap (``RLIMIT_FSIZE``) is reached three ways, each an ``output_limit``: stdout or
    stderr stands at the cap; the program died of SIGXFSZ (a write past the cap, to any file);
    or, where the program ignored SIGXFSZ and caught the error, a file in its working directory
    stands at the cap (``file_at_cap``, found by the launcher).
    """
    code = report["exit_code"]
    if report["timed_out"] or code == -signal.SIGXCPU or report["cpu_seconds"] > time_limit:
        return "time_limit"
    if output_bytes >= cap or code == -signal.SIGXFSZ or report.get("file_at_cap"):
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


class Session:
    """One program, one launcher, one slot and uid: run it on input after input. Use :meth:`Sandbox.session`."""

    def __init__(self, sandbox: Host, source: str, time_limit: float, memory_bytes: int, uid: int) -> None:
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

    def _start(self, sandbox: Host, source: str, memory_bytes: int, uid: int) -> None:
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
