"""Rows of a problem source: a JSON-lines, JSON or Parquet file, a folder or glob of them, or a Hub id.

One reader serves every data module; each module keeps only its schema (which columns it reads,
what a row becomes) and its filters. ``columns`` reads only those columns: Parquet and Hub
datasets never load the others (DeepMath's R1 solutions are most of its bytes), and a JSON row
keeps only those keys (absent ones as ``None``).

A missing local file is an error, never a download: only a source that looks like a Hub id
(``name`` or ``owner/name``) and is not a local path goes to ``datasets.load_dataset``.
:func:`iter_rows` hands each row over with its location (``FILE:LINE``, ``FILE row N``) and,
for a line that is not JSON, why it could not be read, so that a caller can report every bad
row; :func:`read_rows` refuses the source at its first bad row instead.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
FILE_SUFFIXES = (*JSON_SUFFIXES, ".parquet")
HUB_ID = re.compile(r"[\w.-]+(?:/[\w.-]+)?")
RawRow = tuple[str, Any, str | None]  # (location, row, why it could not be read)


def load_hub(
    source: str, split: str = "train", subset: str | None = None, columns: Sequence[str] | None = None
) -> Any:
    """The Hub dataset ``source`` through ``datasets`` (cached after the first download).

    Raises:
        FileNotFoundError: ``datasets`` could not load it (the cause is chained).
    """
    import datasets

    try:
        if columns is None:
            return datasets.load_dataset(source, subset, split=split)
        named = {} if subset is None else {"name": subset}
        return datasets.load_dataset(source, split=split, columns=list(columns), **named)
    except Exception as err:
        raise FileNotFoundError(
            f"{source!r} is neither a local file or folder (expected one of {FILE_SUFFIXES}) "
            f"nor a loadable Hub dataset (split {split!r}): {err}"
        ) from err


def local_files(source: str, suffixes: Sequence[str] = FILE_SUFFIXES) -> list[Path] | None:
    """The files ``source`` names (a file, a folder's files or a glob's, in name order), or
    ``None`` when ``source`` is a Hub id.

    Raises:
        FileNotFoundError: nothing local matches and ``source`` is no Hub id.
        ValueError: ``source`` is a file with a suffix not in ``suffixes``.
    """
    wanted = "/".join(suffixes)
    path = Path(source).expanduser()
    if path.is_dir():
        files = sorted(f for f in path.iterdir() if f.suffix in suffixes)
        if not files:
            raise FileNotFoundError(f"folder {source!r} holds no {wanted} files")
        return files
    if path.is_file():
        if path.suffix not in suffixes:
            raise ValueError(f"unsupported problem file {source!r}: expected one of {tuple(suffixes)}")
        return [path]
    if path.suffix in suffixes and not glob.has_magic(source):
        raise FileNotFoundError(f"problem file {source!r} does not exist (no {wanted} files there)")
    files = sorted(Path(f) for f in glob.glob(str(path)) if Path(f).suffix in suffixes)
    if files:
        return files
    if glob.has_magic(source) or not HUB_ID.fullmatch(source):
        raise FileNotFoundError(f"no {wanted} files at {source!r}, nor is it a Hub dataset id")
    return None


def _json_rows(path: Path) -> Iterator[RawRow]:
    """The rows of a JSON-lines file, or of a ``.json`` file holding one array."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".json" and text.lstrip().startswith("["):
        try:
            rows = json.loads(text)
        except json.JSONDecodeError as err:
            yield f"{path}:{err.lineno}", None, f"not valid JSON ({err.msg} at column {err.colno})"
            return
        for n, row in enumerate(rows, start=1):
            yield f"{path} item {n}", row, None
        return
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line), None
        except json.JSONDecodeError as err:
            yield f"{path}:{lineno}", None, f"not valid JSON ({err.msg} at column {err.colno})"


def _parquet_rows(path: Path, columns: Sequence[str] | None) -> Iterator[RawRow]:
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, columns=None if columns is None else list(columns))
    except Exception as err:  # pyarrow's errors do not always name the file
        raise ValueError(f"{path} is not a readable Parquet file: {err}") from err
    for n, row in enumerate(table.to_pylist(), start=1):
        yield f"{path} row {n}", row, None


def iter_rows(
    source: str,
    split: str = "train",
    subset: str | None = None,
    columns: Sequence[str] | None = None,
    suffixes: Sequence[str] = FILE_SUFFIXES,
) -> Iterator[RawRow]:
    """Every row of ``source`` in order as ``(location, row, error)``; blank lines are no rows.

    Args:
        source: A file, a folder of files (read in name order), a glob, or a Hub dataset id.
        split: Split of a Hub dataset.
        subset: Configuration name of a Hub dataset (e.g. ``"main"`` for GSM8K).
        columns: Read only these columns (``None``: all).
        suffixes: Which local files count as problem files.
    """
    files = local_files(source, suffixes)
    if files is None:
        for n, row in enumerate(load_hub(source, split, subset, columns), start=1):
            yield f"{source}[{split}] row {n}", row, None
        return
    for file in files:
        if file.suffix == ".parquet":
            yield from _parquet_rows(file, columns)
            continue
        for location, row, error in _json_rows(file):
            if columns is not None and isinstance(row, dict):
                row = {k: row.get(k) for k in columns}
            yield location, row, error


def read_rows(
    source: str,
    split: str = "train",
    subset: str | None = None,
    columns: Sequence[str] | None = None,
    suffixes: Sequence[str] = FILE_SUFFIXES,
) -> list[dict[str, Any]]:
    """Every row of ``source`` (see :func:`iter_rows`); the first bad one is an error.

    Raises:
        ValueError: a row is not valid JSON or not an object (named by file and line).
    """
    rows = []
    for location, row, error in iter_rows(source, split, subset, columns, suffixes):
        if error is not None:
            raise ValueError(f"{location} is {error}")
        if not isinstance(row, dict):
            raise ValueError(f"{location} is a JSON {type(row).__name__}, expected an object")
        rows.append(row)
    return rows
