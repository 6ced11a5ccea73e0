"""The PEFT internals the adapters rely on exist on the installed PEFT, and a change is an error naming them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from torch import nn

import agon_lightning
from agon_lightning.adapters import peft_boundary as peft
from agon_lightning.adapters.peft_boundary import LAYER_NEEDS, MODEL_NEEDS, PeftChanged, check_peft

ROOT = Path(agon_lightning.__file__).parent
# (``scaling`` is left out: attention layers have one too; it is read with lora_A/lora_B, named here)
INTERNALS = {"_disable_adapters", "_active_adapter", "_adapters_disabled", "lora_A", "lora_B", "lora_dropout",
             "lora_variant", "get_base_model", "get_base_layer", "set_adapter", "disable_adapter"}  # fmt: skip


def tiny_peft() -> nn.Module:
    torch.manual_seed(0)
    base = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model = get_peft_model(base, LoraConfig(r=2, target_modules=["0", "2"]), adapter_name="alpha")
    model.add_adapter("beta", LoraConfig(r=2, target_modules=["0", "2"]))
    return model


def test_the_installed_peft_has_every_internal_the_boundary_relies_on():
    model = tiny_peft()
    check_peft(model)
    layer = peft.lora_layers(model)[0]
    for name in LAYER_NEEDS:
        assert hasattr(layer, name), name
    for name in MODEL_NEEDS:
        assert hasattr(model, name), name


@pytest.mark.parametrize("name", sorted(LAYER_NEEDS))
def test_a_layer_internal_gone_from_peft_is_an_error_naming_it(name, monkeypatch):
    model = tiny_peft()
    layer = peft.lora_layers(model)[0]
    for cls in type(layer).__mro__:  # a property, a method or a class default
        if name in vars(cls):
            monkeypatch.delattr(cls, name)
    if hasattr(layer, name):  # the instance's own (its __dict__ or a submodule)
        monkeypatch.delattr(layer, name)
    with pytest.raises(PeftChanged, match=f"has no attribute '{name}'"):
        check_peft(model)


def without(monkeypatch, model: nn.Module, name: str) -> None:
    """``name`` gone from the PeftModel and from the tuner model it forwards unknown names to."""
    for cls in {*type(model).__mro__, *type(model.base_model).__mro__}:
        if name in vars(cls):
            monkeypatch.delattr(cls, name)
    for obj in (model, model.base_model):
        if name in vars(obj):
            monkeypatch.delattr(obj, name)


@pytest.mark.parametrize("name", sorted(MODEL_NEEDS))
def test_a_model_method_gone_from_peft_is_an_error_naming_it(name, monkeypatch):
    model = tiny_peft()
    without(monkeypatch, model, name)
    with pytest.raises(PeftChanged, match=f"has no attribute '{name}'"):
        check_peft(model)


def test_an_internal_of_another_kind_is_an_error_naming_it_and_the_kind():
    model = tiny_peft()
    layer = peft.lora_layers(model)[0]
    layer.scaling = [2.0]  # a changed PEFT that keeps the name but not the shape
    with pytest.raises(PeftChanged, match="scaling is a list, expected dict"):
        check_peft(model)


def test_switching_through_the_boundary_keeps_both_adapters_trainable_and_restores_exactly():
    model = tiny_peft()
    trainable = [p for n, p in model.named_parameters() if "lora_" in n]
    peft.activate(model, "beta", trainable)
    assert peft.active_adapter(model) == "beta"
    assert all(p.requires_grad for p in trainable)  # PEFT's set_adapter alone froze alpha
    layers = peft.lora_layers(model)
    before = [peft.switch_state(layer) for layer in layers]
    with peft.layers_off(model, layers):
        assert peft.active_adapter(model) is None  # adapters off: None, as in every signature of ours
    assert [peft.switch_state(layer) for layer in layers] == before


def test_attach_adapters_checks_the_installed_peft(tiny_model_dir, monkeypatch):
    """Every model built with adapters passes through the check (here a PEFT lacking one more internal)."""
    from agon_lightning.adapters.policy import LoraOptions, attach_adapters, load_base

    base, _ = load_base(str(tiny_model_dir))
    monkeypatch.setitem(LAYER_NEEDS, "_renamed_switch", bool)
    with pytest.raises(PeftChanged, match="has no attribute '_renamed_switch'"):
        attach_adapters(base, ("alpha", "beta"), LoraOptions(r=2))


def test_no_module_outside_the_boundary_touches_peft_internals():
    """Read as code (attribute names), not text: docstrings and comments may name them."""
    offenders = []
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "callbacks").glob("*.py")]:
        if path.name == "peft_boundary.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in INTERNALS:
                offenders.append(f"{path.name}:{node.lineno} .{node.attr}")
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("peft.tuners"):
                offenders.append(f"{path.name}:{node.lineno} from {node.module}")
            if isinstance(node, ast.Assign) and any(
                isinstance(t, ast.Attribute) and t.attr == "forward" for t in node.targets
            ):
                offenders.append(f"{path.name}:{node.lineno} .forward = ...")
    assert not offenders, offenders


def test_active_adapter_and_current_adapter_agree_in_every_state():
    from agon_lightning.rollout.decode_loop import current_adapter

    model = tiny_peft()
    trainable = [p for n, p in model.named_parameters() if "lora_" in n]
    seen = []
    for name in ("alpha", "beta"):
        peft.activate(model, name, trainable)
        seen.append((peft.active_adapter(model), current_adapter(model)))
    with peft.layers_off(model, peft.lora_layers(model)):
        seen.append((peft.active_adapter(model), current_adapter(model)))
    assert seen == [("alpha", "alpha"), ("beta", "beta"), (None, None)]
    assert current_adapter(nn.Linear(2, 2)) is None  # a plain model: no adapter applies
    with pytest.raises(ValueError, match="Linear has no LoRA layers"):
        peft.active_adapter(nn.Linear(2, 2))


def test_peft_name_for_the_base_is_translated_at_the_boundary():
    assert peft.peft_names(["alpha", None, "beta"]) == ["alpha", peft.BASE_ADAPTER, "beta"]
    assert [peft.our_name(n) for n in peft.peft_names(["alpha", None])] == ["alpha", None]


def test_peft_name_for_the_base_is_spelled_only_in_the_boundary():
    spelled = [
        str(path.relative_to(ROOT))
        for path in ROOT.rglob("*.py")
        if path.name not in ("peft_boundary.py", "names.py")  # names.py states the rule
        and ("__base__" in path.read_text() or "BASE_ADAPTER" in path.read_text())
    ]
    assert spelled == ["adapters/policy.py"], spelled  # policy.py re-exports it for old imports only
