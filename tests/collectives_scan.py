"""A static check of the distributed rule: rank-conditional code never calls a collective.

A collective (a broadcast, a barrier, a reduce, an all-gather, a sharded save) returns only
when every rank has called it; called on some ranks only, it waits forever. Code runs on some
ranks only when it is

* the body (or the ``else``) of an ``if`` whose test reads the rank (``trainer.is_global_zero``,
  ``global_rank == 0``, ``local_rank``, ``dist.get_rank()``), or either side of such a ternary;
* what follows, in the same block, an ``if`` on the rank that returns (``if not
  trainer.is_global_zero: return``), also when the rank is one of several conditions;
* a function decorated with ``rank_zero_only``.

A collective is a call or attribute from :data:`COLLECTIVES` (``trainer.log_dir`` is a
broadcast), or a call of a function of the scanned code that contains one, found to a fixed
point. :func:`scan` reports each, with file, line and the chain that leads to the collective.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import torch

# Called as a method or function under any name: collectives wherever they appear.
COLLECTIVES = {
    "barrier", "broadcast", "broadcast_object_list", "reduce_boolean_decision", "all_gather",
    "all_gather_object", "all_gather_into_tensor", "all_reduce", "reduce_scatter", "reduce_scatter_tensor",
    "all_to_all", "save_checkpoint", "full_tensor", "summon_full_params", "GatheredParameters", "unshard",
    "get_model_state_dict", "get_optimizer_state_dict", "lightning_module_state_dict",
}  # fmt: skip
# Collectives only on a distributed receiver (``strategy.reduce``, ``dist.gather``; not ``tensor.gather``).
DISTRIBUTED_ONLY = {"reduce", "gather", "scatter"}
DISTRIBUTED_RECEIVERS = ("strategy", "dist", "distributed")
# Attributes that are collectives when read (a property), on a trainer.
COLLECTIVE_ATTRIBUTES = {"log_dir"}
RANK_NAMES = {"is_global_zero", "global_rank", "local_rank", "node_rank", "is_local_zero", "get_rank"}
# Method names too common to match a scanned function of the same name through ``obj.name(...)``.
COMMON_METHODS = set(dir(Path)) | set(dir(str)) | set(dir(dict)) | set(dir(list)) | set(dir(torch.Tensor))


@dataclass(frozen=True)
class Violation:
    path: str
    line: int
    what: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.what}"


def dotted(node: ast.AST) -> str:
    """``a.b.c`` of a Name/Attribute chain (calls and subscripts in it as ``()`` / ``[]``)."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    if isinstance(node, ast.Subscript):
        return f"{dotted(node.value)}[]"
    return "?"


def reads_rank(test: ast.AST) -> bool:
    """Whether an expression depends on the process's rank."""
    for node in ast.walk(test):
        if isinstance(node, ast.Attribute) and node.attr in RANK_NAMES:
            return True
        if isinstance(node, ast.Name) and node.id in RANK_NAMES:
            return True
    return False


def exits(body: list[ast.stmt]) -> bool:
    """Whether a block always leaves its enclosing block (return, raise, continue, break)."""
    return bool(body) and isinstance(body[-1], (ast.Return, ast.Raise, ast.Continue, ast.Break))


def direct_collective(node: ast.AST) -> str | None:
    """The collective ``node`` is itself (a call or attribute read), else ``None``."""
    if isinstance(node, ast.Call):
        func = node.func
        name = (
            func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else None
        )
        if name in COLLECTIVES:
            return dotted(func)
        if name in DISTRIBUTED_ONLY and isinstance(func, ast.Attribute):
            receiver = dotted(func.value)
            if any(part in DISTRIBUTED_RECEIVERS for part in receiver.replace("()", "").split(".")):
                return dotted(func)
    if (
        isinstance(node, ast.Attribute)
        and node.attr in COLLECTIVE_ATTRIBUTES
        and "trainer" in dotted(node.value)
    ):
        return dotted(node)
    return None


def called_name(node: ast.Call) -> str | None:
    """The scanned-function name a call may reach: ``f(...)``, ``self.f(...)``, or a distinctive ``x.f(...)``."""
    func = node.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        if isinstance(func.value, ast.Name) and func.value.id in ("self", "cls"):
            return func.attr
        if func.attr not in COMMON_METHODS:
            return func.attr
    return None


def collective_functions(trees: dict[str, ast.Module]) -> dict[str, str]:
    """Name → the collective it leads to, for every function of ``trees`` that reaches one."""
    bodies: dict[str, list[ast.AST]] = {}
    for tree in trees.values():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                bodies.setdefault(node.name, []).append(node)
    found: dict[str, str] = {}
    changed = True
    while changed:
        changed = False
        for name, defs in bodies.items():
            if name in found:
                continue
            for fn in defs:
                for node in ast.walk(fn):
                    what = direct_collective(node)
                    if what is None and isinstance(node, ast.Call):
                        callee = called_name(node)
                        if callee in found and callee != name:
                            what = f"{callee}() -> {found[callee]}"
                    if what is not None:
                        found[name] = what
                        changed = True
                        break
                if name in found:
                    break
    return found


class _Scanner:
    def __init__(self, path: str, functions: dict[str, str]) -> None:
        self.path = path
        self.functions = functions
        self.violations: list[Violation] = []

    def collective(self, node: ast.AST) -> str | None:
        what = direct_collective(node)
        if what is None and isinstance(node, ast.Call):
            callee = called_name(node)
            if callee in self.functions:
                what = f"{callee}() -> {self.functions[callee]}"
        return what

    def flag(self, nodes: list[ast.AST], why: str) -> None:
        for stmt in nodes:
            for node in ast.walk(stmt):
                what = self.collective(node)
                if what is not None:
                    self.violations.append(Violation(self.path, node.lineno, f"{what} runs {why}"))

    def block(self, stmts: list[ast.stmt]) -> bool:
        """Scan a block; whether a rank-dependent ``return``/``raise`` may leave it early."""
        for i, stmt in enumerate(stmts):
            if isinstance(stmt, ast.If) and reads_rank(stmt.test):
                test = ast.unparse(stmt.test)
                self.flag(stmt.body + stmt.orelse, f"under `if {test}`")
                if exits(stmt.body) or exits(stmt.orelse):
                    self.flag(
                        stmts[i + 1 :],
                        f"after `if {test}: {type((stmt.body or stmt.orelse)[-1]).__name__.lower()}`",
                    )
                    last = (stmt.body if exits(stmt.body) else stmt.orelse)[-1]
                    return isinstance(last, (ast.Return, ast.Raise))
                continue
            if self.statement(stmt):
                self.flag(stmts[i + 1 :], "after a return taken on some ranks only")
                return True
        return False

    def statement(self, stmt: ast.stmt) -> bool:
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any("rank_zero_only" in dotted(d) for d in stmt.decorator_list):
                self.flag(stmt.body, "in a rank_zero_only function")
            else:
                self.block(stmt.body)
            return False
        if isinstance(stmt, ast.ClassDef):
            self.block(stmt.body)
            return False
        for node in ast.walk(stmt):
            if isinstance(node, ast.IfExp) and reads_rank(node.test):
                self.flag([node.body, node.orelse], f"in `... if {ast.unparse(node.test)} else ...`")
            elif isinstance(node, ast.BoolOp) and reads_rank(node.values[0]):
                self.flag(node.values[1:], f"after `{ast.unparse(node.values[0])} and/or`")
        left = False
        for field in ("body", "orelse", "finalbody"):
            children = getattr(stmt, field, None)
            if isinstance(children, list) and children and isinstance(children[0], ast.stmt):
                left = self.block(children) or left
        for handler in getattr(stmt, "handlers", None) or []:
            left = self.block(handler.body) or left
        return left


def scan(paths: list[Path], root: Path) -> list[Violation]:
    """Every collective that ``paths`` (Python files) call on some ranks only."""
    trees = {str(p.relative_to(root)): ast.parse(p.read_text(), str(p)) for p in paths}
    functions = collective_functions(trees)
    violations = []
    for name, tree in trees.items():
        scanner = _Scanner(name, functions)
        scanner.block(tree.body)
        violations += scanner.violations
    return sorted(set(violations), key=lambda v: (v.path, v.line, v.what))
