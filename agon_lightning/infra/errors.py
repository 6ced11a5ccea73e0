"""Mistakes in a command: one line that says what to change, exit status 2.

A value out of range, an unknown component or a model directory that does not exist is the
user's to fix, and a 50-line traceback hides the one line that matters. Such errors are
raised as :class:`UsageError` (or reported by the parsers, which know the option) and
printed as ``agon CMD: error: MESSAGE``. ``--verbose`` or ``AGON_VERBOSE=1`` brings back
the traceback (and jsonargparse's full report); anything that is not a usage error keeps
its traceback always, since it is a bug or an environment problem, not a typo.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NoReturn

VERBOSE_FLAG = "--verbose"
VERBOSE_ENV = "AGON_VERBOSE"
USAGE_EXIT = 2
MAX_LINE = 400

_verbose = False


class UsageError(ValueError):
    """A mistake in what the user asked for; the message names the option and what is accepted."""


def set_verbose(on: bool) -> None:
    """Show tracebacks for usage errors too (what ``--verbose`` does)."""
    global _verbose
    _verbose = on


def is_verbose() -> bool:
    """``--verbose`` was given or ``AGON_VERBOSE`` is set to something other than ``0``/empty."""
    return _verbose or os.environ.get(VERBOSE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def take_verbose_flag(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--verbose``, and whether it was there.

    Only arguments before a ``--`` count: what follows belongs to another program
    (``agon sweep ... -- OVERRIDES`` passes it to every run).
    """
    argv = list(argv)
    end = argv.index("--") if "--" in argv else len(argv)
    kept = [a for a in argv[:end] if a != VERBOSE_FLAG]
    return kept + argv[end:], len(kept) < end


def one_line(text: str, limit: int = MAX_LINE) -> str:
    """``text`` with its whitespace collapsed, cut at ``limit`` characters."""
    line = re.sub(r"\s+", " ", text).strip()
    return line if len(line) <= limit else line[: limit - 1] + "…"


def fail(prog: str, message: str) -> NoReturn:
    """Print ``PROG: error: MESSAGE`` on stderr and exit with status 2."""
    sys.stderr.write(f"{prog}: error: {one_line(message)}\n")
    raise SystemExit(USAGE_EXIT)


@contextmanager
def reporting_usage_errors(prog: str) -> Iterator[None]:
    """Turn a :class:`UsageError` raised inside into one line and exit status 2 (unless verbose)."""
    try:
        yield
    except UsageError as err:
        if is_verbose():
            raise
        fail(prog, str(err))


class CommandParser(argparse.ArgumentParser):
    """``argparse`` for agon's own commands: no abbreviated options, errors in one line.

    ``--bund`` is not taken for ``--bundle``: an abbreviation that works today silently
    changes meaning when an option is added tomorrow.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        if is_verbose():
            super().error(message)
        fail(self.prog, message)
