"""The package's modules import each other without a circle, and no floor reaches up.

Module-level imports count, including those under ``if TYPE_CHECKING:`` (a circle there is
still two modules that each need the other to be read); imports inside functions are the
deliberate lazy ones (optional packages, plugins) and do not — except for the CLI and for
``data/``, where every import counts, lazy ones and ``importlib.import_module("...")`` too: the
``agon`` dispatcher and the commands it loads must not need each other at all, and the data
modules sit below everything that trains on them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import agon_lightning
import agon_lightning.callbacks

ROOT = Path(agon_lightning.__file__).parent
# The top-level callbacks/ folder installs as agon_lightning.callbacks (pyproject's package-dir).
CALLBACKS = Path(agon_lightning.callbacks.__file__).parent


def module_name(path: Path) -> str:
    if path.is_relative_to(CALLBACKS):
        parts = ("agon_lightning", "callbacks", *path.relative_to(CALLBACKS).with_suffix("").parts)
    else:
        parts = ("agon_lightning", *path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(tree: ast.Module, known: set[str]) -> set[str]:
    """Package modules imported at module level (``from pkg import mod`` counts ``pkg.mod``)."""
    found = set()
    for node in tree.body:
        for stmt in node.body if isinstance(node, ast.If) else [node]:
            if isinstance(stmt, ast.ImportFrom) and stmt.module and stmt.level == 0:
                found.add(stmt.module)
                found.update(f"{stmt.module}.{alias.name}" for alias in stmt.names)
            elif isinstance(stmt, ast.Import):
                found.update(alias.name for alias in stmt.names)
    return found & known


def all_imports(tree: ast.Module, known: set[str]) -> set[str]:
    """Package modules imported anywhere in ``tree``: at module level, in functions, and by
    ``importlib.import_module("...")`` with a literal name."""
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
    return found & known


def import_graph(lazy: bool = False) -> dict[str, set[str]]:
    """``{module: package modules it imports}``; ``lazy``: imports inside functions count too."""
    files = {module_name(p): p for p in [*ROOT.rglob("*.py"), *CALLBACKS.rglob("*.py")]}
    known = set(files)
    read = all_imports if lazy else top_level_imports
    return {name: read(ast.parse(p.read_text()), known) - {name} for name, p in files.items()}


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


def test_the_cycle_finder_finds_a_circle_through_a_type_checking_import():
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg.a import A\n")
    assert top_level_imports(tree, {"pkg.a", "pkg.b"}) == {"pkg.a"}
    assert find_cycle({"pkg.a": {"pkg.b"}, "pkg.b": {"pkg.a"}}) == ["pkg.a", "pkg.b", "pkg.a"]
    assert find_cycle({"pkg.a": {"pkg.b"}, "pkg.b": set()}) is None


def test_no_module_of_the_package_imports_itself_back():
    graph = import_graph()
    assert {
        "agon_lightning.training.module",
        "agon_lightning.training.validation",
        "agon_lightning.rollout.pipeline",
    } <= set(graph)
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


# The job folders, lowest first: a module imports nothing from a folder above its own. The
# problems know nothing of the model, the policies nothing of sampling, sampling nothing of the training step, and training
# nothing of deployment (which uses all three); the experiments read runs, the callbacks watch
# them, and the CLI puts it all together; a testbed (a domain's folder, like a plugin) may use all of it.
# Below them all, the game's pieces (types, text, prompts, rewards: pure) and the infrastructure.
LAYERS = [
    "game", "infra", "data", "adapters", "rollout", "training", "deploy", "experiments", "callbacks", "cli",
    "testbeds",
]  # fmt: skip
# Modules every layer may use though they sit in one: none (shared code sits low, e.g. infra.logprobs).
SHARED_LEAVES: set[str] = set()


def layer_of(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 and parts[1] in LAYERS else None


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    found = []
    for module, deps in sorted(graph.items()):
        own = layer_of(module)
        for dep in sorted(deps - SHARED_LEAVES):
            theirs = layer_of(dep)
            if own is not None and theirs is not None and theirs > own:
                found.append(f"{module} -> {dep}")
    return found


def test_the_layer_rule_finds_an_upward_import():
    graph = {
        "agon_lightning.rollout.hf": {"agon_lightning.training.module"},
        "agon_lightning.training.module": set(),
    }
    assert upward_imports(graph) == ["agon_lightning.rollout.hf -> agon_lightning.training.module"]


def test_no_job_folder_imports_one_above_it():
    graph = import_graph()
    assert {f"agon_lightning.{layer}" for layer in LAYERS} <= set(graph)
    assert upward_imports(graph) == []
    for leaf in SHARED_LEAVES:
        assert graph[leaf] == set(), f"{leaf} must stay free of package imports to be shared by every layer"


def test_the_package_root_holds_no_loose_module():
    # Every module sits in a folder: the game's pieces, the infrastructure, a job, a component kind
    # or a testbed. At the root only the package's own face (its public names) and the old paths' alias.
    assert sorted(p.name for p in ROOT.glob("*.py")) == ["__init__.py", "moved.py"]


COMPONENTS = ["verifiers", "summarizers", "code", "strategies"]


def test_the_component_packages_stand_on_the_game_and_the_infrastructure_only():
    # Any floor may use a verifier, a summarizer, the code sandbox or a strategy, so they use no job folder.
    graph = import_graph()
    reach = [
        f"{m} -> {d}" for m, deps in sorted(graph.items()) if m.count(".") and m.split(".")[1] in COMPONENTS
        for d in sorted(deps) if len(d.split(".")) > 1 and d.split(".")[1] not in {"game", "infra", *COMPONENTS}
    ]  # fmt: skip
    assert reach == []
    assert "agon_lightning.verifiers.code" in graph and "agon_lightning.summarizers.hiding" in graph


def test_nothing_below_the_cli_imports_it_even_lazily():
    # The CLI is the top floor: a command module may use everything, and no job folder uses a command.
    graph = import_graph(lazy=True)
    below = [m for m in graph if layer_of(m) is not None and layer_of(m) < LAYERS.index("cli")]
    assert (
        "agon_lightning.testbeds.countdown.preconditions" not in below
    )  # a testbed's analyses may run the CLI
    assert "agon_lightning.callbacks.defaults" in below and "agon_lightning.experiments.sweep" in below
    assert [
        f"{m} -> {d}" for m in sorted(below) for d in sorted(graph[m]) if layer_of(d) == LAYERS.index("cli")
    ] == []
    # the log-prob code sits below the adapters and training, which both use it
    assert graph["agon_lightning.infra.logprobs"] == set()
    assert "agon_lightning.infra.logprobs" in graph["agon_lightning.adapters.policy"]


# The modules of the ``agon`` command: the dispatcher (``agon_lightning.cli``), the table of
# commands it and the commands read, LightningCLI's game commands, their base, the shipped configs.
CLI = "agon_lightning.cli"


def test_the_lazy_scan_sees_imports_in_functions_and_import_module_calls():
    tree = ast.parse(
        "import importlib\ndef f():\n    from pkg.a import x\n"
        "def g():\n    return importlib.import_module('pkg.b')\n"
    )
    assert top_level_imports(tree, {"pkg.a", "pkg.b"}) == set()
    assert all_imports(tree, {"pkg.a", "pkg.b"}) == {"pkg.a", "pkg.b"}


def test_the_cli_modules_do_not_need_each_other_in_a_circle_even_lazily():
    graph = import_graph(lazy=True)
    cli = {m: {d for d in deps if d == CLI or d.startswith(CLI + ".")} for m, deps in graph.items()
           if m == CLI or m.startswith(CLI + ".")}  # fmt: skip
    assert {CLI, f"{CLI}.game", f"{CLI}.commands", f"{CLI}.base", f"{CLI}.config_files"} <= set(cli)
    assert f"{CLI}.game" in cli[CLI]  # the dispatcher loads the game commands (the scan sees it) ...
    assert CLI not in cli[f"{CLI}.game"]  # ... and they read the table, not the dispatcher
    assert find_cycle(cli) is None, " -> ".join(find_cycle(cli))


def leaves(graph: dict[str, set[str]]) -> set[str]:
    """Modules that import no other module of the package, lazily or not (types, names, text...)."""
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


def test_data_imports_nothing_above_it_even_lazily():
    graph = import_graph(lazy=True)
    assert "agon_lightning.data.reasoning_gym" in graph and "agon_lightning.game.types" in leaves(graph)
    assert reaching_out_of_data(graph) == []
