"""The README's performance tables are written from the results files: a changed result changes the page."""

from __future__ import annotations

import json

import pytest

from benchmarks.readme_tables import main, rendered

PAGE = """Some prose.

<!-- table: results/speed.json -->
| old | table |
|---|---|
<!-- /table -->

More prose.
"""


def write(tmp_path, table: str) -> None:
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "speed.json").write_text(json.dumps({"table": table, "rows": []}))


def test_a_marked_table_is_the_rows_of_its_results_file_and_nothing_else_changes(tmp_path):
    write(tmp_path, "### A title the prose replaces\n\n| a | b |\n|---|---|\n| 1 | 2 |")
    text, sources = rendered(PAGE, tmp_path)
    assert sources == ["results/speed.json"]
    assert "| a | b |\n|---|---|\n| 1 | 2 |\n<!-- /table -->" in text and "old" not in text
    assert "A title" not in text and text.startswith("Some prose.") and text.endswith("More prose.\n")


def test_check_fails_on_a_stale_table_and_a_rewrite_mends_it(tmp_path):
    write(tmp_path, "| a |\n|---|\n| 3 |")
    readme = tmp_path / "README.md"
    readme.write_text(PAGE)
    with pytest.raises(SystemExit) as stale:
        main(["--readme", str(readme), "--check", "--results-dir", str(tmp_path / "out")])
    assert stale.value.code == 1 and readme.read_text() == PAGE
    main(["--readme", str(readme), "--results-dir", str(tmp_path / "out")])
    main(["--readme", str(readme), "--check", "--results-dir", str(tmp_path / "out")])
    assert "| 3 |" in readme.read_text()


def test_a_source_without_a_table_is_named(tmp_path):
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "speed.json").write_text(json.dumps({"rows": []}))
    with pytest.raises(ValueError, match="speed.json holds no 'table'"):
        rendered(PAGE, tmp_path)
