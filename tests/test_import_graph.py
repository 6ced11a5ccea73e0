"""The package's modules import each other without a circle, and no floor reaches up.

Every import counts, wherever it is written: at module level, under ``if TYPE_CHECKING:`` (a
circle there is still two modules that each need the other to be read), inside a function or a
method, and ``importlib.import_module("...")`` with a literal name. An import inside a function
only delays a dependency, it does not remove it: a lower floor that needs a higher one's name has
that name moved down, or is handed it (an entry point a testbed registers), never the import
hidden in a function. Names that PEP 562 tables load by a name computed at run time (the
package's public names, ``moved.py``'s old paths) are no import; they point down or sideways
(``agon_lightning/__init__.py``, the rollout package) or are dated aliases (``moved.py``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import agon_lightning
import agon_lightning.callbacks

ROOT = Path(agon_lightning.__file__).parent
# The top-level callbacks/ folder installs as agon_lightning.callbacks (pyproject's package-dir).
CALLBACKS = Path(agon_lightning.callbacks.__file__).parent


def modules_in(folder: Path, package: str) -> dict[str, Path]:
    """``{dotted module name: file}`` of every ``.py`` file under ``folder``, the package ``package``."""
    found = {}
    for path in folder.rglob("*.py"):
        parts = (*package.split("."), *path.relative_to(folder).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def imported_names(tree: ast.Module) -> set[str]:
    """Every module name ``tree`` imports, anywhere in it (``from pkg import mod`` counts ``pkg``
    and ``pkg.mod``), and every literal ``importlib.import_module("...")``."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif (
            isinstance(node, ast.Call)
            and ast.unparse(node.func) in ("importlib.import_module", "import_module")
            and node.args
            and isinstance(node.args[0], ast.Constant)
        ):
            found.add(node.args[0].value)
    return found


def import_graph(modules: dict[str, Path] | None = None) -> dict[str, set[str]]:
    """``{module: the modules of ``modules`` it imports}``; the package and its callbacks by default."""
    if modules is None:
        modules = {**modules_in(ROOT, "agon_lightning"), **modules_in(CALLBACKS, "agon_lightning.callbacks")}
    known = set(modules)
    return {name: imported_names(ast.parse(p.read_text())) & known - {name} for name, p in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle as a path ``[a, b, ..., a]``, or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for dep in sorted(graph[node]):
            if state.get(dep) == 1:
                return path[path.index(dep) :] + [dep]
            if dep not in state and (cycle := visit(dep)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


# The floors, lowest first: a module imports nothing from a floor above its own. Below them all,
# the game's pieces (types, text, prompts, rewards: pure) and the infrastructure; then the
# components any job may use (a verifier, a summarizer, the code sandbox, a strategy: they use the
# game, the infrastructure and each other). Then the job folders: the problems know nothing of the
# model, the policies nothing of sampling, sampling nothing of the games (their contract with
# the trainer, and the games shipped), the games nothing of the training step, and training
# nothing of deployment (which uses all three); the experiments read runs, the callbacks watch
# them, and the CLI puts it all together; a testbed (a domain's folder, like a plugin) may use all of it.
COMPONENTS = ("verifiers", "summarizers", "code", "strategies")
FLOORS: list[tuple[str, ...]] = [
    ("game",), ("infra",), COMPONENTS, ("data",), ("adapters",), ("rollout",), ("games",), ("training",), ("deploy",),
    ("experiments",), ("callbacks",), ("cli",), ("testbeds",),
]  # fmt: skip
FLOOR = {folder: level for level, folders in enumerate(FLOORS) for folder in folders}


def floor_of(module: str) -> int | None:
    """The floor of ``package.folder.module``; ``None`` for a module at the package's root."""
    parts = module.split(".")
    return FLOOR.get(parts[1]) if len(parts) > 2 else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``module -> dep`` for each import of a module on a higher floor."""
    found = []
    for module, deps in sorted(graph.items()):
        own = floor_of(module)
        for dep in sorted(deps):
            theirs = floor_of(dep)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} -> {dep}")
    return found


def test_the_reader_finds_imports_at_module_level_under_type_checking_in_functions_and_by_name():
    tree = ast.parse(
        "import importlib\nfrom typing import TYPE_CHECKING\nfrom pkg import top\n"
        "if TYPE_CHECKING:\n    from pkg.typed import T\n"
        "def f():\n    from pkg.lazy import x\n"
        "class C:\n    def m(self):\n        import pkg.method\n"
        "def g():\n    return importlib.import_module('pkg.named')\n"
    )
    known = {"pkg.top", "pkg.typed", "pkg.lazy", "pkg.method", "pkg.named", "pkg.unused"}
    assert imported_names(tree) & known == known - {"pkg.unused"}


def test_the_reader_finds_a_circle_and_an_upward_import_closed_inside_a_function(tmp_path):
    # low/a.py reaches up to high/b.py only inside a function; b imports a at module level.
    for folder in ("pkg/low", "pkg/high"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "pkg/__init__.py").write_text("")
    (tmp_path / "pkg/low/a.py").write_text(
        "def name():\n    from pkg.high.b import NAME\n\n    return NAME\n"
    )
    (tmp_path / "pkg/high/b.py").write_text("from pkg.low.a import name\n\nNAME = 'b'\n")
    graph = import_graph(modules_in(tmp_path / "pkg", "pkg"))
    assert graph["pkg.low.a"] == {"pkg.high.b"} and graph["pkg.high.b"] == {"pkg.low.a"}
    assert find_cycle(graph) == ["pkg.high.b", "pkg.low.a", "pkg.high.b"]
    assert find_cycle({"pkg.a": {"pkg.b"}, "pkg.b": set()}) is None
    FLOOR.update(low=-2, high=-1)  # two floors of the synthetic package, below every real one
    try:
        assert upward_imports(graph) == ["pkg.low.a -> pkg.high.b"]
    finally:
        del FLOOR["low"], FLOOR["high"]


def test_the_layer_rule_finds_an_upward_import():
    graph = {
        "agon_lightning.rollout.hf": {"agon_lightning.training.module"},
        "agon_lightning.game.formats": {"agon_lightning.code.judge"},
        "agon_lightning.code.judge": {"agon_lightning.game.text"},
        "agon_lightning.training.module": set(),
    }
    assert upward_imports(graph) == [
        "agon_lightning.game.formats -> agon_lightning.code.judge",
        "agon_lightning.rollout.hf -> agon_lightning.training.module",
    ]


def test_no_module_of_the_package_imports_itself_back():
    graph = import_graph()
    assert {
        "agon_lightning.training.module",
        "agon_lightning.training.validation",
        "agon_lightning.rollout.pipeline",
    } <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_no_floor_imports_one_above_it():
    graph = import_graph()
    folders = {m.split(".")[1] for m in graph if m.count(".") >= 2}
    assert folders == set(FLOOR), f"every folder of the package stands on a floor: {folders ^ set(FLOOR)}"
    assert upward_imports(graph) == []


def test_the_package_root_holds_no_loose_module():
    # Every module sits in a folder: the game's pieces, the infrastructure, a job, a component kind
    # or a testbed. At the root only the package's own face (its public names) and the old paths' alias.
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "moved.py"]


def test_the_package_imports_nothing_of_the_checkout():
    # benchmarks/, experiments/, scripts/ and tests/ are not installed: the package stands without them.
    found = [
        f"{module} -> {name}"
        for module, path in sorted(modules_in(ROOT, "agon_lightning").items())
        for name in sorted(imported_names(ast.parse(path.read_text())))
        if name.split(".")[0] in ("benchmarks", "experiments", "scripts", "tests")
    ]
    assert found == []


def test_the_cli_is_the_top_floor_and_shared_code_sits_below_its_users():
    graph = import_graph()
    # the dispatcher loads the game commands inside a function (the scan sees it), and they read
    # the table of commands, not the dispatcher
    assert "agon_lightning.cli.game" in graph["agon_lightning.cli"]
    assert "agon_lightning.cli" not in graph["agon_lightning.cli.game"]
    # a testbed's preconditions run the CLI: a testbed stands above it
    assert "agon_lightning.cli" in graph["agon_lightning.testbeds.countdown.preconditions"]
    # the log-prob code sits below the adapters and training, which both use it
    assert graph["agon_lightning.infra.logprobs"] == set()
    assert "agon_lightning.infra.logprobs" in graph["agon_lightning.adapters.policy"]


def leaves(graph: dict[str, set[str]]) -> set[str]:
    """Modules that import no other module of the package (types, names, text...)."""
    return {module for module, deps in graph.items() if not deps}


def reaching_out_of_data(graph: dict[str, set[str]]) -> list[str]:
    """``module -> dep`` for each import of a ``data/`` module that is neither ``data/`` nor a leaf."""
    floor = leaves(graph)
    return [
        f"{module} -> {dep}"
        for module, deps in sorted(graph.items())
        if module.startswith("agon_lightning.data")
        for dep in sorted(deps)
        if not dep.startswith("agon_lightning.data") and dep not in floor
    ]


def test_the_data_rule_finds_an_import_above_data():
    graph = {
        "agon_lightning.data.gym": {"agon_lightning.training.validation", "agon_lightning.game.types"},
        "agon_lightning.training.validation": {"agon_lightning.game.types"},
        "agon_lightning.game.types": set(),
    }
    assert reaching_out_of_data(graph) == ["agon_lightning.data.gym -> agon_lightning.training.validation"]


def test_data_imports_nothing_but_data_and_leaves():
    # The data modules sit below everything that trains on them: besides each other, they use only
    # modules that import nothing of the package.
    graph = import_graph()
    assert "agon_lightning.data.reasoning_gym" in graph and "agon_lightning.game.types" in leaves(graph)
    assert reaching_out_of_data(graph) == []
