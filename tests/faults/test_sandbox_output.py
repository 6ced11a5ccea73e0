"""The output cap is an ``output_limit`` however a program reaches it, confined or not.

``max_output_bytes`` caps stdout, stderr and every file the program writes (``RLIMIT_FSIZE``).
Python ignores SIGXFSZ, so a write past the cap used to raise an ``OSError`` instead: a file
written past it read as a ``runtime_error``, and a program that caught the error passed as ``ok``.
"""

from __future__ import annotations

import os

import pytest

from agon_lightning.code.sandbox import Sandbox, SandboxConfig
from agon_lightning.game.types import Problem
from agon_lightning.verifiers.code import CodeVerifier

CAP = 64 << 10  # small, so that reaching it is quick
UID_BASE = 70000 + (os.getpid() % 1000) * 4  # apart from tests/test_sandbox.py's range
CATCHES = "try:\n{body}\nexcept OSError as err:\n    print('caught', err)\n"
IGNORES_SIGXFSZ = "import signal\nsignal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
PAST_CAP = {
    "stdout_in_a_loop": "while True:\n    print('x' * 1000)",
    "stdout_in_one_write": f"import sys\nsys.stdout.write('x' * {2 * CAP})",
    "stdout_unbuffered": f"import os\nos.write(1, b'x' * {2 * CAP})",
    "stderr": "import sys\nwhile True:\n    sys.stderr.write('e' * 4096)",
    "a_file": f"open('out.txt', 'w').write('x' * {2 * CAP})",
    "a_file_error_caught": CATCHES.format(body=f"    open('out.txt', 'w').write('x' * {2 * CAP})"),
    "stdout_error_caught": CATCHES.format(body=f"    import sys\n    sys.stdout.write('x' * {2 * CAP})"),
    # SIGXFSZ ignored again: only the EFBIG error is left, and the program swallows it
    "a_file_signal_ignored_error_caught": IGNORES_SIGXFSZ
    + CATCHES.format(body=f"    open('out.txt', 'w').write('x' * {2 * CAP})"),
    "a_nested_file_signal_ignored_error_caught": IGNORES_SIGXFSZ
    + "import os\nos.makedirs('a/b/c')\n"
    + CATCHES.format(body=f"    open('a/b/c/out.txt', 'w').write('x' * {2 * CAP})"),
}
UNDER_CAP = {
    "stdout": f"import sys\nsys.stdout.write('x' * {CAP - 1})",
    "a_file": f"open('out.txt', 'w').write('x' * {CAP - 1})\nprint('ok')",
}


@pytest.fixture(params=["confined", "fallback"])
def sandbox(request, tmp_path) -> Sandbox:
    """A sandbox with a 64 KiB cap: every protection the machine allows, or none (the fallback)."""
    if request.param == "confined":
        return Sandbox(
            SandboxConfig(max_output_bytes=CAP, uid_base=UID_BASE, uid_count=4, tmp_dir=str(tmp_path))
        )
    settings = SandboxConfig(
        max_output_bytes=CAP, namespaces=False, drop_privileges=False, tmp_dir=str(tmp_path)
    )
    if os.geteuid() != 0:
        return Sandbox(settings)
    with pytest.warns(UserWarning, match="programs run as root"):
        return Sandbox(settings)


def test_every_way_past_the_cap_is_an_output_limit(sandbox):
    statuses = {
        name: sandbox.run(program, "", time_limit=2.0, memory_bytes=512 << 20).status
        for name, program in PAST_CAP.items()
    }
    assert statuses == dict.fromkeys(PAST_CAP, "output_limit")


def test_output_under_the_cap_is_not_an_output_limit(sandbox):
    for name, program in UNDER_CAP.items():
        result = sandbox.run(program, "", time_limit=2.0, memory_bytes=512 << 20)
        assert (name, result.status) == (name, "ok"), result.stderr


def test_the_verdict_of_a_file_written_past_the_cap_is_output_limit():
    verifier = CodeVerifier(sandbox=SandboxConfig(max_output_bytes=CAP, uid_base=UID_BASE, uid_count=4))
    problem = Problem("q", metadata={"tests": [{"input": "", "output": "ok"}], "time_limit": 1.0})
    program = CATCHES.format(body=f"    open('out.txt', 'w').write('x' * {2 * CAP})") + "print('ok')"
    assert verifier.verify(f"```python\n{program}\n```", problem).reason == "output_limit"
