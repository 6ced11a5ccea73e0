"""The performance tables of ``benchmarks/README.md`` and the docs, written from the results files that hold them.

A table on a page stands between two markers naming its source, relative to the page::

    <!-- table: results/vs_trl.json -->
    | β | tokens/step | ... |
    |---|---|---|
    <!-- /table -->

and is the ``table`` a benchmark wrote into that JSON (its rows, without the title line: the
page's prose says what the table is). A source that holds several (``tables``, a list) names
one by its place: ``results/overhead.json#1`` is the second. Several sources, separated by
spaces, make one table of their rows under the first one's header (``staleness_accuracy_seeds0.json
staleness_accuracy_seeds1.json``: one row a run); their headers must agree. The pages are
``benchmarks/README.md``, the top ``README.md`` and every page under ``docs/`` that holds a
marker; the docs' Results pages are built from ``benchmarks/README.md``, so they follow. ::

    python -m benchmarks.readme_tables            # rewrite the tables from the results files
    python -m benchmarks.readme_tables --check    # exit 1, naming each table that differs

Writes ``readme_tables.json`` (``--results-dir``): which tables were read from which files.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from benchmarks.common import add_results_dir, write_json

ROOT = Path(__file__).resolve().parents[1]
README = Path(__file__).parent / "README.md"
BLOCK = re.compile(r"(<!-- table: (?P<source>[^>]+?) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def table_text(source: Path, which: str | None = None) -> str:
    """The ``table`` text of the JSON ``source``, or its ``tables[which]``."""
    data = json.loads(source.read_text())
    tables = data.get("tables")
    if which is not None:
        if not isinstance(tables, list) or not which.isdigit() or int(which) >= len(tables):
            count = len(tables) if isinstance(tables, list) else 0
            raise ValueError(
                f"{source}#{which}: it holds {count} 'tables' (name one as #0 … #{max(count - 1, 0)})"
            )
        return tables[int(which)]
    table = data.get("table")
    if table is None and isinstance(tables, list) and len(tables) == 1:
        table = tables[0]
    if not isinstance(table, str):
        hint = (
            f"; it holds {len(tables)} 'tables': name one as #0 … #{len(tables) - 1}"
            if isinstance(tables, list)
            else ""
        )
        raise ValueError(f"{source} holds no 'table' text (keys: {sorted(data)}){hint}")
    return table


def table_rows(source: Path, which: str | None = None) -> str:
    """The Markdown table rows of ``source``'s table (title and blank lines dropped), newline-ended."""
    rows = [line for line in table_text(source, which).splitlines() if line.startswith("|")]
    if not rows:
        raise ValueError(f"{source}'s table has no Markdown table rows")
    return "\n".join(rows) + "\n"


def joined_rows(sources: str, base: Path) -> str:
    """The rows of every source in ``sources`` (spaces between them) under the first one's header."""
    out: list[str] = []
    header: list[str] = []
    first = ""
    for name in sources.split():
        path, _, which = name.partition("#")
        lines = table_rows(base / path, which or None).splitlines()
        if not header:
            header, first = lines[:2], name
            out += lines
        elif lines[:2] != header:
            raise ValueError(f"{name}'s table header {lines[0]!r} differs from {first}'s {header[0]!r}")
        else:
            out += lines[2:]
    return "\n".join(out) + "\n"


def rendered(text: str, root: Path) -> tuple[str, list[str]]:
    """``text`` with every marked table written from its sources (relative to ``root``), and the sources."""
    sources: list[str] = []

    def fill(match: re.Match[str]) -> str:
        sources.append(match["source"])
        return match[1] + joined_rows(match["source"], root) + match[4]

    return BLOCK.sub(fill, text), sources


def default_pages() -> list[Path]:
    """``benchmarks/README.md``, the top README and every page under ``docs/`` that holds a marker."""
    pages = [README, ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    return [p for p in pages if p == README or (p.is_file() and BLOCK.search(p.read_text()))]


def block_of(text: str, source: str) -> str | None:
    """The body of the block marked with ``source`` in ``text``."""
    for match in BLOCK.finditer(text):
        if match["source"] == source:
            return match["body"]
    return None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--readme",
        type=Path,
        action="append",
        help="a page to write (repeat it; default: every page with a marker)",
    )
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    pages = args.readme or default_pages()
    tables: list[str] = []
    stale: list[str] = []
    changed: list[tuple[Path, str]] = []
    for page in pages:
        text = page.read_text()
        new, sources = rendered(text, page.parent)
        name = page.resolve().relative_to(ROOT) if page.resolve().is_relative_to(ROOT) else page
        tables += [f"{name}: {s}" for s in sources]
        stale += [f"{name}: {s}" for s in sources if block_of(text, s) != block_of(new, s)]
        if new != text:
            changed.append((page, new))
    write_json(
        "readme_tables",
        {"pages": [str(p) for p in pages], "tables": tables, "stale": stale},
        args.results_dir,
    )
    if args.check:
        if stale:
            print(f"these tables differ from their results files: {stale}", file=sys.stderr)
            raise SystemExit(1)
        print(f"{len(tables)} tables on {len(pages)} pages match their results files")
        return
    for page, new in changed:
        page.write_text(new)
    print(f"{len(tables)} tables on {len(pages)} pages written ({len(stale)} changed)")


if __name__ == "__main__":
    main()
