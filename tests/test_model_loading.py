"""Every causal LM the package loads runs the model's own torch forward: the Hub's kernels stay off unless asked for.

transformers 5.25 kernelizes a loaded model by default; training would then depend on whether the
Hub was reachable and stop matching the decode loop that samples for it (``load_causal_lm``).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest

import agon_lightning
from agon_lightning.adapters.policy import load_base, load_causal_lm

ROOT = Path(agon_lightning.__file__).parent


def kernelized(model) -> bool:
    return bool(getattr(model, "use_kernels", False)) or getattr(model, "kernels_mode", None) is not None


def test_the_policy_base_loads_without_hub_kernels_and_stays_so_across_mode_switches(tiny_model_dir):
    model, _ = load_base(str(tiny_model_dir))
    assert not kernelized(model)
    model.eval()
    model.train()  # transformers' train() re-kernelizes a kernelized model on every switch
    assert not kernelized(model)


def test_the_sft_module_loads_its_base_without_hub_kernels(tiny_model_dir):
    from agon_lightning.training.sft import SFTModule

    assert not kernelized(SFTModule(model_name_or_path=str(tiny_model_dir)).model)


@pytest.mark.skipif(
    importlib.util.find_spec("kernels") is None, reason="the kernels package is not installed"
)
def test_asking_for_hub_kernels_is_passed_through(tiny_model_dir):
    # On a CPU no kernel is mapped for these layers: the model's forward stays the fallback, offline.
    assert load_causal_lm(tiny_model_dir, use_kernels=True).use_kernels


def test_no_module_loads_a_causal_lm_past_load_causal_lm():
    callers = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for function in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "from_pretrained"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id.startswith("AutoModel")
                ):
                    callers.append(f"{path.relative_to(ROOT)}:{function.name}")
    assert callers == ["adapters/policy.py:load_causal_lm"], callers
