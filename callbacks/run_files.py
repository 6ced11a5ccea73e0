"""How callbacks write: metrics straight to the loggers, tables to JSON lines in the run directory.

A callback that measures every k steps logs through the loggers, not ``self.log``:
Lightning repeats the last value of a step metric on every later step until it is logged
again, which would put stale divergence numbers on steps where nothing was measured.

The run directory is the first logger's versioned folder (the one holding ``metrics.csv``),
else ``trainer.default_root_dir``. Finding it is a collective: ``trainer.log_dir`` broadcasts
rank zero's answer, so read on rank zero alone it waits for the other ranks forever (they are
elsewhere, in the next collective). :class:`RunDir` reads it once, on every rank, from a
callback's ``setup`` hook (which every rank runs at the same point); only then does anything
depend on the rank: global rank zero writes. One JSON object per line is easy to append to
from a run that may be killed, and one ``pandas.read_json(path, lines=True)`` away from a plot.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import lightning as L


def log_step_metrics(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    """Send ``metrics`` to every logger at ``step`` (loggers write on rank zero only)."""
    for logger in trainer.loggers:
        logger.log_metrics(metrics, step=step)


class RunDir:
    """The directory of this run's logs, read once on every process and kept."""

    def __init__(self) -> None:
        self._path: Path | None = None

    @property
    def located(self) -> Path | None:
        """The run directory once :meth:`locate` has found it (no collective), else ``None``."""
        return self._path

    def locate(self, trainer: L.Trainer) -> Path:
        """The run directory; the first call is a collective, so make it on every rank (in ``setup``)."""
        if self._path is None:
            self._path = Path(trainer.log_dir or trainer.default_root_dir)
        return self._path


def append_jsonl(
    trainer: L.Trainer, directory: Path, filename: str, rows: Iterable[dict[str, Any]]
) -> Path | None:
    """Append ``rows`` to ``directory/filename`` on global rank zero; the path, else ``None``."""
    if not trainer.is_global_zero:
        return None
    path = directory / filename
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a JSON-lines file."""
    with Path(path).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]
