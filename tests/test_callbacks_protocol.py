"""The callbacks read only what ``callbacks.protocol`` names, and AgonModule has all of it."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

import callbacks
from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.training.module import AgonModule
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier
from callbacks.protocol import AgonModuleView, EvaluatorView

CALLBACKS = Path(callbacks.__file__).parent
MODULE_NAMES = {"pl_module", "module"}  # what the callbacks call the LightningModule they watch


def protocol_members(proto: type) -> set[str]:
    return {n for n in vars(proto) if not n.startswith("_")} | set(proto.__annotations__)


def read_attributes(tree: ast.AST) -> tuple[set[str], set[str]]:
    """``(module attributes, evaluator attributes)`` read in ``tree``: ``pl_module.x``, ``….evaluator.y``, ``getattr(…, "x")``."""
    on_module, on_evaluator = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            value = node.value
            if isinstance(value, ast.Name) and value.id in MODULE_NAMES:
                on_module.add(node.attr)
            elif isinstance(value, ast.Attribute) and value.attr == "evaluator":
                on_evaluator.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr":
            target, name = node.args[0], node.args[1]
            if isinstance(name, ast.Constant) and isinstance(target, ast.Name) and target.id in MODULE_NAMES:
                on_module.add(name.value)
            elif (
                isinstance(name, ast.Constant)
                and isinstance(target, ast.Call)
                and ast.unparse(target).startswith(
                    ("getattr(pl_module, 'evaluator'", "getattr(module, 'evaluator'")
                )
            ):
                on_evaluator.add(name.value)
    return on_module, on_evaluator


def test_every_attribute_a_callback_reads_is_in_the_protocol():
    on_module, on_evaluator = set(), set()
    for path in CALLBACKS.glob("*.py"):
        if path.name != "protocol.py":
            m, e = read_attributes(ast.parse(path.read_text()))
            on_module |= m
            on_evaluator |= e
    assert {"last_record", "evaluator", "policy"} <= on_module  # the scan sees the reads it is for
    assert on_module - protocol_members(AgonModuleView) == set()
    assert on_evaluator - protocol_members(EvaluatorView) == set()


def test_the_scan_finds_a_read_the_protocol_lacks():
    m, e = read_attributes(
        ast.parse("pl_module.secret\ngetattr(getattr(pl_module, 'evaluator', None), 'hidden', [])")
    )
    assert m - protocol_members(AgonModuleView) == {"secret"}
    assert e - protocol_members(EvaluatorView) == {"hidden"}


def test_agon_module_satisfies_the_protocol(tiny_model_dir):
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir),
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        rollout=HFRollout(max_new_tokens=6),
        verifier=ReasoningGymVerifier(),
        optimizer=lambda params: torch.optim.SGD(params, lr=0.5),
        validate_at_start=False,
    )
    module.configure_model()
    assert isinstance(module, AgonModuleView)
    assert isinstance(module.evaluator, EvaluatorView)
    assert module.policy is not None and module.tokenizer is not None


def test_a_module_missing_a_public_attribute_does_not():
    class Partial:
        adapter_names = ("alpha",)

    assert not isinstance(Partial(), AgonModuleView)
