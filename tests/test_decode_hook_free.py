"""Sampling with the decode loop calls no module, for every family and activation it accepts.

Under DeepSpeed ZeRO-3 every submodule carries hooks that record each call in the step's
module trace, compared across ranks at the next forward; a module called per decode step made
ranks that sampled different lengths fail there. The loop now computes the activation and the
rotary table as plain functions (:mod:`agon_lightning.rollout.plain`). Checked here with
torch's global module hooks (they run inside every module's ``__call__``, as DeepSpeed's and
FSDP's do): zero calls while decoding, for Qwen3, Qwen2, Llama and Mistral and for each of
``transformers``' activations the loop accepts; the plain functions compute what the modules
compute, bit for bit; an activation with weights of its own is refused by name.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from conftest import build_char_tokenizer
from torch import nn

from agon_lightning.infra.errors import UsageError
from agon_lightning.rollout import decode_loop as decode
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.plain import RotaryTable, activation_unsupported, plain_activation

FAMILIES = ("qwen3", "qwen2", "llama", "mistral")
# transformers' activations with parameters of their own, or whose forward calls another module
REFUSED = {"prelu": "weights", "xielu": "weights", "gelu_10": "calls the module GELUActivation"}


def tiny(kind: str, hidden_act: str = "silu", rope_scaling: dict | None = None) -> nn.Module:
    import transformers as tf

    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    common = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, hidden_act=hidden_act,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    if rope_scaling is not None:
        common["rope_scaling"] = rope_scaling
    config, model = {
        "qwen3": (tf.Qwen3Config, tf.Qwen3ForCausalLM),
        "qwen2": (tf.Qwen2Config, tf.Qwen2ForCausalLM),
        "llama": (tf.LlamaConfig, tf.LlamaForCausalLM),
        "mistral": (tf.MistralConfig, tf.MistralForCausalLM),
    }[kind]
    extra = {"head_dim": 8} if kind == "qwen3" else {}
    if kind == "mistral":
        extra["sliding_window"] = None
    return model(config(**common, **extra)).eval()


@contextlib.contextmanager
def module_calls():
    """Every module call while inside, as (class name) — through torch's global forward hooks."""
    calls: list[str] = []
    handle = nn.modules.module.register_module_forward_pre_hook(lambda m, a: calls.append(type(m).__name__))
    try:
        yield calls
    finally:
        handle.remove()


def decode_calls(model: nn.Module, max_new_tokens: int = 6) -> tuple[list[str], torch.Tensor]:
    ids = torch.tensor([[5, 6, 7, 8], [0, 9, 10, 11]])
    attn = torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]])
    w = decode.weights(model, None)
    with module_calls() as calls:
        out, _ = decode.decode(w, ids, attn, max_new_tokens, [1], 0, decode.Sampling(greedy=True))
    return calls, out


def test_the_global_hook_sees_the_old_loop_call_the_activation_module():
    """The check can fail: with the activation module back in the weights, every step calls it."""
    model = tiny("qwen3")
    w = decode.weights(model, None)
    w.act = model.model.layers[0].mlp.act_fn
    ids, attn = torch.tensor([[5, 6, 7]]), torch.ones(1, 3, dtype=torch.long)
    with module_calls() as calls:
        decode.decode(w, ids, attn, 4, [1], 0, decode.Sampling(greedy=True))
    assert calls == ["SiLUActivation"] * (2 * 4)  # 2 layers × (prefill + 3 decode steps)


@pytest.mark.parametrize("kind", FAMILIES)
def test_decoding_calls_no_module_in_any_family(kind):
    model = tiny(kind)
    assert decode.unsupported(model, {}) is None
    calls, out = decode_calls(model)
    assert calls == []
    ref = model.generate(
        input_ids=torch.tensor([[5, 6, 7, 8], [0, 9, 10, 11]]),
        attention_mask=torch.tensor([[1, 1, 1, 1], [0, 1, 1, 1]]),
        max_new_tokens=6, do_sample=False, eos_token_id=[1], pad_token_id=0,
    )[:, 4:]  # fmt: skip
    assert torch.equal(out, ref), "the plain functions changed what the loop decodes"


def activation_names() -> list[str]:
    from transformers.activations import ACT2CLS

    return sorted(ACT2CLS)


@pytest.mark.parametrize("name", activation_names())
def test_each_activation_is_a_plain_function_equal_to_its_module_or_refused_by_name(name):
    from transformers.activations import ACT2FN

    module = ACT2FN[name]
    x = torch.linspace(-6, 6, 97)
    if name in REFUSED:
        reason = activation_unsupported(module, name)
        assert reason is not None and repr(name) in reason and REFUSED[name] in reason
        with pytest.raises(ValueError, match=name):
            plain_activation(module, name)
        return
    fn = plain_activation(module, name)
    with module_calls() as calls:
        got = fn(x)
    assert calls == [], f"{name} still calls a module"
    assert torch.equal(got, module(x)), name


@pytest.mark.parametrize("name", ["gelu", "gelu_pytorch_tanh", "relu2", "quick_gelu"])
def test_other_activations_decode_without_a_module_call(name):
    model = tiny("llama", hidden_act=name)
    assert decode.unsupported(model, {}) is None
    calls, _ = decode_calls(model)
    assert calls == []


def test_an_activation_with_weights_is_not_sampled_by_the_loop():
    model = tiny("llama", hidden_act="prelu")
    reason = decode.unsupported(model, {})
    assert reason is not None and "'prelu'" in reason and "PReLU" in reason and "weight" in reason


@pytest.mark.parametrize(
    "kind, rope",
    [
        ("qwen3", None),
        ("llama", {"rope_type": "linear", "factor": 2.0}),
        ("llama", {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 64}),
        ("qwen2", {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}),
    ],
)  # fmt: skip
def test_the_rotary_table_equals_the_module_bit_for_bit(kind, rope):
    model = tiny(kind, rope_scaling=rope)
    rotary = model.model.rotary_emb
    positions = torch.arange(300)[None]
    x = torch.zeros(1, 1, 4)
    for dtype in (torch.float32, torch.bfloat16):
        want = rotary(x.to(dtype), positions)
        got = RotaryTable.of(rotary)(positions, dtype)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype == dtype and torch.equal(a, b)


def test_under_zero3_the_generate_fallback_is_refused_with_the_reason():
    """generate would run every partitioned module's hooks per token: a clear error, not a crash a step later."""
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny("llama", hidden_act="prelu")
    next(model.parameters()).ds_id = 0  # what DeepSpeed ZeRO-3 marks its partitioned parameters with
    with pytest.raises(UsageError, match=r"ZeRO-3.*'prelu'.*rollout=vllm"):
        HFRollout(max_new_tokens=4).generate(model, tokenizer, ["1+1="])


def test_under_zero3_generate_asked_for_by_name_runs_with_a_warning(monkeypatch):
    from agon_lightning.rollout import hf

    said: list[str] = []
    monkeypatch.setattr(hf, "_SAID", set())
    monkeypatch.setattr(hf, "rank_zero_info", said.append)
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    model = tiny("llama")
    next(model.parameters()).ds_id = 0
    batch = HFRollout(max_new_tokens=3, fused_decode=False).generate(model, tokenizer, ["1+1="])
    assert len(batch.texts) == 1
    assert len(said) == 1 and "fused_decode=False" in said[0] and "ZeRO-3" in said[0]
