"""``agon plan``'s estimator: monotonic in the work, sharding divides what it should, errors name the value."""

from __future__ import annotations

import pytest
from transformers import Qwen3Config

from agon_lightning.cli import main
from agon_lightning.infra.plan import GIB, Run, Shape, parts, peak_bytes

SHAPE = Shape.of(
    Qwen3Config(
        vocab_size=1000,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        tie_word_embeddings=True,
    )  # fmt: skip
)


def test_base_and_lora_counts_match_the_model_built_from_the_config():
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import Qwen3ForCausalLM

    config = Qwen3Config(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True)  # fmt: skip
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    assert Shape.of(config).base_params() == sum(p.numel() for p in model.parameters())
    targets = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    peft = get_peft_model(model, LoraConfig(r=8, target_modules=list(targets)))
    lora = sum(p.numel() for n, p in peft.named_parameters() if "lora_" in n)
    assert Shape.of(config).lora_params(8, targets) == lora


@pytest.mark.parametrize("field", ["prompts", "generations", "new_tokens"])
def test_the_peak_grows_with_p_n_and_t(field):
    base = Run(prompts=2, generations=4, prompt_tokens=16, new_tokens=32)
    peaks = [peak_bytes(parts(SHAPE, Run(**{**base.__dict__, field: getattr(base, field) * k}), "single", 1))
             for k in (1, 2, 4)]  # fmt: skip
    assert peaks[0] < peaks[1] < peaks[2]


def test_checkpointing_keeps_fewer_activations():
    on, off = (
        Run(prompts=2, generations=4, prompt_tokens=16, new_tokens=32, checkpointing=c) for c in (True, False)
    )
    assert parts(SHAPE, on, "single", 1)["activations"] < parts(SHAPE, off, "single", 1)["activations"]


def test_each_strategy_divides_what_it_shards():
    run = Run(prompts=2, generations=4, prompt_tokens=16, new_tokens=32)
    ddp, zero2, zero3, fsdp2 = (parts(SHAPE, run, s, 4) for s in ("ddp", "zero2", "zero3", "fsdp2"))
    for key in ("gradients", "optimizer"):
        assert zero2[key] == zero3[key] == fsdp2[key] == pytest.approx(ddp[key] / 4)
    assert zero2["base"] == ddp["base"] and zero3["base"] == fsdp2["base"] == pytest.approx(ddp["base"] / 4)
    assert zero2["adapters"] == ddp["adapters"] and zero3["adapters"] == pytest.approx(ddp["adapters"] / 4)
    assert ddp["gathered_for_sampling"] == 0 and zero3["gathered_for_sampling"] == pytest.approx(
        ddp["base"] * 3 / 4
    )
    assert ddp["activations"] == zero3["activations"]  # activations are per device in every strategy


def test_a_vllm_share_is_reserved_and_replaces_the_trainers_kv_cache():
    run = Run(prompts=2, generations=4, prompt_tokens=16, new_tokens=32, vllm_share=0.3)
    p = parts(SHAPE, run, "single", 1)
    assert p["kv_cache"] == 0 and peak_bytes(p, 80 * GIB, 0.3) == pytest.approx(peak_bytes(p) + 24 * GIB)


def test_bad_values_are_named():
    with pytest.raises(ValueError, match="new_tokens must be >= 1, got 0"):
        Run(prompts=1, generations=2, prompt_tokens=4, new_tokens=0)
    with pytest.raises(ValueError, match=r"dtype must be one of .*'fp8'"):
        Run(prompts=1, generations=2, prompt_tokens=4, new_tokens=4, dtype="fp8")
    with pytest.raises(ValueError, match=r"gpu_memory_utilization\) must be in \[0, 1\), got 1.5"):
        Run(prompts=1, generations=2, prompt_tokens=4, new_tokens=4, vllm_share=1.5)
    run = Run(prompts=1, generations=2, prompt_tokens=4, new_tokens=4)
    with pytest.raises(ValueError, match="strategy must be one of .*'zero1'"):
        parts(SHAPE, run, "zero1", 2)
    with pytest.raises(ValueError, match="'single' runs on one device, got devices=2"):
        parts(SHAPE, run, "single", 2)
    with pytest.raises(ValueError, match=r"\['qkv'\]"):
        SHAPE.lora_params(8, ("qkv",))


def test_agon_plan_prints_every_strategy_for_several_gpus(capsys):
    main(["plan", "--config", "agon:deepmath_qwen3_0.6b.yaml", "--gpus", "8", "--gpu-memory-gib", "80"])
    out = capsys.readouterr().out
    assert "Qwen/Qwen3-0.6B on 8 × 80 GiB" in out
    assert all(f"| {s} |" in out for s in ("ddp", "zero2", "zero3", "fsdp2")) and "| single |" not in out
