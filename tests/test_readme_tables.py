"""The README's performance tables are written from the results files: a changed result changes the page."""

from __future__ import annotations

import json
import re

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


def test_one_of_several_tables_is_named_by_its_place_and_an_unnamed_one_is_refused(tmp_path):
    (tmp_path / "results").mkdir()
    two = {"tables": ["### first\n\n| a |\n|---|\n| 1 |", "### second\n\n| b |\n|---|\n| 2 |"]}
    (tmp_path / "results" / "speed.json").write_text(json.dumps(two))
    text, _ = rendered(PAGE.replace("speed.json", "speed.json#1"), tmp_path)
    assert "| b |\n|---|\n| 2 |\n<!-- /table -->" in text and "| a |" not in text
    with pytest.raises(ValueError, match=r"holds 2 'tables' \(name one as #0 … #1\)"):
        rendered(PAGE.replace("speed.json", "speed.json#2"), tmp_path)
    with pytest.raises(ValueError, match=r"it holds 2 'tables': name one as #0 … #1"):
        rendered(PAGE, tmp_path)


def test_several_sources_make_one_table_under_the_first_header_and_must_agree_on_it(tmp_path):
    (tmp_path / "results").mkdir()
    for seed in (0, 1):
        table = f"### seed {seed}\n\n| run | pass |\n|---|---|\n| seed={seed} | 0.{seed} |"
        (tmp_path / "results" / f"s{seed}.json").write_text(json.dumps({"table": table}))
    (tmp_path / "results" / "other.json").write_text(
        json.dumps({"table": "| run | fail |\n|---|---|\n| x | 1 |"})
    )
    text, sources = rendered(PAGE.replace("results/speed.json", "results/s0.json results/s1.json"), tmp_path)
    assert sources == ["results/s0.json results/s1.json"]
    assert "| run | pass |\n|---|---|\n| seed=0 | 0.0 |\n| seed=1 | 0.1 |\n<!-- /table -->" in text
    with pytest.raises(
        ValueError, match=re.escape("other.json's table header '| run | fail |' differs from results/s0")
    ):
        rendered(PAGE.replace("results/speed.json", "results/s0.json results/other.json"), tmp_path)


def test_every_page_with_a_marker_is_checked_and_a_stale_docs_page_is_named(tmp_path):
    write(tmp_path, "| a |\n|---|\n| 3 |")
    (tmp_path / "docs").mkdir()
    readme, guide = tmp_path / "README.md", tmp_path / "docs" / "guide.md"
    readme.write_text(PAGE.replace("| old | table |\n|---|---|\n", "| a |\n|---|\n| 3 |\n"))
    guide.write_text(PAGE.replace("results/speed.json", "../results/speed.json"))
    out = ["--results-dir", str(tmp_path / "out")]
    with pytest.raises(SystemExit):
        main(["--readme", str(readme), "--readme", str(guide), "--check", *out])
    assert json.loads((tmp_path / "out" / "readme_tables.json").read_text())["stale"] == [
        f"{guide}: ../results/speed.json"
    ]
    main(["--readme", str(readme), "--readme", str(guide), *out])
    main(["--readme", str(readme), "--readme", str(guide), "--check", *out])
    assert "| 3 |" in guide.read_text()


def test_the_shipped_pages_include_the_docs_that_hold_tables():
    from benchmarks.readme_tables import default_pages

    names = {page.name for page in default_pages()}
    assert {"README.md", "vllm.md", "dynamic-sampling.md"} <= names
