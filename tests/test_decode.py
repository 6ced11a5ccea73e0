"""Our decode loop samples what ``generate`` samples: greedy tokens equal, the same settings honoured."""

from __future__ import annotations

import pytest
import torch
from conftest import build_char_tokenizer
from torch import Tensor

from agon_lightning.adapters.policy import (
    LoraOptions,
    attach_adapters,
    base_only,
    generating,
    load_base,
    sample_with,
)
from agon_lightning.adapters.shared_prompt import prompt_groups
from agon_lightning.game.prompts import Prompts
from agon_lightning.game.types import Problem
from agon_lightning.rollout import decode_loop as decode
from agon_lightning.rollout import hf as rollout_module
from agon_lightning.rollout.decode_loop import Sampling
from agon_lightning.rollout.hf import HFRollout, encode_prompts

LORA = LoraOptions(r=4, alpha=8)
# Two-digit chains like the shipped model's training problems, 2 to 4 terms: prompts of uneven length.
CHAINS = ["12 + 30", "71 - 8 + 40", "99 - 45 + 13 - 20", "5 + 6", "40 + 21 + 17 - 9"]


def _with_adapters(model, std: float):
    """``model`` with adapters ``alpha`` and ``beta``, both with noise in ``B`` so every policy differs."""
    torch.manual_seed(0)
    policy = attach_adapters(model, ("alpha", "beta"), LORA)
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, std)
    return policy


@pytest.fixture(scope="module")
def shipped():
    """The shipped tiny Qwen3 (its solutions end with EOS, or run past a short budget)."""
    base, tokenizer = load_base("agon:tiny-qwen3")
    question = "State the final answer to the following arithmetic problem: {} ="
    prompts = [Prompts().draft_prompt(tokenizer, Problem(question.format(c), "")) for c in CHAINS]
    return _with_adapters(base, std=0.02), tokenizer, prompts


def _sample(
    model, tokenizer, prompts, adapter, fused, greedy=True, num_samples=2, max_new_tokens=36, **settings
):
    rollout = HFRollout(max_new_tokens=max_new_tokens, fused_decode=fused, **settings)
    return sample_with(model, rollout, tokenizer, adapter, prompts, num_samples, greedy)


@pytest.mark.parametrize("adapter", [None, "alpha", "beta"])
def test_greedy_tokens_equal_generate_for_every_policy(shipped, adapter):
    fused = _sample(*shipped, adapter, fused=True)
    plain = _sample(*shipped, adapter, fused=False)
    assert torch.equal(fused.completion_ids, plain.completion_ids)
    assert fused.texts == plain.texts and torch.equal(fused.truncated, plain.truncated)
    assert fused.truncated.any() and not fused.truncated.all()  # some rows stop early, some run out


def test_a_cache_that_grows_gives_the_same_tokens(shipped, monkeypatch):
    monkeypatch.setattr(decode, "CACHE_CHUNK", 5)  # room for 5 tokens, then 10, 20, 36
    grown = _sample(*shipped, "alpha", fused=True)
    assert torch.equal(grown.completion_ids, _sample(*shipped, "alpha", fused=False).completion_ids)


def test_the_policies_differ(shipped):
    texts = [tuple(_sample(*shipped, a, fused=True).texts) for a in (None, "alpha", "beta")]
    assert len(set(texts)) == 3


def _family(kind: str):
    """A tiny random model of another supported family (Qwen2 has q/k/v biases, Llama none)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    torch.manual_seed(1)
    common = dict(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512, initializer_range=0.1,
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    if kind == "qwen2":
        model = Qwen2ForCausalLM(Qwen2Config(**common, tie_word_embeddings=True))
        with torch.no_grad():  # the biases start at zero: make them count
            for name, p in model.named_parameters():
                if name.endswith("proj.bias"):
                    p.normal_(0, 0.5)
    else:
        model = LlamaForCausalLM(LlamaConfig(**common, tie_word_embeddings=False))
    return _with_adapters(model, std=0.3), tokenizer, [f"{c}=" for c in CHAINS]


@pytest.mark.parametrize("kind", ["qwen2", "llama"])
def test_greedy_tokens_equal_generate_for_other_families(kind):
    model, tokenizer, prompts = _family(kind)
    assert decode.unsupported(model, {}) is None
    # A token the first row writes early also ends a completion, so rows stop at different steps.
    first = _sample(model, tokenizer, prompts, "beta", fused=False).completion_ids[0, 3]
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, int(first)]
    for adapter in (None, "beta"):
        fused = _sample(model, tokenizer, prompts, adapter, fused=True)
        plain = _sample(model, tokenizer, prompts, adapter, fused=False)
        assert torch.equal(fused.completion_ids, plain.completion_ids)
        assert torch.equal(fused.lengths, plain.lengths)
    assert fused.truncated.any() and not fused.truncated.all()


def test_mixed_adapter_batch_equals_generate_and_each_policy_alone(shipped):
    policy, tokenizer, prompts = shipped
    names = ["__base__", "alpha", "beta", "alpha", "__base__"]
    rollout = HFRollout(max_new_tokens=36)
    with generating(policy):
        mixed = rollout.generate(policy, tokenizer, prompts, 1, True, adapter_names=names)
        rollout.fused_decode = False
        plain = rollout.generate(policy, tokenizer, prompts, 1, True, adapter_names=names)
    assert mixed.texts == plain.texts
    alone = _sample(*shipped, "alpha", fused=True, num_samples=1).texts
    assert [mixed.texts[1], mixed.texts[3]] == [alone[1], alone[3]]


def test_max_batch_size_and_min_new_tokens_are_honoured(shipped):
    policy = shipped[0]
    fused = _sample(*shipped, "alpha", fused=True, max_batch_size=3)
    assert torch.equal(fused.completion_ids, _sample(*shipped, "alpha", fused=False).completion_ids)
    policy.generation_config.min_new_tokens = 36
    try:
        forced = _sample(*shipped, "alpha", fused=True)
        assert torch.equal(forced.completion_ids, _sample(*shipped, "alpha", fused=False).completion_ids)
    finally:
        policy.generation_config.min_new_tokens = None
    assert forced.truncated.all() and forced.completion_ids.shape[1] == 36


@pytest.mark.parametrize("greedy", [True, False])
def test_one_prefill_per_prompt_decodes_what_a_prefill_per_row_decodes(shipped, greedy):
    policy, tokenizer, prompts = shipped
    ids, attn = encode_prompts(tokenizer, prompts, 4, "cpu")
    sampling = Sampling(greedy=greedy, temperature=1.2)
    weights = decode.weights(policy, "beta")
    runs = []
    for counts in (prompt_groups(ids, attn), None):
        torch.manual_seed(5)
        runs.append(
            decode.decode(
                weights, ids, attn, 20, [tokenizer.eos_token_id], tokenizer.pad_token_id, sampling, counts
            )[0]
        )
    assert torch.equal(runs[0], runs[1]) and len({tuple(r.tolist()) for r in runs[0]}) > len(prompts) * (
        not greedy
    )


def test_draw_follows_the_probabilities_and_never_draws_a_zero():
    torch.manual_seed(0)
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0], [0.0, 0.0, 0.0, 0.0, 1.0], [0.1, 0.1, 0.1, 0.1, 0.6]])
    draws = torch.stack([decode.draw(probs) for _ in range(40_000)])  # [n, 3]
    for row in range(3):
        freq = torch.bincount(draws[:, row], minlength=5).double() / len(draws)
        assert torch.allclose(freq, probs[row].double(), atol=0.01), (row, freq)
        assert (freq[probs[row] == 0] == 0).all()


def _first_tokens(model, tokenizer, prompt, fused: bool, n: int) -> Tensor:
    torch.manual_seed(11)
    batch = _sample(model, tokenizer, [prompt], "beta", fused, greedy=False, max_new_tokens=1, num_samples=n,
                    temperature=1.4, top_k=5, top_p=0.8)  # fmt: skip
    return batch.completion_ids[:, 0]


def test_sampled_first_tokens_follow_generates_distribution():
    """Temperature, top-k and top-p are applied as ``generate`` applies them: same support, same frequencies.

    A random model with its output layer scaled up: a next-token distribution that each of the
    three settings changes.
    """
    model, tokenizer, prompts = _family("llama")
    with torch.no_grad():
        model.get_output_embeddings().weight.mul_(4)
    n = 1500
    ours, theirs = (_first_tokens(model, tokenizer, prompts[0], fused, n) for fused in (True, False))
    p, q = (torch.bincount(t, minlength=len(tokenizer)).double() / n for t in (ours, theirs))
    assert set(ours.tolist()) == set(theirs.tolist()) and 3 <= len(set(ours.tolist())) <= 5  # top-k = 5
    assert 0.5 * (p - q).abs().sum() < 0.06  # total variation; ~0.02 expected from n alone


def test_decoding_leaves_every_weight_as_it_was(shipped):
    policy = shipped[0]
    before = {n: p.detach().clone() for n, p in policy.named_parameters()}
    _sample(*shipped, "beta", fused=True, greedy=False)
    for name, p in policy.named_parameters():
        assert torch.equal(p, before[name]), name


def test_settings_it_cannot_reproduce_go_to_generate(shipped, monkeypatch):
    policy = shipped[0]
    assert (
        decode.unsupported(policy, {"repetition_penalty": 1.3}) == "generation setting repetition_penalty=1.3"
    )
    policy.generation_config.no_repeat_ngram_size = 3
    try:
        assert "no_repeat_ngram_size" in decode.unsupported(policy, {})
        monkeypatch.setattr(
            decode, "decode", lambda *a, **k: pytest.fail("the loop ran for an unsupported setting")
        )
        said: list[str] = []
        monkeypatch.setattr(rollout_module, "_SAID", set())
        monkeypatch.setattr(rollout_module, "rank_zero_info", said.append)
        batch = _sample(*shipped, "alpha", fused=True)
        _sample(*shipped, "alpha", fused=True)
    finally:
        policy.generation_config.no_repeat_ngram_size = 0
    assert len(batch.texts) == 2 * len(CHAINS)
    # The user is told once why, not every step.
    assert len(said) == 1 and "not the decode loop" in said[0] and "no_repeat_ngram_size" in said[0]


def test_other_architectures_and_adapter_states(shipped):
    from transformers import GPT2Config, GPT2LMHeadModel

    policy = shipped[0]
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=50, n_embd=16, n_layer=1, n_head=2))
    assert "GPT2LMHeadModel is not one of" in decode.unsupported(gpt2, {})
    with base_only(policy):
        assert decode.current_adapter(policy) is None and decode.unsupported(policy, {}) is None
    policy.set_adapter("beta")
    assert decode.current_adapter(policy) == "beta"


def test_sharded_weights_go_to_generate():
    """Under ZeRO-3 or FSDP a rank holds a shard (or nothing) of each weight: nothing to fuse."""
    model, _, _ = _family("llama")
    embed = model.get_base_model().get_decoder().embed_tokens
    embed.weight = torch.nn.Parameter(torch.zeros(0))
    assert decode.unsupported(model, {}) == "sharded weights"
    model, _, _ = _family("llama")
    down = model.get_base_model().get_decoder().layers[0].mlp.down_proj.get_base_layer()
    down.weight = torch.nn.Parameter(down.weight.detach().flatten())
    assert decode.unsupported(model, {}) == "merged or sharded adapter layers"
