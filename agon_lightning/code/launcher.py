"""The in-sandbox half of :mod:`agon_lightning.code.sandbox`: it confines one program and runs it.

It runs as a fresh interpreter (``python -I -S launcher.py CONFIG``, standard library only) so
that no state of the trainer leaks into the sandbox, and so that the process that watches the
program cannot be signalled by it: the launcher keeps the trainer's uid, the program does not.
One launcher serves one program for all of its tests: each ``r`` byte on the control pipe
runs the program once more, in a fresh process tree and fresh namespaces, on the input file
the parent has just written; the report goes back as one frame on the status pipe. Starting
the launcher is what costs most (an interpreter and ``ctypes``), so it is paid once per
program, not once per test. It imports as little as it can (no ``json``, no ``signal``);
frames are length-prefixed ``marshal`` records, read by the same interpreter at both ends.

Three processes take part in each run:

- L (this script) makes itself a child subreaper, so every orphan of the program reparents
  to it, and opens a new PID namespace for each run when it can. It kills the tree at the
  wall-clock deadline, sweeps for descendants that a PID namespace did not take care of, and
  reports: exit code, CPU time, peak memory, and which protections took effect.
- C, L's child, is the init of that namespace: when it exits or is killed, the kernel kills
  every process left in the namespace, double forks and ``setsid`` included. It opens network
  and mount namespaces, mounts a fresh ``/proc``, makes every mount read-only and no-suid,
  mounts a small private tmpfs as the working directory, and drops to an unprivileged uid.
  Each step the machine refuses is recorded, never skipped silently. When the program exits,
  C reports its exit status and whether a file in the working directory reached the file-size cap.
- P, C's child, sets its rlimits and execs the interpreter with an empty environment. It is
  not the init itself because an init ignores every signal it has no handler for (SIGXCPU
  included), which would change the program's semantics.
"""

from __future__ import annotations

import ctypes
import marshal
import os
import resource
import select
import sys
import time

CLONE_NEWNS = 0x00020000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
AT_FDCWD, AT_RECURSIVE = -100, 0x8000
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID = 0x1, 0x2
SYS_MOUNT_SETATTR = 442  # the same number on every architecture (added after the syscall tables merged)
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER, PR_SET_NO_NEW_PRIVS = 1, 36, 38
SIGKILL = 9
RLIMITS = {
    "cpu": resource.RLIMIT_CPU,
    "address_space": resource.RLIMIT_AS,
    "processes": resource.RLIMIT_NPROC,
    "file_size": resource.RLIMIT_FSIZE,
    "open_files": resource.RLIMIT_NOFILE,
    "core": resource.RLIMIT_CORE,
}

libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long


class MountAttr(ctypes.Structure):
    """``struct mount_attr`` of ``mount_setattr(2)``."""

    _fields_ = [(name, ctypes.c_uint64) for name in ("attr_set", "attr_clr", "propagation", "userns_fd")]


def check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    args = [value.encode() if value is not None else None for value in (source, target, fstype, data)]
    check(libc.mount(args[0], args[1], args[2], flags, args[3]), f"mount {target}")


def set_mount_attr(path: str, attr_set: int, recursive: bool) -> None:
    attr = MountAttr(attr_set, 0, 0, 0)
    flags = AT_RECURSIVE if recursive else 0
    result = libc.syscall(SYS_MOUNT_SETATTR, AT_FDCWD, path.encode(), flags, ctypes.byref(attr), 32)
    check(int(result), f"mount_setattr {path}")


def send(fd: int, record: dict) -> None:
    """Write one frame: a 4-byte length, then the marshalled record."""
    data = marshal.dumps(record)
    os.write(fd, len(data).to_bytes(4, "little") + data)


def receive(data: bytes) -> tuple[list[dict], bytes]:
    """Every complete frame in ``data``, and the bytes after them (the start of a frame to come)."""
    records, at = [], 0
    while at + 4 <= len(data):
        size = int.from_bytes(data[at : at + 4], "little")
        if at + 4 + size > len(data):
            break
        records.append(marshal.loads(data[at + 4 : at + 4 + size]))
        at += 4 + size
    return records, data[at:]


def kill(pid: int, group: bool = False) -> None:
    """SIGKILL a process (or its process group); already gone is fine."""
    try:
        (os.killpg if group else os.kill)(pid, SIGKILL)
    except ProcessLookupError:
        pass


# ---------------------------------------------------------------------------------------------
# C: confine, fork P, wait, report.
# ---------------------------------------------------------------------------------------------


def confine_filesystem(cfg: dict, in_pid_namespace: bool, done: dict) -> None:
    """Private mounts: a fresh /proc, the interpreter reachable, every mount read-only, a tmpfs workdir."""
    mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing below propagates back to the host
    if in_pid_namespace:
        mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
        done["private_proc"] = True
    expose = cfg["expose_prefix"]
    if expose:
        # The interpreter sits below a directory the sandbox uid cannot enter (e.g. /root):
        # cover that directory with an empty tmpfs and bind the interpreter's prefix back in.
        prefix, hidden, stash = expose["prefix"], expose["hidden"], expose["stash"]
        mount(prefix, stash, None, MS_BIND | MS_REC)
        mount("tmpfs", hidden, "tmpfs", MS_NOSUID | MS_NODEV, "size=64k,mode=0755")
        os.makedirs(prefix, mode=0o755, exist_ok=True)
        mount(stash, prefix, None, MS_BIND | MS_REC)
    try:
        set_mount_attr("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID, recursive=True)
        done["readonly_root"] = True
    except OSError as err:
        done["readonly_root_error"] = str(err)
    owner = f"uid={cfg['uid']},gid={cfg['uid']}" if cfg["drop_privileges"] else ""
    mount(
        "tmpfs",
        cfg["workdir"],
        "tmpfs",
        MS_NOSUID | MS_NODEV,
        f"size={cfg['workdir_bytes']},mode=0700,{owner}",
    )
    done["private_workdir"] = True


def run_program(cfg: dict, in_pid_namespace: bool, report_fd: int, stdio: list[int]) -> None:
    """Body of C. Never returns."""
    done: dict = {"pid_namespace": in_pid_namespace}
    try:
        os.setsid()  # C leads its own group, so L can kill the program's group as a whole
        if cfg["namespaces"]:
            done["net_namespace"] = libc.unshare(CLONE_NEWNET) == 0
            done["mount_namespace"] = libc.unshare(CLONE_NEWNS) == 0
        with open(cfg["source"], "rb") as handle:  # read now: the mounts below may hide it
            source = handle.read()
        if done.get("mount_namespace"):
            confine_filesystem(cfg, in_pid_namespace, done)
        os.chdir(cfg["workdir"])
        with open("main.py", "wb") as handle:
            handle.write(source)
        check(libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(NO_NEW_PRIVS)")
        done["no_new_privs"] = True
        if cfg["drop_privileges"]:
            os.chown("main.py", cfg["uid"], cfg["uid"])
            os.setgroups([])
            os.setgid(cfg["uid"])
            os.setuid(cfg["uid"])
            done["dropped_privileges"] = os.getuid() == cfg["uid"] and os.geteuid() == cfg["uid"]
        # Set after the uid change, which clears it: C dies with L.
        check(libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        send(report_fd, {"protections": done})
        program = os.fork()
        if program == 0:
            exec_program(cfg, report_fd, stdio)
        _, status = os.waitpid(program, 0)
        at_cap = file_at_cap(".", cfg["rlimits"]["file_size"][0])
        send(report_fd, {"exit_code": os.waitstatus_to_exitcode(status), "file_at_cap": at_cap})
        os._exit(0)
    except BaseException as err:  # anything here is a sandbox failure, reported to L
        send(report_fd, {"error": f"{type(err).__name__}: {err}"})
    os._exit(127)


def file_at_cap(root: str, cap: int) -> bool:
    """Whether a file under ``root`` (the program's working directory) reached ``cap`` bytes.

    A write past ``RLIMIT_FSIZE`` fills the file up to the cap and then fails; a program that
    ignores SIGXFSZ may catch that error and exit 0, and this is what is left of it. Walked with
    a stack (a deep tree is no recursion error) and without following symlinks.
    """
    stack = [root]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:  # a directory the program made unreadable, or a path too long
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif (
                    entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_size >= cap
                ):
                    return True
            except OSError:
                continue
    return False


def exec_program(cfg: dict, report_fd: int, stdio: list[int]) -> None:
    """Body of P: its stdin/stdout/stderr, the rlimits, the interpreter with an empty environment. Never returns."""
    try:
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)  # dup2 leaves the copy inheritable; the originals close on exec
        for name, (soft, hard) in cfg["rlimits"].items():
            resource.setrlimit(RLIMITS[name], (soft, hard))
        check(libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0), "prctl(PDEATHSIG)")
        os.execve(cfg["argv"][0], cfg["argv"], {})
    except BaseException as err:  # reported to L like C's failures
        send(report_fd, {"error": f"{type(err).__name__}: {err}"})
    os._exit(127)


# ---------------------------------------------------------------------------------------------
# L: watch, kill, sweep, report.
# ---------------------------------------------------------------------------------------------


def descendants(root: int) -> list[int]:
    """Pids whose parent chain leads to ``root`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        ppid = int(stat[stat.rfind(b")") + 2 :].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, frontier = [], [root]
    while frontier:
        kids = children.get(frontier.pop(), [])
        found.extend(kids)
        frontier.extend(kids)
    return found


def sweep() -> int:
    """Kill and reap every remaining descendant (orphans reparent to L, the subreaper). Returns how many."""
    killed = 0
    for _ in range(100):
        pids = descendants(os.getpid())
        if not pids:
            break
        for pid in pids:
            kill(pid)
        killed += len(pids)
        while True:  # reap what died
            try:
                if os.waitpid(-1, os.WNOHANG)[0] == 0:
                    break
            except ChildProcessError:
                break
        time.sleep(0.001)
    return killed


def run_once(cfg: dict, own_pid_namespace: int | None, subreaper: bool) -> dict:
    """Run the program once on ``run_dir/stdin`` (output to ``run_dir/stdout``, ``stderr``); the report."""
    in_pid_namespace = False
    if own_pid_namespace is not None:
        # A PID namespace dies with its init, so every run needs a new one: point our children's
        # namespace back at our own, then unshare a fresh one.
        in_pid_namespace = (
            libc.setns(own_pid_namespace, CLONE_NEWPID) == 0 and libc.unshare(CLONE_NEWPID) == 0
        )
    run_dir = cfg["run_dir"]
    stdio = [
        os.open(f"{run_dir}/stdin", os.O_RDONLY),
        os.open(f"{run_dir}/stdout", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
        os.open(f"{run_dir}/stderr", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600),
    ]
    report_r, report_w = os.pipe()  # close-on-exec: only C writes after P has exec'd
    start = time.monotonic()
    child = os.fork()
    if child == 0:
        os.close(report_r)
        run_program(cfg, in_pid_namespace, report_w, stdio)
    os.close(report_w)
    for fd in stdio:
        os.close(fd)
    send(cfg["status_fd"], {"child_pid": child})
    deadline, report, timed_out = start + cfg["wall_seconds"], b"", False
    while True:  # C closes the report pipe when it exits: EOF is "done"
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([report_r], [], [], remaining)[0]:
            timed_out = True
            kill(child)  # C is the namespace's init: everything in it dies with it
            kill(child, group=True)  # without a namespace: C's group, then the sweep below
            break
        chunk = os.read(report_r, 65536)
        if not chunk:
            break
        report += chunk
    os.close(report_r)
    _, status, usage = os.wait4(child, 0)
    wall = time.monotonic() - start
    records = receive(report)[0]
    protections = next((r["protections"] for r in records if "protections" in r), {})
    protections["subreaper"] = subreaper
    # C reports the program's exit; when C was killed instead, its own status is the answer.
    exit_code = next((r["exit_code"] for r in records if "exit_code" in r), os.waitstatus_to_exitcode(status))
    at_cap = next((r["file_at_cap"] for r in records if "file_at_cap" in r), False)
    return {
        "exit_code": exit_code,
        "cpu_seconds": usage.ru_utime + usage.ru_stime,
        "max_rss_bytes": usage.ru_maxrss * 1024,
        "wall_seconds": wall,
        "timed_out": timed_out,
        "file_at_cap": at_cap,
        # A PID namespace leaves nothing behind; without one, orphans reparented to L are killed here.
        "swept": 0 if in_pid_namespace else sweep(),
        "protections": protections,
        "error": next((r["error"] for r in records if "error" in r), None),
    }


def main() -> None:
    cfg = marshal.loads(bytes.fromhex(sys.argv[1]))
    for fd in (cfg["status_fd"], cfg["control_fd"]):
        os.set_inheritable(fd, False)
    libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    subreaper = libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    own_pid_namespace = os.open("/proc/self/ns/pid", os.O_RDONLY) if cfg["namespaces"] else None
    while os.read(cfg["control_fd"], 1) == b"r":  # anything else (EOF: the parent is done) ends it
        send(cfg["status_fd"], run_once(cfg, own_pid_namespace, subreaper))


if __name__ == "__main__":
    main()
