"""Every shell and Python block of the docs and the README runs, or says why it cannot.

A block's mark is an HTML comment on the line before its fence:

* none: it runs as written, in a scratch copy of a workspace holding the checkout's
  ``configs/``, ``benchmarks/`` and ``scripts/`` and a 2-step run of the main job in
  ``runs/agon``: shell blocks under ``bash -euo pipefail``, Python blocks in one interpreter
  per page (fresh globals for each block); a page's blocks run in order in one directory, so a
  later block uses what an earlier one wrote;
* ``<!-- docs-test: workspace -->``: the block that makes that run (the deploy tutorial's
  first step); it runs once, to build the workspace every page starts from;
* ``<!-- docs-test: file NAME -->``: the block is a file's content; it is written to ``NAME``
  for the blocks after it (which import it);
* ``<!-- docs-test: long -->``: a full training job; its ``agon fit|validate|test|sft``
  commands are parsed with ``--print_config`` (every option, class path and value checked,
  nothing trained) and ``agon sweep`` runs with ``--dry-run``; every other command runs;
* ``<!-- docs-test: gpu -->`` / ``<!-- docs-test: network -->``: needs a GPU (or vLLM's
  engine) / the network (package installs, Hub downloads); not run here.

Every fence names its language, so a shell block cannot pass as plain text. The counts of
each mark are held below: a new block runs, or its mark is counted on purpose.
"""

from __future__ import annotations

import json
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = sorted((ROOT / "docs").rglob("*.md")) + [ROOT / "README.md"]
LANGUAGES = {"bash": "shell", "sh": "shell", "shell": "shell", "python": "python", "py": "python"}
MARKS = ("gpu", "network", "long", "file", "workspace")
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
MARK = re.compile(r"^<!-- docs-test: (\w+)(?: (\S+))? -->$")
# blocks per mark, over every page: a new block runs, or this says why not
EXPECTED = {"run": 24, "workspace": 1, "file": 3, "long": 17, "gpu": 11, "network": 6}
TIMEOUT_S = 300


@dataclass
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str  # a fence's language as written
    code: str
    mark: str | None = None
    argument: str | None = None  # the file name of a ``file`` mark

    @property
    def kind(self) -> str | None:
        """``shell``, ``python``, or ``None`` for a block that is neither (text, YAML, ...)."""
        return LANGUAGES.get(self.language)

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def read_blocks(path: Path) -> list[Block]:
    """Every fenced block of a Markdown file, with the mark on the line before it, if any."""
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        indent, language = opening.groups()
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"{path.relative_to(ROOT)}:{i + 1}: a fence that never closes")
        code = textwrap.dedent("\n".join(line[len(indent) :] if line.startswith(indent) else line
                                         for line in lines[i + 1 : end]))  # fmt: skip
        before = next((lines[j].strip() for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        mark = MARK.match(before)
        blocks.append(Block(path, i + 1, language, code + "\n", *(mark.groups() if mark else (None, None))))
        i = end + 1
    return blocks


def all_blocks() -> list[Block]:
    return [block for page in PAGES for block in read_blocks(page)]


def code_blocks() -> list[Block]:
    return [block for block in all_blocks() if block.kind is not None]


def test_the_reader_finds_fences_marks_and_languages(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        "text\n\n```bash\nagon config\n```\n\n<!-- docs-test: gpu -->\n```python\nimport torch\n```\n"
        "\n- item\n\n  <!-- docs-test: file a.py -->\n  ```python\n  x = 1\n  ```\n```yaml\nk: v\n```\n"
    )
    blocks = read_blocks(page)
    assert [(b.language, b.mark, b.argument, b.code) for b in blocks] == [
        ("bash", None, None, "agon config\n"),
        ("python", "gpu", None, "import torch\n"),
        ("python", "file", "a.py", "x = 1\n"),
        ("yaml", None, None, "k: v\n"),
    ]
    assert [b.kind for b in blocks] == ["shell", "python", "python", None]


def test_every_fence_names_its_language_and_every_mark_is_known():
    blocks = all_blocks()
    assert len(PAGES) > 15 and blocks
    unnamed = [b.where() for b in blocks if not b.language]
    assert unnamed == [], f"a fence without a language (```text for output, ```bash for commands): {unnamed}"
    unknown = [f"{b.where()}: {b.mark}" for b in blocks if b.mark is not None and b.mark not in MARKS]
    assert unknown == [], f"marks are {MARKS}: {unknown}"
    stray = [b.where() for b in blocks if b.mark is not None and b.kind is None]
    assert stray == [], f"a mark on a block that is neither shell nor Python: {stray}"
    assert all(b.argument for b in blocks if b.mark == "file"), "a file mark names its file"
    assert not [b.where() for b in blocks if b.mark == "long" and b.kind != "shell"], (
        "long marks are for shell blocks"
    )


# A Markdown link or image: [text](target "title"), the text holding at most one level of brackets.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^()\s<>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
CODE = re.compile(r"^(\s*)```.*?^\1```|`[^`\n]+`", re.S | re.M)  # fenced blocks and code spans


def relative_links(path: Path) -> list[str]:
    """Every relative link and image target of a Markdown file, outside code, anchors kept."""
    text = CODE.sub("", path.read_text())
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_the_link_reader_skips_code_and_absolute_links(tmp_path):
    page = tmp_path / "p.md"
    page.write_text(
        '[a](b.md#x) ![img](plots/c.png) [`code` in text](d/e.md "title") [web](https://x.org/y.md)\n'
        '[self](#anchor) `[not](code.md)`\n\n```python\nx = "[no](fence.md)"\n```\n[f [nested] g](h.md)\n'
    )
    assert relative_links(page) == ["b.md#x", "plots/c.png", "d/e.md", "h.md"]


def test_every_relative_link_of_the_docs_and_the_readme_reaches_a_file_of_the_checkout():
    """The docs read as Markdown in a checkout: no link points at a page that exists only on the built
    site (those link the file the page is built from; docs/hooks/generate.py maps it for the site)."""
    broken = [f"{page.relative_to(ROOT)}: {target}" for page in PAGES for target in relative_links(page)
              if not (page.parent / target.partition("#")[0]).exists()]  # fmt: skip
    assert broken == [], (
        "links to nothing in the checkout (link the file, not the site's page):\n" + "\n".join(broken)
    )
    readme = (ROOT / "README.md").read_text()
    assert "docs/get-started.md" in relative_links(ROOT / "README.md")
    assert len(readme.splitlines()) <= 200, "the README fits on a screen or two; the rest belongs in docs/"


def test_the_marks_are_counted():
    counts = {name: 0 for name in EXPECTED}
    for block in code_blocks():
        counts[block.mark or "run"] += 1
    listing = "\n".join(f"  {b.where()}: {b.mark or 'run'}" for b in code_blocks())
    assert counts == EXPECTED, f"blocks per mark changed; update EXPECTED on purpose:\n{listing}"


# ----------------------------------------------------------------------------- running them
SHIM = textwrap.dedent("""\
    # docs-test long block: full jobs are parsed (--print_config) or planned (--dry-run), not run
    agon() {
        case "$1" in
            fit|validate|test|sft|sweep) python -c 'import json, sys; print(json.dumps(sys.argv[1:]))' "$@" >> "$AGON_DOCS_JOBS" ;;
            *) command agon "$@" ;;
        esac
    }
""")
CHECK_JOBS = textwrap.dedent("""\
    import contextlib, io, json
    from agon_lightning.cli import main
    for line in open(".agon_docs_jobs.jsonl"):
        args = json.loads(line)
        args += ["--dry-run"] if args[0] == "sweep" else ["--print_config"]
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out):
                main(args)
        except SystemExit as stop:
            assert stop.code in (0, None), f"agon {' '.join(args)}: exit {stop.code}"
        assert out.getvalue(), f"agon {' '.join(args)} printed nothing"
        print("checked: agon", " ".join(args))
""")
# One interpreter per page: runs each Python block it is sent (fresh globals), answers a line each.
RUNNER = textwrap.dedent("""\
    import contextlib, io, json, sys, traceback
    for line in sys.stdin:
        request, out, ok = json.loads(line), io.StringIO(), True
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                exec(compile(request["code"], request["name"], "exec"), {"__name__": "__main__"})
            except SystemExit as stop:
                ok = stop.code in (0, None)
                print(f"SystemExit({stop.code!r})")
            except BaseException:
                ok = False
                traceback.print_exc()
        sys.__stdout__.write(json.dumps({"ok": ok, "out": out.getvalue()[-4000:]}) + "\\n")
        sys.__stdout__.flush()
""")


class PythonRunner:
    """A page's Python interpreter, started on first use."""

    def __init__(self, workdir: Path, started: list[int]) -> None:
        self.workdir, self.started, self.proc = workdir, started, None

    def run(self, code: str, name: str) -> tuple[bool, str]:
        if self.proc is None:
            self.proc = subprocess.Popen([sys.executable, "-c", RUNNER], cwd=self.workdir, env=environment(self.workdir),
                                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)  # fmt: skip
            self.started.append(self.proc.pid)
        self.proc.stdin.write(json.dumps({"code": code, "name": name}) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], TIMEOUT_S)
        if not ready:
            return False, f"no answer in {TIMEOUT_S} s"
        line = self.proc.stdout.readline()
        if not line:
            return False, f"the interpreter exited {self.proc.wait()}"
        answer = json.loads(line)
        return answer["ok"], answer["out"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(workdir: Path) -> dict[str, str]:
    bin_dir = str(Path(sys.executable).parent)
    return {
        **os.environ,
        "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        "HF_HUB_OFFLINE": "1",
        "OMP_NUM_THREADS": "1",
        "PYTHONPATH": str(workdir),
        "AGON_DOCS_JOBS": str(workdir / ".agon_docs_jobs.jsonl"),
        "NO_COLOR": "1",
    }


def run(args: list[str], workdir: Path, started: list[int]) -> subprocess.CompletedProcess:
    proc = subprocess.Popen(args, cwd=workdir, env=environment(workdir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    started.append(proc.pid)  # its process group: what a block left running in the background
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return subprocess.CompletedProcess(args, 124, out, "")
    return subprocess.CompletedProcess(args, proc.returncode, out, "")


def workspace_block() -> Block:
    (block,) = [b for b in code_blocks() if b.mark == "workspace"]
    return block


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> Path:
    """The checkout's configs, benchmarks and scripts, and the workspace block's run in runs/agon."""
    base = tmp_path_factory.mktemp("docs-workspace")
    for name in ("configs", "benchmarks", "scripts"):
        (base / name).symlink_to(ROOT / name)
    block = workspace_block()
    done = run(["bash", "-euo", "pipefail", "-c", block.code], base, [])
    assert done.returncode == 0, f"{block.where()} exited {done.returncode}:\n{done.stdout[-4000:]}"
    assert (base / "runs/agon/checkpoints/last/agon.json").is_file()
    assert (base / "runs/agon/lightning_logs/version_0/trace_lengths.jsonl").is_file()
    return base


RUNNABLE = [
    page
    for page in PAGES
    if any(b.kind and b.mark not in ("gpu", "network", "workspace") for b in read_blocks(page))
]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUNNABLE, ids=[str(p.relative_to(ROOT)) for p in RUNNABLE])
def test_the_blocks_of_each_page_run(page, workspace, tmp_path):
    if shutil.which("curl") is None and any(
        "curl " in b.code for b in read_blocks(page) if b.kind == "shell"
    ):
        pytest.skip("needs curl, which this machine lacks")
    workdir = tmp_path / "work"
    shutil.copytree(workspace, workdir, symlinks=True)
    port = str(free_port())  # a page's server listens here instead of 8000
    started: list[int] = []
    python = PythonRunner(workdir, started)
    try:
        for block in read_blocks(page):
            if block.kind is None or block.mark in ("gpu", "network", "workspace"):
                continue
            code = block.code.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace(
                "--port 8000", f"--port {port}"
            )
            if block.mark == "file":
                (workdir / block.argument).write_text(code)
                continue
            if block.kind == "python":
                ok, out = python.run(code, block.where())
                assert ok, f"{block.where()} failed:\n{out}"
                continue
            script = (SHIM if block.mark == "long" else "") + code
            done = run(["bash", "-euo", "pipefail", "-c", script], workdir, started)
            assert done.returncode == 0, f"{block.where()} exited {done.returncode}:\n{done.stdout[-4000:]}"
        if any(block.mark == "long" for block in read_blocks(page)):
            # every long block's jobs, parsed in the page's interpreter (one import of torch and Lightning)
            assert (workdir / ".agon_docs_jobs.jsonl").is_file(), "a long block started no job"
            ok, out = python.run(CHECK_JOBS, f"{page.relative_to(ROOT)}: the long blocks' jobs")
            assert ok, out
    finally:
        for group in started:
            try:
                os.killpg(group, signal.SIGTERM)
            except (ProcessLookupError, PermissionError):
                pass


def test_long_blocks_hold_the_jobs_and_only_them():
    """A long block starts a job (else it should run); the shim passes everything else through."""
    for block in code_blocks():
        if block.mark == "long":
            assert re.search(r"\bagon (fit|validate|test|sft|sweep)\b", block.code), block.where()


# ----------------------------------------------------------------------------- the generated pages
@pytest.fixture(scope="module")
def generated() -> dict[str, str]:
    sys.path.insert(0, str(ROOT / "docs" / "hooks"))
    try:
        import generate
    finally:
        sys.path.pop(0)
    return generate.generate_all()


def test_on_the_site_every_link_of_a_doc_page_reaches_a_page_or_a_plot_it_serves(generated):
    """What ``mkdocs build --strict`` checks, without MkDocs: after the hook's rewrite, a relative
    link of a page under docs/ reaches a doc page, a generated page or a served plot."""
    import generate

    served = {str(p.relative_to(ROOT / "docs")) for p in (ROOT / "docs").rglob("*") if p.is_file()}
    served |= set(generated) | set(generate.plots().values())
    missing = []
    for page in (p for p in PAGES if p.parent != ROOT):
        uri = str(page.relative_to(ROOT / "docs"))
        for target in relative_links(page):
            link = generate.site_link(target, uri, "https://host/repo")
            if "://" in link:
                continue  # a repository file the site does not build: its page on the host
            where = os.path.normpath(os.path.join(os.path.dirname(uri), link.partition("#")[0]))
            if where not in served:
                missing.append(f"{uri}: {target} -> {link}")
    assert missing == [], "links the built site would not serve:\n" + "\n".join(missing)
    assert (
        generate.site_link("../../benchmarks/README.md", "tutorials/x.md", "h") == "../results/benchmarks.md"
    )
    assert generate.site_link("../../agon_lightning/cli/commands.py#agon-plan", "tutorials/x.md", "h") == (
        "../reference/commands.md#agon-plan"
    )
    assert generate.site_link("../../callbacks/__init__.py", "guides/x.md", "h") == (
        "../reference/config.md#trainercallbacks-the-callbacks"
    )
    assert generate.site_link("../benchmarks/results/countdown/s2/sweep/pass_at_1.png", "index.md", "h") == (
        "results/countdown-s2/pass_at_1.png"
    )
    assert generate.site_link("../benchmarks/results/countdown/s2/README.md", "index.md", "https://h/r/") == (
        "https://h/r/blob/main/benchmarks/results/countdown/s2/README.md"
    )
    assert generate.site_link("guides/vllm.md#install", "index.md", "h") == "guides/vllm.md#install"


def test_the_reference_pages_hold_every_command_option_and_component(generated):
    import inspect

    from agon_lightning.cli import COMMANDS
    from agon_lightning.cli.registry import GROUPS, entry_point_paths
    from agon_lightning.training.module import AgonModule, GRPOOptions

    commands = generated["reference/commands.md"]
    for name in COMMANDS:
        assert f"## agon {name}\n" in commands, name
    assert "--model.grpo.num_generations" in commands and "--bundle" in commands  # fit's and serve's options
    config = generated["reference/config.md"]
    for name in inspect.signature(AgonModule.__init__).parameters:
        if name != "self":
            assert f"| `model.{name}` |" in config, name
    assert (
        "| `model.grpo.num_generations` | <code>int</code> | <code>8</code> | N, rollouts per problem"
        in config
    )
    # a type with a union and a lazy default render as themselves (not `float \\| None`, `_LazyInitBaseClass()`)
    assert "| `model.max_grad_norm` | <code>float &#124; None</code> |" in config
    assert "<code>CompetitiveReward()</code>" in config and "_LazyInitBaseClass" not in config
    assert GRPOOptions.__dataclass_fields__.keys() <= {
        line.split("`")[1].removeprefix("model.grpo.")
        for line in config.splitlines()
        if line.startswith("| `model.grpo.")
    }
    assert (
        "### ProgressLog" in config
        and "`init_args.every_n_steps` | <code>int</code> | <code>5</code>" in config
    )
    components = generated["reference/components.md"]
    for group in GROUPS:
        assert f"## `{group}`" in components
        for name, path in entry_point_paths(group).items():
            assert f"### `{name}`: {path.rsplit('.', 1)[1]}" in components and path in components, name
    api = generated["reference/api.md"]
    import agon_lightning

    assert api.count("::: ") == len(agon_lightning.__all__)


def test_the_results_pages_carry_the_committed_tables(generated):
    countdown = generated["results/countdown.md"]
    for table in ("paper_table.md", "endpoints.md"):
        committed = (ROOT / "benchmarks/results/countdown/sweep" / table).read_text()
        assert committed.splitlines()[-1] in countdown, table
    assert "*distinct* held-out problems" in countdown and "**by draws**" in countdown
    paper = generated["results/sweep-paper.md"]
    committed = (ROOT / "benchmarks/results/sweep_paper/paper_table.md").read_text()
    assert committed.splitlines()[-1] in paper  # the table's last row, as committed
    assert "![pass_at_1](sweep_paper/pass_at_1.png)" in paper
    assert "Generated at build time" in generated["results/benchmarks.md"]
