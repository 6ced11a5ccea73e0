"""The sandbox: hostile programs are contained, judged failures with the right reason, and gone afterwards.

Each hostile program goes through :class:`CodeVerifier` (so the reason is the verdict's) on a
sandbox of its own, with its own uid range and run directory; afterwards no process of that
uid range may be alive and the run directory must be gone. The protections these tests rely
on need root (namespaces, uid drop); where the machine refuses them the tests say so and skip,
and ``test_fallback_*`` shows what still holds without them.
"""

from __future__ import annotations

import os
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from agon_lightning.code.sandbox import PROTECTIONS, Sandbox, SandboxConfig, SandboxError
from agon_lightning.code.session import classify
from agon_lightning.game.types import Problem
from agon_lightning.verifiers.code import CodeVerifier

UID_BASE, UID_COUNT = 61000 + (os.getpid() % 1000) * 4, 4  # apart from other runs of this suite


def config(**options) -> SandboxConfig:
    """A sandbox config on this run's own uid range."""
    return SandboxConfig(uid_base=UID_BASE, uid_count=UID_COUNT, **options)


def probe() -> dict[str, bool]:
    try:
        return Sandbox(config()).probe()
    except SandboxError:
        return {}


PROBE = probe()


def needs(*protections: str) -> pytest.MarkDecorator:
    """Skip unless these protections take effect here (namespaces and the uid drop need root)."""
    missing = [name for name in protections if not PROBE.get(name)]
    return pytest.mark.skipif(
        bool(missing), reason=f"this machine refuses {missing} (needs root); probe: {PROBE}"
    )


def alive_with_uids(first: int, count: int) -> list[int]:
    """Pids of live (non-zombie) processes whose real uid is in ``[first, first + count)``."""
    pids = []
    for entry in os.listdir("/proc"):
        try:
            status = Path(f"/proc/{entry}/status").read_text()
        except (OSError, ValueError):
            continue
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        uid = int(fields.get("Uid", "-1").split()[0])
        if first <= uid < first + count and not fields.get("State", "").strip().startswith("Z"):
            pids.append(int(entry))
    return pids


@pytest.fixture
def judge(tmp_path):
    """``judge(program, stdin, expected, time_limit)`` → Verdict, on a private sandbox; checks cleanup."""
    verifier = CodeVerifier(sandbox=config(workers=1, tmp_dir=str(tmp_path)))

    def run(program: str, stdin: str = "", expected: str = "ok", time_limit: float = 0.5):
        problem = Problem(
            "q", metadata={"tests": [{"input": stdin, "output": expected}], "time_limit": time_limit}
        )
        return verifier.verify(f"```python\n{program}\n```", problem)

    yield run
    assert alive_with_uids(UID_BASE, UID_COUNT) == [], "a sandboxed process outlived its check"
    assert list(tmp_path.iterdir()) == [], "a run directory was left behind"


def test_program_reads_stdin_and_writes_stdout(judge):
    assert judge("print(sum(map(int, input().split())))", "2 3\n", "5").reason == "ok"
    assert judge("import sys\nif __name__ == '__main__':\n    print('ok')\n    exit(0)").reason == "ok"
    assert judge("raise SystemExit(3)").reason == "runtime_error"


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and the uid drop need root")
def test_as_root_every_protection_takes_effect():
    assert PROBE == {name: True for name in PROTECTIONS}


def test_infinite_loop_is_a_time_limit(judge):
    start = time.monotonic()
    assert judge("while True:\n    pass").reason == "time_limit"
    assert time.monotonic() - start < 10


def test_sleeping_program_is_killed_at_the_wall_clock(judge):
    assert judge("import time\ntime.sleep(60)").reason == "time_limit"


@needs("dropped_privileges")  # RLIMIT_NPROC does not bind root: never run a fork bomb as root
def test_fork_bomb_is_capped_and_leaves_nothing(judge):
    # RLIMIT_NPROC stops the bomb; the first failed fork kills the program, the namespace the rest.
    assert judge("import os\nwhile True:\n    os.fork()").reason == "runtime_error"


def test_allocating_8_gb_is_a_memory_limit(judge):
    assert judge("x = bytearray(8 * 1024**3)\nprint('ok')").reason == "memory_limit"


def test_printing_1_gb_is_an_output_limit(judge):
    start = time.monotonic()
    assert (
        judge("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)").reason == "output_limit"
    )
    assert time.monotonic() - start < 10  # stopped at the cap (8 MiB), not after a gigabyte


@needs("mount_namespace", "readonly_root", "private_workdir")
def test_writing_outside_the_workdir_is_refused(judge):
    # A world-writable directory: only the read-only mounts stand between the program and it.
    target = Path(tempfile.mkdtemp(prefix="agon-sandbox-test-"))
    try:
        target.chmod(0o777)
        for path in (target / "pwned", Path("/tmp/agon-pwned"), Path("/var/tmp/agon-pwned")):
            assert judge(f"open({str(path)!r}, 'w').write('pwned')").reason == "runtime_error"
            assert not path.exists()
        assert judge(
            "open('scratch.txt', 'w').write('fine')\nprint(open('scratch.txt').read() and 'ok')"
        ).correct
    finally:
        target.rmdir()


@needs("net_namespace")
def test_connecting_to_a_local_port_fails(judge):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        listener.setblocking(False)
        port = listener.getsockname()[1]
        program = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\nprint('ok')"
        assert judge(program).reason == "runtime_error"
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected


@needs("dropped_privileges")  # else /proc/<pid>/environ of the trainer is readable
def test_secrets_in_the_environment_are_not_inherited(judge, monkeypatch):
    secret = "agon-secret-4f1c9"
    monkeypatch.setenv("AGON_TEST_SECRET", secret)
    # Every way it could look: its own environment, /proc/<pid>/environ of anything it can see.
    program = (
        "import os\n"
        "found = os.environ.get('AGON_TEST_SECRET', '')\n"
        "for pid in os.listdir('/proc'):\n"
        "    try:\n"
        "        env = open(f'/proc/{pid}/environ', 'rb').read().decode(errors='replace')\n"
        "    except (OSError, ValueError):\n"
        "        continue\n"
        "    found = found or next((v.split('=', 1)[1] for v in env.split('\\0') if v.startswith('AGON_TEST_SECRET=')), '')\n"
        "print(found or 'none', len(os.environ) <= 1)\n"
    )
    verdict = judge(program, expected=f"{secret} True")
    assert verdict.reason == "wrong_answer"  # it could not print the secret


@needs("dropped_privileges")  # the check below finds the program's processes by their uid
def test_detached_child_does_not_outlive_the_check(judge):
    # setsid + double fork: the grandchild is in no process group of ours and would run for a minute.
    program = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(60)\n"
        "    os._exit(0)\n"
        "time.sleep(0.2)\n"
        "print('ok')\n"
    )
    assert judge(program).reason == "ok"  # the fixture then asserts no process of it is alive


def unconfined(tmp_path: Path, **options) -> Sandbox:
    """A sandbox with no namespaces and no uid drop: the fallback of a machine that refuses them."""
    settings = SandboxConfig(namespaces=False, drop_privileges=False, tmp_dir=str(tmp_path), **options)
    if os.geteuid() != 0:
        return Sandbox(settings)
    with pytest.warns(UserWarning, match="programs run as root"):
        return Sandbox(settings)


@needs("dropped_privileges")  # kill(-1) as root would reach every process on the machine
@pytest.mark.parametrize(
    "program, reason",
    [
        ("import sys\nsys.stdout.buffer.write(b'\\xff\\xfe ok')", "wrong_answer"),  # not UTF-8
        ("import os\nfor fd in (0, 1, 2):\n    os.close(fd)", "wrong_answer"),
        ("import os\nos.kill(os.getppid(), 9)\nprint('ok')", "ok"),  # its init ignores it
        ("import os\nos.kill(-1, 9)", "runtime_error"),  # kills all it can reach: itself
        ("import sys\nwhile True:\n    sys.stderr.write('e' * 65536)", "output_limit"),
        ("exit('ok')", "runtime_error"),  # exit(str) prints to stderr and fails, as in CPython
    ],
)
def test_odd_programs_are_judged_not_raised(judge, program, reason):
    assert judge(program).reason == reason


def test_fallback_without_namespaces_still_kills_orphans_and_empties_the_environment(tmp_path, monkeypatch):
    # No namespaces, no uid drop: what holds is the rlimits, the empty environment and the subreaper sweep.
    monkeypatch.setenv("AGON_TEST_SECRET", "agon-secret-4f1c9")
    sandbox = unconfined(tmp_path)
    marker = tmp_path / "orphan-was-here"
    program = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        f"        time.sleep(1.0)\n        open({str(marker)!r}, 'w').write('alive')\n"
        "    os._exit(0)\n"
        "print(os.environ.get('AGON_TEST_SECRET', 'none'))\n"
    )
    result = sandbox.run(program, "", time_limit=2.0, memory_bytes=256 << 20)
    assert (result.status, result.stdout.strip()) == ("ok", "none")
    assert result.protections["subreaper"] and not result.protections["net_namespace"]
    assert sandbox.run("x = bytearray(8 * 1024**3)", "", 2.0, 256 << 20).status == "memory_limit"
    time.sleep(1.5)
    assert not marker.exists(), "the detached grandchild survived the sweep"


def test_fallback_without_namespaces_does_not_block_the_network(tmp_path):
    # The documented limit: without a network namespace, loopback is reachable.
    sandbox = unconfined(tmp_path)
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        result = sandbox.run(
            f"import socket\nsocket.create_connection(('127.0.0.1', {port}))", "", 2.0, 256 << 20
        )
    assert result.status == "ok"


def test_required_protection_missing_raises(tmp_path):
    sandbox = unconfined(tmp_path, require=["net_namespace"])
    with pytest.raises(SandboxError, match="net_namespace"):
        sandbox.run("print(1)", "", 1.0, 256 << 20)


def test_parallel_runs_are_bounded_by_the_pool(tmp_path):
    # Four programs print when they start and stop sleeping; a pool of two runs exactly two at once.
    sandbox = Sandbox(config(workers=2, tmp_dir=str(tmp_path)))
    program = "import time\nstart = time.time()\ntime.sleep(1.0)\nprint(start, time.time())"
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda _: sandbox.run(program, "", 2.0, 256 << 20), range(4)))
    spans = [tuple(map(float, r.stdout.split())) for r in results]
    edges = sorted([(start, 1) for start, _ in spans] + [(stop, -1) for _, stop in spans])
    running = [sum(step for _, step in edges[: i + 1]) for i in range(len(edges))]
    assert max(running) == 2


@needs("dropped_privileges")
def test_programs_running_at_once_never_share_a_uid(tmp_path):
    # Two sandboxes (as two ranks would have): each running program holds a uid of its own.
    first, second = Sandbox(config()), Sandbox(config())
    uid = "import os\nprint(os.getuid())"
    with first.session(uid, 1.0, 256 << 20) as a, second.session(uid, 1.0, 256 << 20) as b:
        held = {int(a.run("").stdout), int(b.run("").stdout)}
    assert len(held) == 2 and held <= set(range(UID_BASE, UID_BASE + UID_COUNT))
    assert int(second.run(uid, "", 1.0, 256 << 20).stdout) == UID_BASE  # released when the session ended


def test_config_errors_name_the_value():
    with pytest.raises(ValueError, match="workers"):
        SandboxConfig(workers=0)
    with pytest.raises(ValueError, match="unknown protections"):
        SandboxConfig(require=["seccomp"])
    if os.geteuid() == 0:
        with pytest.raises(ValueError, match="'nobody'"):
            Sandbox(SandboxConfig(uid_base=65530, uid_count=10))


def test_classify_orders_the_reasons():
    base = {"timed_out": False, "exit_code": 0, "cpu_seconds": 0.1}
    assert classify(base, 1.0, 10, "", 100) == "ok"
    assert classify({**base, "cpu_seconds": 1.5}, 1.0, 10, "", 100) == "time_limit"
    assert classify({**base, "exit_code": -24}, 1.0, 10, "", 100) == "time_limit"  # SIGXCPU
    assert classify({**base, "exit_code": 1}, 1.0, 100, "", 100) == "output_limit"
    assert classify({**base, "exit_code": 1}, 1.0, 10, "Traceback\nMemoryError\n", 100) == "memory_limit"
    assert classify({**base, "exit_code": -11}, 1.0, 10, "", 100) == "runtime_error"
