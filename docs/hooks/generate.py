"""MkDocs hook: the Reference and Results pages, generated from the code and the committed results.

Nothing here is committed as a page: at every ``mkdocs build`` the hook reads

* every ``agon`` command's options from its own parser (``agon COMMAND --help``, in-process);
* every config option's type, default and comment from the signatures and Google docstrings
  of :class:`~agon_lightning.training.module.AgonModule`, its option dataclasses, the data
  modules, the callbacks and every registered component;
* every entry-point group of ``agon_lightning.cli.registry.GROUPS`` and what is registered in it;
* ``agon_lightning.__all__`` for the API page (rendered by mkdocstrings from the docstrings);
* ``benchmarks/results/`` and ``benchmarks/README.md`` for the Results pages (plots copied in).

so a renamed option, a new command or a new result shows on the site without anyone editing
it. A command whose help fails to build fails the build.

The pages under ``docs/`` read as Markdown in a checkout too: a page links a file of the repository
by its relative path (``../benchmarks/results/countdown/s2/README.md``), never a page that exists
only on the site; on the site, :func:`on_page_markdown` points each such link at the page or plot
built from that file (:data:`BUILT_FROM`, :func:`plots`), else at the file on the repository's host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import html
import importlib
import inspect
import io
import os
import posixpath
import re
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "benchmarks" / "results"
MISSING = "(required)"


# ----------------------------------------------------------------------------- helpers
def type_name(annotation: Any) -> str:
    """A readable type: ``int``, ``str | None``, ``Literal['a', 'b']``, ``Rollout``."""
    if annotation is inspect.Parameter.empty:
        return ""
    if isinstance(annotation, str):
        return annotation
    text = inspect.formatannotation(annotation)
    return re.sub(r"\b(?:[a-z_][\w]*\.)+(?=[A-Z_a-z]\w*)", "", text).replace("typing.", "")


def default_text(value: Any) -> str:
    if value is inspect.Parameter.empty or value is dataclasses.MISSING:
        return MISSING
    lazy = getattr(value, "_lazy_class_type", None)  # jsonargparse's lazy_instance(Class, **kwargs)
    if lazy is not None:
        args = ", ".join(f"{k}={v!r}" for k, v in getattr(value, "_lazy_kwargs", {}).items())
        return f"{lazy.__name__}({args})"
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return f"{type(value).__name__}()"  # its fields and their defaults: the section below
    if callable(value) and not isinstance(value, type):
        return getattr(value, "__name__", repr(value))
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def doc_params(obj: Any) -> dict[str, str]:
    """``{name: description}`` from the ``Args:`` / ``Attributes:`` sections of ``obj``'s docstrings."""
    import docstring_parser

    found: dict[str, str] = {}
    for klass in getattr(obj, "__mro__", (obj,)):  # a subclass's own docstring first, then its bases'
        for source in (klass, vars(klass).get("__init__") if isinstance(klass, type) else None):
            doc = getattr(source, "__doc__", None) if source is not None else None
            if not doc or klass.__module__.split(".")[0] not in ("agon_lightning", "callbacks"):
                continue
            try:
                parsed = docstring_parser.parse(
                    inspect.cleandoc(doc), style=docstring_parser.DocstringStyle.GOOGLE
                )
            except docstring_parser.ParseError as err:
                raise RuntimeError(
                    f"{klass.__module__}.{klass.__qualname__}: docstring does not parse: {err}"
                ) from None
            for param in parsed.params:
                found.setdefault(param.arg_name, " ".join((param.description or "").split()))
    return found


def summary_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return markdown(doc.split("\n\n", 1)[0].replace("\n", " ").strip())


def markdown(text: str) -> str:
    """Docstring reST to Markdown: ``x`` and :role:`x` (``~`` dropped) become `x`."""
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def cell(text: str) -> str:
    return markdown(text).replace("|", "\\|").replace("\n", " ")


def options(cls: type) -> list[tuple[str, str, str, str, Any]]:
    """``(name, type, default, comment, annotation)`` of each constructor option of ``cls``."""
    comments = doc_params(cls)
    rows = []
    if dataclasses.is_dataclass(cls):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if not f.init:
                continue
            default = f.default
            if default is dataclasses.MISSING and f.default_factory is not dataclasses.MISSING:
                default = f.default_factory()
            hint = hints.get(f.name, f.type)
            rows.append((f.name, type_name(hint), default_text(default), comments.get(f.name, ""), hint))
        return rows
    signature = inspect.signature(cls.__init__)
    try:
        hints = typing.get_type_hints(cls.__init__)
    except Exception:  # an annotation that needs an optional package: fall back to the text
        hints = {}
    for name, param in signature.parameters.items():
        if name == "self" or param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        hint = hints.get(name, param.annotation)
        rows.append((name, type_name(hint), default_text(param.default), comments.get(name, ""), hint))
    return rows


def code_cell(text: str) -> str:
    """``text`` as inline code inside a table cell: HTML, so a ``|`` (``float | None``) shows as itself
    (a backslash-escaped pipe inside backticks would show its backslash)."""
    return "<code>" + html.escape(text, quote=False).replace("|", "&#124;") + "</code>"


def options_table(cls: type, prefix: str) -> list[str]:
    lines = ["| option | type | default | what |", "|---|---|---|---|"]
    for name, kind, default, comment, _ in options(cls):
        lines.append(f"| `{prefix}{name}` | {code_cell(kind)} | {code_cell(default)} | {cell(comment)} |")
    return lines


def dataclass_of(hint: Any) -> type | None:
    """The dataclass an option is typed with (``GRPOOptions``, ``LoraOptions | None``), if any."""
    candidates = [hint, *typing.get_args(hint)]
    return next((c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)), None)


# ----------------------------------------------------------------------------- pages
def commands_page() -> str:
    from agon_lightning.cli import COMMANDS, main, root_help

    lines = [
        "# Commands",
        "",
        "Generated at build time from each command's own parser (`agon COMMAND --help`): what is",
        "here is what the installed `agon` accepts. `fit`, `validate`, `test` and `predict` are",
        "LightningCLI's, so their options are every config option (the [Configuration](config.md)",
        "page explains them).",
        "",
        "```text",
        root_help().rstrip(),
        "```",
        "",
    ]
    env = {"COLUMNS": "100"}
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        for name, (_, line) in COMMANDS.items():
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    main([name, "--help"])
                except SystemExit as stop:
                    if stop.code not in (0, None):
                        raise RuntimeError(
                            f"agon {name} --help exited {stop.code}: {err.getvalue()[-2000:]}"
                        ) from None
            text = out.getvalue().rstrip()
            if not text:
                raise RuntimeError(f"agon {name} --help printed nothing")
            lines += [f"## agon {name}", "", line[0].upper() + line[1:] + ".", "", "```text", text, "```", ""]
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return "\n".join(lines)


def config_page() -> str:
    import agon_lightning
    from agon_lightning import callbacks
    from agon_lightning.training.module import AgonModule

    lines = [
        "# Configuration",
        "",
        "Every option a config or the command line sets, generated at build time from the",
        "signatures and docstrings: the type and default are the code's, the comment is the",
        "docstring's. `agon fit --config configs/agon.yaml --print_config` prints a run's whole",
        "config; `trainer.*` are [Lightning's Trainer](https://lightning.ai/docs/pytorch/stable/common/trainer.html)",
        "options. Components (`model.rollout`, `model.verifier`, ...) list their own options on the",
        "[Components](components.md) page.",
        "",
        "## `model`: AgonModule",
        "",
        summary_line(AgonModule),
        "",
        *options_table(AgonModule, "model."),
        "",
    ]
    for name, _, _, _, hint in options(AgonModule):
        nested = dataclass_of(hint)
        if nested is not None:
            lines += [f"### `model.{name}`: {nested.__name__}", "", summary_line(nested), "",
                      *options_table(nested, f"model.{name}."), ""]  # fmt: skip
    lines += [
        "## `data`: the data modules",
        "",
        "Chosen by `data.class_path`; options under `data.init_args`.",
        "",
    ]
    for export in agon_lightning.__all__:
        obj = getattr(agon_lightning, export)
        if export.endswith("DataModule") and export != "ProblemDataModule":
            lines += [f"### {export}", "", f"`{obj.__module__}.{obj.__qualname__}`: {summary_line(obj)}", "",
                      *options_table(obj, "data.init_args."), ""]  # fmt: skip
    lines += [
        "## `trainer.callbacks`: the callbacks",
        "",
        "Each under `class_path` with its `init_args`.",
        "",
    ]
    for export in callbacks.__all__:
        obj = getattr(callbacks, export)
        if isinstance(obj, type):
            lines += [f"### {export}", "", f"`agon_lightning.callbacks.{export}`: {summary_line(obj)}", "",
                      *options_table(obj, "init_args."), ""]  # fmt: skip
    return "\n".join(lines)


def components_page() -> str:
    from agon_lightning.cli.registry import GROUPS, load_plugins

    plugins = load_plugins()
    lines = [
        "# Components",
        "",
        "Every component registered in this installation, per entry-point group, generated at build",
        "time (`agon_lightning.cli.registry`); a plugin package installed beside it shows here too. Choose",
        "one by entry-point name, class name or class path (`--model.verifier=exact_match`,",
        "`--model.verifier=ExactMatchVerifier`); [A new domain](../tutorials/new-domain.md) registers one.",
        "",
    ]
    for group, base in GROUPS.items():
        option = group.rsplit(".", 1)[1].rstrip("s")
        # the data module is a top-level option, and the SFT examples are one of its options
        key = {"data": "data", "example": "data.examples"}.get(option, f"model.{option}")
        lines += [f"## `{group}`", "", f"Base class `{base.__module__}.{base.__qualname__}`: {summary_line(base)}",
                  f"Option: `model.{option}` (the format check: `model.reward.init_args.format`)." if option == "format"
                  else f"Option: `{key}`.", ""]  # fmt: skip
        for name, cls in sorted(plugins[group].items()):
            lines += [
                f"### `{name}`: {cls.__name__}",
                "",
                f"`{cls.__module__}.{cls.__qualname__}`: {summary_line(cls)}",
                "",
            ]
            rows = options_table(
                cls,
                f"{key}.init_args." if option != "format" else "model.reward.init_args.format.init_args.",
            )
            lines += [*rows, ""] if len(rows) > 2 else ["No options.", ""]
    return "\n".join(lines)


def api_page() -> str:
    import agon_lightning

    lines = [
        "# Python API",
        "",
        "The names `agon_lightning` exports (`agon_lightning.__all__`), from their docstrings; they",
        "stay importable from the package when modules move. Each is documented at the module that",
        "defines it, the path configs and bundles use.",
        "",
        "```python",
        "from agon_lightning import AgonModule, Cascade, Problem, Verifier",
        "```",
        "",
    ]
    for export in agon_lightning.__all__:
        obj = getattr(agon_lightning, export)
        lines += [f"::: {obj.__module__}.{obj.__qualname__}", "    options:", "      heading_level: 2", ""]
    return "\n".join(lines)


def result_file(path: Path) -> str:
    """A committed markdown result, its heading levels pushed one down under the page's title."""
    text = path.read_text()
    return re.sub(r"^(#+) ", lambda m: "#" + m.group(1) + " ", text, flags=re.M)


def images(folder: Path, rel: str) -> list[str]:
    return [f"![{png.stem}]({rel}/{png.name})" for png in sorted(folder.glob("*.png"))]


def sweep_paper_page() -> str:
    folder = RESULTS / "sweep_paper"
    return "\n\n".join([
        "# The paper's table on the embedded testbed",
        "Generated at build time from `benchmarks/results/sweep_paper/`, the committed run: its plan and",
        "what it showed, the paper's table beside ours, the results table and the plots.",
        "pass@1 on this page is the share of the held-out draws answered right with one greedy attempt,"
        " as the runs logged it (chain_sum's 200 held-out draws; the paper table pools them over seeds).",
        result_file(folder / "README.md"),
        result_file(folder / "paper_table.md"),
        result_file(folder / "results.md"),
        *images(folder, "sweep_paper"),
    ])  # fmt: skip


# The one pass@1 every page leads with; a page that also shows another names it (see PASS_BY_DRAWS).
PASS_AT_1 = (
    "**pass@1**, here and on every results page, is the share of *distinct* held-out problems the"
    " policy answers right with one greedy attempt (a problem drawn twice by the generator counts once)."
)
PASS_BY_DRAWS = (
    "The *results table* below and the `pass_at_1.png` curve show pass@1 **by draws**, as each run"
    " logged it during training: over every held-out draw, so a problem the generator drew twice"
    " counts twice. Frequent problems are easier, so it reads higher than pass@1 over distinct"
    " problems (Countdown's Agon seed 0: 0.750 by draws, 0.680 over distinct problems). The paper"
    " table and the paired endpoints count distinct problems."
)


def countdown_page() -> str:
    folder = RESULTS / "countdown" / "sweep"
    return "\n\n".join([
        "# Countdown: the paper's table and the registered endpoints (measurement S1)",
        "Generated at build time from `benchmarks/results/countdown/sweep/`: the sweep's paper table, its"
        " pre-registered endpoints with their decisions, the results table and the plots. The design and"
        " the testbed's preconditions: `benchmarks/results/countdown/README.md` and"
        " [the Countdown testbed](../testbeds/countdown.md).",
        PASS_AT_1,
        "**What it shows.** Agon − GRPO is +0.134 [+0.088, +0.178] on the main split (shown as registered),"
        " and so is the exchange step (cooperative − GRPO). The competition step (Agon − cooperative) is not"
        " resolved. And the untrained base reading its own summary (`moa_untrained`, 70.6) does as well"
        " as Agon (69.2): the gain over GRPO is the two-pass cascade's; what Agon's *training* adds is not"
        " measured by this sweep. Two caveats found since (the design's *Corrections to S1*): the base had"
        " seen 805 of the 980 held-out main problems in SFT, and the registered percentile bootstrap"
        " under-covers at 3 seeds (a t over seeds gives Agon − GRPO +0.138 [+0.060, +0.216]). Experiment S2"
        " (`benchmarks/results/countdown/s2/README.md`) asks the question again on a corrected testbed.",
        result_file(folder / "paper_table.md"),
        result_file(folder / "endpoints.md"),
        PASS_BY_DRAWS,
        result_file(folder / "results.md"),
        *images(folder, "countdown"),
    ])  # fmt: skip


def sweeps_page() -> str:
    parts = [
        "# Earlier sweeps",
        "Generated at build time from `benchmarks/results/sweep_tiny/` and `sweep_small/`.",
    ]
    for name in ("sweep_tiny", "sweep_small"):
        folder = RESULTS / name
        parts += [f"## `{name}`"]
        parts += [
            result_file(folder / f).replace("\n# ", "\n### ")
            for f in ("README.md", "results.md")
            if (folder / f).exists()
        ]
        parts += images(folder, name)
    return "\n\n".join(parts)


def benchmarks_page() -> str:
    return "\n\n".join([
        "# Benchmarks",
        "Generated at build time from `benchmarks/README.md`: each table with the command that made it"
        " (JSON in `benchmarks/results/`).",
        result_file(ROOT / "benchmarks" / "README.md"),
    ])  # fmt: skip


def scale_page() -> str:
    return "\n\n".join([
        "# Scale: the Qwen3-0.6B architecture on CPU",
        "Generated at build time from `benchmarks/results/scale.md`.",
        result_file(RESULTS / "scale.md"),
    ])  # fmt: skip


PAGES = {
    "reference/commands.md": commands_page,
    "reference/config.md": config_page,
    "reference/components.md": components_page,
    "reference/api.md": api_page,
    "results/countdown.md": countdown_page,
    "results/sweep-paper.md": sweep_paper_page,
    "results/sweeps.md": sweeps_page,
    "results/benchmarks.md": benchmarks_page,
    "results/scale.md": scale_page,
}


#: A file of the repository → the generated page built from it, for a doc page's link to that file.
BUILT_FROM = {
    "agon_lightning/cli/commands.py": "reference/commands.md",
    "agon_lightning/training/module.py": "reference/config.md",
    "callbacks/__init__.py": "reference/config.md#trainercallbacks-the-callbacks",
    "agon_lightning/cli/registry.py": "reference/components.md",
    "agon_lightning/__init__.py": "reference/api.md",
    **dict.fromkeys(
        [f"benchmarks/results/countdown/sweep/{f}" for f in ("endpoints.md", "paper_table.md", "results.md")],
        "results/countdown.md",
    ),
    **dict.fromkeys(
        [f"benchmarks/results/sweep_paper/{f}" for f in ("README.md", "paper_table.md", "results.md")],
        "results/sweep-paper.md",
    ),
    **{
        f"benchmarks/results/{n}/{f}": "results/sweeps.md"
        for n in ("sweep_tiny", "sweep_small")
        for f in ("README.md", "results.md")
    },
    "benchmarks/README.md": "results/benchmarks.md",
    "benchmarks/results/scale.md": "results/scale.md",
}
#: Each folder of committed plots the site serves, and where (``results/NAME/``).
PLOT_FOLDERS = {
    "countdown": RESULTS / "countdown" / "sweep",
    "countdown-s2": RESULTS / "countdown" / "s2" / "sweep",
    **{n: RESULTS / n for n in ("sweep_paper", "sweep_tiny", "sweep_small")},
}
LINK = re.compile(r"(\]\()([^)\s]+)(\))")


def plots() -> dict[str, str]:
    """Every committed plot the site serves: its path in the repository → its path on the site."""
    return {
        str(png.relative_to(ROOT)): f"results/{name}/{png.name}"
        for name, folder in PLOT_FOLDERS.items()
        for png in sorted(folder.glob("*.png"))
    }


def site_link(target: str, page: str, repo_url: str) -> str:
    """A link of the doc page ``page`` (its path under ``docs/``) as the site serves it.

    A link within ``docs/`` (or not relative) stays; a link to a file of the repository outside it
    goes to the page or plot built from that file, else to the file on ``repo_url``'s host; a link
    to nothing stays, for MkDocs to report.
    """
    path, hash_, anchor = target.partition("#")
    if not path or "://" in path or path.startswith(("/", "mailto:")):
        return target
    where = posixpath.normpath(posixpath.join("docs", posixpath.dirname(page), path))
    if where.startswith(("docs/", "../")) or not (ROOT / where).exists():
        return target
    built = BUILT_FROM.get(where) or plots().get(where)
    if built is None:
        kind = "tree" if (ROOT / where).is_dir() else "blob"
        return f"{repo_url.rstrip('/')}/{kind}/main/{where}" + hash_ + anchor
    built_path, _, built_anchor = built.partition("#")
    anchor = anchor or built_anchor
    return posixpath.relpath(built_path, posixpath.dirname(page) or ".") + ("#" + anchor if anchor else "")


def on_page_markdown(markdown_text: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs' hook: a link to a file of the repository outside ``docs/`` is pointed at what the
    site serves for it (:func:`site_link`), before MkDocs checks every link."""
    page_uri, repo_url = page.file.src_uri, config["repo_url"]
    return LINK.sub(lambda m: m[1] + site_link(m[2], page_uri, repo_url) + m[3], markdown_text)


ROLE = re.compile(r":(?:mod|class|func|meth|attr|data|exc|obj):<code>(~?)([\w.]+)</code>")


def on_page_content(html_text: str, page: Any, config: Any, files: Any) -> str:
    """MkDocs' hook: Sphinx roles left in docstrings (``:mod:`x.y```, which mkdocstrings shows raw)
    become cross-references, resolved by autorefs where the target is documented, else plain code."""

    def link(match: re.Match) -> str:
        tilde, target = match.groups()
        shown = target.rsplit(".", 1)[-1] if tilde else target
        return f'<autoref optional identifier="{target}"><code>{shown}</code></autoref>'

    return ROLE.sub(link, html_text)


def on_files(files: Any, config: Any) -> Any:
    """MkDocs' hook: every generated page and the committed plots join the site's files."""
    from mkdocs.structure.files import File

    for uri, build in PAGES.items():
        files.append(File.generated(config, uri, content=build()))
    for source, uri in plots().items():
        files.append(File.generated(config, uri, content=(ROOT / source).read_bytes()))
    return files


def generate_all() -> dict[str, str]:
    """Every generated page's text, for the tests (no MkDocs needed)."""
    importlib.import_module("agon_lightning")
    return {uri: build() for uri, build in PAGES.items()}
