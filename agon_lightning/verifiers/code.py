"""Judge a completion that should contain a Python program, by running it on the problem's tests.

The reward is binary, as the game needs: the program passes every test or it does not. The
fraction of tests passed rides along as the score, for logging. Tests and limits come from
``problem.metadata`` (the CodeContests data module puts them there); programs run in the
:class:`~agon_lightning.code.sandbox.Sandbox`, many at once in :meth:`CodeVerifier.verify_batch`.

By default the first failing test ends the check, as on a contest judge: the score is then
the fraction passed *before* the failure (a lower bound), and a wrong program costs one run
rather than all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from agon_lightning.code.judge import BLOCK_CHOICES, extract_program, outputs_match
from agon_lightning.code.sandbox import Sandbox, SandboxConfig
from agon_lightning.game.text import PYTHON_LANGUAGES
from agon_lightning.game.types import Problem, Verdict
from agon_lightning.verifiers.base import Verifier

REASONS = (
    "ok",
    "wrong_answer",
    "time_limit",
    "memory_limit",
    "runtime_error",
    "output_limit",
    "syntax_error",
    "no_code",
    "no_tests",
)


def problem_tests(problem: Problem) -> list[tuple[str, str]]:
    """``(input, expected output)`` pairs from ``problem.metadata["tests"]`` (dicts or pairs)."""
    tests = problem.metadata.get("tests") or []
    return [(t["input"], t["output"]) if isinstance(t, dict) else (t[0], t[1]) for t in tests]


class CodeVerifier(Verifier):
    """Runs the completion's program on the problem's tests.

    Args:
        sandbox: Sandbox limits and protections (pool size, interpreter, output caps, ...).
        languages: Fence languages that hold the program; ``""`` accepts an untagged fence.
        block: Which fenced block is the program: ``"last"``, ``"first"`` or ``"longest"``.
        search_thinking: Also accept a program found only inside the ``<think>`` trace.
        default_time_limit: CPU seconds per test when the problem gives none.
        max_time_limit: Upper bound on the per-test limit, whatever the problem says.
        time_scale: Multiplies the problem's limit (contest limits are set for C++; Python
            solutions often need more).
        default_memory_bytes: Address-space limit when the problem gives none.
        max_memory_bytes: Upper bound on the memory limit.
        min_memory_bytes: Lower bound: the interpreter alone needs some address space.
        max_tests: Run at most this many tests per problem (in the order given); ``None`` = all.
        stop_at_first_failure: End the check at the first failing test.
        tolerance: Absolute tolerance for non-integer numeric tokens.
    """

    def __init__(
        self,
        sandbox: SandboxConfig | None = None,
        languages: list[str] | None = None,
        block: str = "last",
        search_thinking: bool = False,
        default_time_limit: float = 2.0,
        max_time_limit: float = 10.0,
        time_scale: float = 1.0,
        default_memory_bytes: int = 256 << 20,
        max_memory_bytes: int = 1 << 30,
        min_memory_bytes: int = 64 << 20,
        max_tests: int | None = None,
        stop_at_first_failure: bool = True,
        tolerance: float = 1e-5,
    ) -> None:
        if block not in BLOCK_CHOICES:
            raise ValueError(f"block must be one of {BLOCK_CHOICES}, got {block!r}")
        if not 0 < default_time_limit <= max_time_limit:
            raise ValueError(
                f"need 0 < default_time_limit <= max_time_limit, got {default_time_limit} and {max_time_limit}"
            )
        if time_scale <= 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        if not 0 < min_memory_bytes <= default_memory_bytes <= max_memory_bytes:
            raise ValueError(
                "need 0 < min_memory_bytes <= default_memory_bytes <= max_memory_bytes, got "
                f"{min_memory_bytes}, {default_memory_bytes}, {max_memory_bytes}"
            )
        if max_tests is not None and max_tests < 1:
            raise ValueError(f"max_tests must be >= 1 or None, got {max_tests}")
        self.sandbox = Sandbox(sandbox)
        self.languages = list(PYTHON_LANGUAGES) if languages is None else languages
        self.block = block
        self.search_thinking = search_thinking
        self.default_time_limit = default_time_limit
        self.max_time_limit = max_time_limit
        self.time_scale = time_scale
        self.default_memory_bytes = default_memory_bytes
        self.max_memory_bytes = max_memory_bytes
        self.min_memory_bytes = min_memory_bytes
        self.max_tests = max_tests
        self.stop_at_first_failure = stop_at_first_failure
        self.tolerance = tolerance

    def limits(self, problem: Problem) -> tuple[float, int]:
        """``(CPU seconds per test, memory bytes)`` for a problem, defaults and bounds applied."""
        seconds = problem.metadata.get("time_limit") or self.default_time_limit
        memory = problem.metadata.get("memory_limit_bytes") or self.default_memory_bytes
        seconds = min(float(seconds) * self.time_scale, self.max_time_limit)
        memory = min(max(int(memory), self.min_memory_bytes), self.max_memory_bytes)
        return seconds, memory

    def verify(self, completion: str, problem: Problem) -> Verdict:
        program = extract_program(completion, self.languages, self.block, self.search_thinking)
        if program is None:
            return Verdict(correct=False, reason="no_code")
        tests = problem_tests(problem)[: self.max_tests]
        if not tests:
            return Verdict(correct=False, reason="no_tests", extracted=program)
        try:
            compile(program, "main.py", "exec", dont_inherit=True)
        except Exception:  # SyntaxError, null bytes, nesting too deep: nothing that could run
            return Verdict(correct=False, reason="syntax_error", extracted=program)
        time_limit, memory = self.limits(problem)
        passed, first_failure = 0, None
        with self.sandbox.session(program, time_limit, memory) as session:
            for stdin, expected in tests:
                result = session.run(stdin)
                reason = result.status
                if reason == "ok" and not outputs_match(expected, result.stdout, self.tolerance):
                    reason = "wrong_answer"
                if reason == "ok":
                    passed += 1
                    continue
                first_failure = first_failure or reason
                if self.stop_at_first_failure:
                    break
        return Verdict(
            correct=passed == len(tests),
            score=passed / len(tests),
            reason=first_failure or "ok",
            extracted=program,
        )

    def verify_batch(self, completions: Sequence[str], problems: Sequence[Problem]) -> list[Verdict]:
        """Judge many completions at once; the sandbox's pool bounds how many programs run together."""
        if len(completions) != len(problems):
            raise ValueError(
                f"verify_batch needs one problem per completion, got {len(completions)} "
                f"completions and {len(problems)} problems"
            )
        with ThreadPoolExecutor(max_workers=self.sandbox.config.workers) as pool:
            return list(pool.map(self.verify, completions, problems))
