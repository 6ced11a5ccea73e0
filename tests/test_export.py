"""Bundles load with plain PEFT; ``agon export`` merges one adapter or lays both out for a LoRA server."""

import json

import pytest
import torch
from peft import PeftModel
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.cli import main
from agon_lightning.deploy.bundle import save_bundle
from agon_lightning.deploy.export import vllm_rank
from agon_lightning.training.module import AgonModule

IDS = torch.tensor([[5, 17, 42, 9, 33, 60, 2, 71]])


@pytest.fixture(scope="module")
def trained(tiny_model_dir, tmp_path_factory):
    """A module whose two adapters hold distinct random weights, and its bundle."""
    module = AgonModule(
        model_name_or_path=str(tiny_model_dir), lora=LoraOptions(r=4, target_modules=["q_proj", "v_proj"])
    )
    module.configure_model()
    generator = torch.Generator().manual_seed(0)
    for name, param in module.policy.named_parameters():
        if "lora_" in name:
            param.data.copy_(torch.randn(param.shape, generator=generator) * 0.3)
    return module, save_bundle(module, tmp_path_factory.mktemp("bundle") / "b", drafter="beta")


def logits(model, adapter=None):
    model.eval()
    with torch.no_grad():
        if adapter is not None:
            model.set_adapter(adapter)
        return model(input_ids=IDS).logits


@pytest.mark.parametrize("adapter", ["alpha", "beta"])
def test_each_adapter_round_trips_through_plain_peft(trained, tiny_model_dir, adapter):
    module, bundle = trained
    loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), bundle / adapter)
    expected = logits(module.policy, adapter)
    assert torch.equal(logits(loaded), expected)
    assert not torch.allclose(
        logits(AutoModelForCausalLM.from_pretrained(tiny_model_dir)), expected, atol=1e-3
    )


def test_merged_export_loads_alone_and_matches_base_plus_adapter(trained, tiny_model_dir, tmp_path, capsys):
    module, bundle = trained
    main(["export", "--bundle", str(bundle), "--merged-out", str(tmp_path / "merged")])  # the drafter: beta
    assert "merged 'beta'" in capsys.readouterr().out
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "merged")
    assert not any("lora" in n for n, _ in merged.named_parameters())
    torch.testing.assert_close(logits(merged), logits(module.policy, "beta"), atol=1e-5, rtol=1e-5)
    from transformers import AutoTokenizer

    assert AutoTokenizer.from_pretrained(tmp_path / "merged").chat_template == module.tokenizer.chat_template


def test_lora_export_is_a_multi_lora_server_layout(trained, tiny_model_dir, tmp_path, capsys):
    module, bundle = trained
    out = tmp_path / "served"
    main(["export", "--bundle", str(bundle), "--lora-out", str(out)])
    printed = capsys.readouterr().out
    command = f"vllm serve {tiny_model_dir} --enable-lora --max-lora-rank 8 --max-loras 2 --lora-modules"
    assert f"{command} alpha={out}/alpha beta={out}/beta" in printed
    for name in ("alpha", "beta"):
        config = json.loads((out / name / "adapter_config.json").read_text())
        assert config["peft_type"] == "LORA" and config["r"] == 4
        with safe_open(out / name / "adapter_model.safetensors", "pt") as f:
            keys = list(f.keys())
        # PEFT's standard names, with no adapter name inside them: what vLLM's loader expects.
        assert keys and all(
            k.startswith("base_model.model.") and ".lora_" in k and name not in k for k in keys
        )
        loaded = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), out / name)
        assert torch.equal(logits(loaded), logits(module.policy, name))
    assert json.loads((out / "agon.json").read_text())["drafter"] == "beta"


def test_vllm_rank_rounds_up_to_an_accepted_value():
    assert [vllm_rank(r) for r in (1, 2, 8, 16, 17, 300, 512)] == [1, 8, 8, 16, 32, 320, 512]
    with pytest.raises(ValueError, match="rank 600 exceeds"):
        vllm_rank(600)


def test_export_errors_name_what_is_wrong(trained, tmp_path):
    _, bundle = trained
    with pytest.raises(SystemExit):
        main(["export", "--bundle", str(bundle)])
    with pytest.raises(ValueError, match=r"holds adapters \['alpha', 'beta'\], not 'gamma'"):
        main(["export", "--bundle", str(bundle), "--adapter", "gamma", "--merged-out", str(tmp_path / "m")])
    assert not (tmp_path / "m").exists()
