"""Rows of a problem source: a JSON-lines, JSON, Parquet or Arrow file, a folder or glob of them, a
``datasets`` ``save_to_disk`` folder, or a Hub id.

One reader serves every data module; each module keeps only its schema (which columns it reads,
what a row becomes) and its filters. ``columns`` reads only those columns: Parquet and Hub
datasets never load the others (DeepMath's R1 solutions are most of its bytes), and a JSON row
keeps only those keys (absent ones as ``None``).

A missing local file is an error, never a download: only a source that looks like a Hub id
(``name`` or ``owner/name``, starting with a letter or digit, without a file suffix) and is not
a local path goes to ``datasets.load_dataset``; ``./data``, ``/abs/path``, ``~/x``, ``a/b/c`` and
``x.arrow`` are local, found or not. A folder holding ``state.json`` (a saved ``Dataset``) or
``dataset_dict.json`` (a saved ``DatasetDict``, read at ``split``) is read by
``datasets.load_from_disk``, as is any in-memory ``datasets`` object through :func:`dataset_rows`.
:func:`iter_rows` hands each row over with its location (``FILE:LINE``, ``FILE row N``) and,
for a line that is not JSON, why it could not be read, so that a caller can report every bad
row; :func:`read_rows` refuses the source at its first bad row instead.
"""

from __future__ import annotations

import glob
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

JSON_SUFFIXES = (".jsonl", ".ndjson", ".json")
FILE_SUFFIXES = (*JSON_SUFFIXES, ".parquet", ".arrow")
HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*(?:/[A-Za-z0-9][\w.-]*)?")
SAVED_MARKERS = ("state.json", "dataset_dict.json")  # what datasets' save_to_disk writes in its folder
EVAL_SPLITS = ("validation", "test")
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
            f"{source!r} is neither a local file or folder (expected one of {FILE_SUFFIXES}, or a "
            f"datasets save_to_disk folder) nor a loadable Hub dataset (split {split!r}): {err}"
        ) from err


def is_saved_dataset(path: Path) -> bool:
    """Whether ``path`` is a folder written by ``datasets``' ``save_to_disk``."""
    return path.is_dir() and any((path / marker).is_file() for marker in SAVED_MARKERS)


def local_files(source: str, suffixes: Sequence[str] = FILE_SUFFIXES) -> list[Path] | None:
    """The files ``source`` names (a file, a folder's files or a glob's, in name order; a
    ``save_to_disk`` folder as itself), or ``None`` when ``source`` is a Hub id.

    Raises:
        FileNotFoundError: nothing local matches and ``source`` is no Hub id.
        ValueError: ``source`` is a file with a suffix not in ``suffixes``.
    """
    wanted = "/".join(suffixes)
    path = Path(source).expanduser()
    if is_saved_dataset(path):
        return [path]
    if path.is_dir():
        files = sorted(f for f in path.iterdir() if f.suffix in suffixes)
        if not files:
            raise FileNotFoundError(
                f"folder {source!r} holds no {wanted} files, nor is it a datasets save_to_disk folder "
                f"(one of {SAVED_MARKERS} in it)"
            )
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
    if glob.has_magic(source) or not HUB_ID.fullmatch(source) or Path(source).suffix in FILE_SUFFIXES:
        raise FileNotFoundError(f"no {wanted} files at {source!r}, nor is it a Hub dataset id")
    return None


def pick_split(splits: Any, split: str | None, what: str, fallback: Sequence[str] = ()) -> tuple[str, Any]:
    """``(name, dataset)`` of ``split`` in a ``DatasetDict`` (or any mapping of splits), else of
    the first of ``fallback`` it holds.

    Raises:
        ValueError: none of them is there (the message lists the splits there are).
    """
    for name in (split, *fallback):
        if name is not None and name in splits:
            return name, splits[name]
    wanted = " or ".join(repr(n) for n in (split, *fallback) if n is not None)
    raise ValueError(f"{what} has no {wanted} split (its splits: {sorted(splits)}); name one with split")


def dataset_rows(
    dataset: Any, where: str, split: str = "train", columns: Sequence[str] | None = None
) -> Iterator[RawRow]:
    """The rows of a ``datasets`` object (a ``DatasetDict`` at ``split``) as ``(location, row, None)``.

    Locations read ``WHERE[SPLIT] row N`` (``WHERE row N`` for a single dataset).
    """
    if isinstance(dataset, Mapping):
        split, dataset = pick_split(dataset, split, where)
        where = f"{where}[{split}]"
    if columns is not None:
        dataset = dataset.select_columns(list(columns))
    for n, row in enumerate(dataset, start=1):
        yield f"{where} row {n}", row, None


def _json_rows(path: Path) -> Iterator[RawRow]:
    """The rows of a JSON-lines file, or of a ``.json`` file holding one array.

    The file is read as UTF-8 line by line: a line that is not UTF-8 is a bad row named by its
    line (as one that is not JSON is), and a ``.json`` array that is not is refused at its line.
    """
    data = path.read_bytes()
    if path.suffix == ".json" and data.lstrip().startswith(b"["):
        try:
            rows = json.loads(data.decode("utf-8"))
        except UnicodeDecodeError as err:
            lineno = data.count(b"\n", 0, err.start) + 1
            yield f"{path}:{lineno}", None, not_utf8(err, data.rfind(b"\n", 0, err.start) + 1)
            return
        except json.JSONDecodeError as err:
            yield f"{path}:{err.lineno}", None, f"not valid JSON ({err.msg} at column {err.colno})"
            return
        for n, row in enumerate(rows, start=1):
            yield f"{path} item {n}", row, None
        return
    # Split on \n (and \r\n) only, as JSON lines are: str.splitlines would also split inside a
    # string holding U+2028 or a form feed.
    for lineno, raw in enumerate(data.split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as err:
            yield f"{path}:{lineno}", None, not_utf8(err)
            continue
        if not line.strip():
            continue
        try:
            yield f"{path}:{lineno}", json.loads(line), None
        except json.JSONDecodeError as err:
            yield f"{path}:{lineno}", None, f"not valid JSON ({err.msg} at column {err.colno})"


def not_utf8(err: UnicodeDecodeError, line_start: int = 0) -> str:
    """Why a line could not be read: the first byte that is not UTF-8, and its column in the line
    that starts at offset ``line_start`` of what was decoded."""
    return (
        f"not UTF-8 text (byte 0x{err.object[err.start]:02x} at column {err.start - line_start + 1}); "
        "save the file as UTF-8"
    )


def _arrow_rows(path: Path, columns: Sequence[str] | None) -> Iterator[RawRow]:
    """The rows of an Arrow IPC file: the stream format ``datasets`` writes, or the file format."""
    import pyarrow as pa

    try:
        with pa.memory_map(str(path)) as source:
            try:
                table = pa.ipc.open_stream(source).read_all()
            except pa.ArrowInvalid:
                source.seek(0)
                table = pa.ipc.open_file(source).read_all()
        if columns is not None:
            table = table.select(list(columns))
    except Exception as err:  # pyarrow's errors do not name the file
        raise ValueError(f"{path} is not a readable Arrow file: {err}") from err
    for n, row in enumerate(table.to_pylist(), start=1):
        yield f"{path} row {n}", row, None


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
        source: A file, a folder of files (read in name order), a glob, a ``save_to_disk``
            folder, or a Hub dataset id.
        split: Split of a Hub dataset or a saved ``DatasetDict``.
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
        if file.is_dir():
            import datasets

            yield from dataset_rows(datasets.load_from_disk(str(file)), str(file), split, columns)
            continue
        if file.suffix in (".parquet", ".arrow"):
            yield from (_parquet_rows if file.suffix == ".parquet" else _arrow_rows)(file, columns)
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
