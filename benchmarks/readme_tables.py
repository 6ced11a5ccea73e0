"""The performance tables of ``benchmarks/README.md``, written from the results files that hold them.

A table in the README stands between two markers naming its source::

    <!-- table: results/vs_trl.json -->
    | β | tokens/step | ... |
    |---|---|---|
    <!-- /table -->

and is the ``table`` a benchmark wrote into that JSON (its rows, without the title line: the
README's prose says what the table is). The docs' Results pages are built from this README, so
they follow. ::

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

README = Path(__file__).parent / "README.md"
BLOCK = re.compile(r"(<!-- table: (?P<source>[^ ]+) -->\n)(?P<body>.*?)(<!-- /table -->)", re.S)


def table_rows(source: Path) -> str:
    """The Markdown table rows of ``source``'s ``table`` (title and blank lines dropped), newline-ended."""
    data = json.loads(source.read_text())
    table = data.get("table")
    if not isinstance(table, str):
        raise ValueError(f"{source} holds no 'table' text (keys: {sorted(data)})")
    rows = [line for line in table.splitlines() if line.startswith("|")]
    if not rows:
        raise ValueError(f"{source}'s 'table' has no Markdown table rows")
    return "\n".join(rows) + "\n"


def rendered(text: str, root: Path) -> tuple[str, list[str]]:
    """``text`` with every marked table written from its source (relative to ``root``), and the sources."""
    sources: list[str] = []

    def fill(match: re.Match[str]) -> str:
        sources.append(match["source"])
        return match[1] + table_rows(root / match["source"]) + match[4]

    return BLOCK.sub(fill, text), sources


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--readme", type=Path, default=README)
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a table differs")
    add_results_dir(parser)
    args = parser.parse_args(argv)
    text = args.readme.read_text()
    new, sources = rendered(text, args.readme.parent)
    stale = [s for s in sources if block_of(text, s) != block_of(new, s)]
    write_json(
        "readme_tables", {"readme": str(args.readme), "tables": sources, "stale": stale}, args.results_dir
    )
    if args.check:
        if stale:
            print(f"{args.readme}: these tables differ from their results files: {stale}", file=sys.stderr)
            raise SystemExit(1)
        print(f"{args.readme}: {len(sources)} tables match their results files")
        return
    args.readme.write_text(new)
    print(f"{args.readme}: {len(sources)} tables written ({len(stale)} changed)")


def block_of(text: str, source: str) -> str | None:
    """The body of the block marked with ``source`` in ``text``."""
    for match in BLOCK.finditer(text):
        if match["source"] == source:
            return match["body"]
    return None


if __name__ == "__main__":
    main()
