"""The strategy classes' own checks, in one process: what they refuse, and the gather helpers on an unsharded model."""

from __future__ import annotations

import pytest
import torch
from lightning.pytorch.strategies import DDPStrategy, FSDPStrategy
from torch import nn

from agon_lightning.infra.errors import UsageError
from agon_lightning.strategies import (
    DecoderLayerFSDPStrategy,
    FSDP2Strategy,
    check_strategy,
    check_strategy_option,
    full_tensors,
    gathered,
)
from agon_lightning.strategies.fsdp2 import decoder_layers


def test_fsdp1_and_lightnings_own_zero3_are_refused_with_the_reason_and_our_class():
    with pytest.raises(UsageError, match="fsdp2.yaml"):
        check_strategy(FSDPStrategy())
    with pytest.raises(UsageError, match="fsdp2.yaml"):
        DecoderLayerFSDPStrategy(layer_names=["Qwen3DecoderLayer"])
    for removed in (
        "agon_lightning.strategies.DecoderLayerFSDPStrategy",
        "fsdp",
        {"class_path": "lightning.pytorch.strategies.FSDPStrategy"},
    ):
        with pytest.raises(UsageError, match="fsdp2.yaml"):
            check_strategy_option(removed)
    check_strategy(DDPStrategy())
    check_strategy(FSDP2Strategy())
    check_strategy_option("ddp")
    check_strategy_option({"class_path": "agon_lightning.strategies.FSDP2Strategy"})


def test_zero_stages_and_the_persistence_threshold_are_checked():
    pytest.importorskip("deepspeed")
    from lightning.pytorch.strategies import DeepSpeedStrategy

    from agon_lightning.strategies import DeepSpeedZeroStrategy

    with pytest.raises(UsageError, match="zero.Init"):
        check_strategy(DeepSpeedStrategy(stage=3))
    check_strategy(DeepSpeedStrategy(stage=2))
    ours = DeepSpeedZeroStrategy(stage=3, param_persistence_threshold=0)
    check_strategy(ours)
    zero = ours.config["zero_optimization"]
    assert zero["stage3_param_persistence_threshold"] == 0 and zero["stage3_prefetch_bucket_size"] == 0
    with pytest.raises(ValueError, match="stage must be 2 or 3"):
        DeepSpeedZeroStrategy(stage=1)
    with pytest.raises(ValueError, match="needs stage 3"):
        DeepSpeedZeroStrategy(stage=2, param_persistence_threshold=0)


def test_the_layers_to_shard_are_found_by_class_name_and_a_miss_lists_the_ones_present():
    class Qwen3DecoderLayer(nn.Linear):
        pass

    class Block(nn.Linear):
        pass

    model = nn.Sequential(nn.ModuleList([Qwen3DecoderLayer(2, 2), Qwen3DecoderLayer(2, 2)]), Block(2, 2))
    assert len(decoder_layers(model, None)) == 2  # every *DecoderLayer
    assert len(decoder_layers(model, ["Block"])) == 1
    with pytest.raises(ValueError, match=r"no module of class \['LlamaDecoderLayer'\].*Qwen3DecoderLayer"):
        decoder_layers(model, ["LlamaDecoderLayer"])


def test_on_an_unsharded_model_gathering_changes_nothing_and_copies_are_detached():
    model = nn.Linear(3, 2)
    model.lora_A = nn.Linear(3, 1)  # a name the default filter keeps
    with gathered(model):
        assert model.weight.shape == (2, 3)
    copies = full_tensors(model)
    assert set(copies) == {"lora_A.weight", "lora_A.bias"}
    copies["lora_A.weight"].add_(1.0)
    assert not torch.equal(copies["lora_A.weight"], model.lora_A.weight)
