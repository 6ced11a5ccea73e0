"""The trainer follows the model: every EOS its generation config lists, and its own logit transform."""

from __future__ import annotations

import pytest
import torch
from conftest import build_char_tokenizer, build_tiny_model
from reference import full_logprobs

from agon_lightning.adapters.policy import (
    LoraOptions,
    attach_adapters,
    completion_hidden_states,
    logit_head,
    output_weight,
)
from agon_lightning.rollout.hf import HFRollout, stop_token_ids
from agon_lightning.training.grpo import LogitHead, token_logprobs


def test_generation_stops_on_every_eos_of_the_generation_config():
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    model = build_tiny_model(tokenizer).eval()
    rollout = HFRollout(max_new_tokens=8)
    prompts = ["12+7=", "3*4="]
    free = rollout.generate(model, tokenizer, prompts, greedy=True)
    assert bool(free.truncated.all()), "the untrained model should run to max_new_tokens here"
    firsts = free.completion_ids[:, 0].tolist()
    # A second EOS, as Qwen3's generation config lists: the first token each prompt writes.
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, *firsts]
    assert stop_token_ids(model, tokenizer) == [tokenizer.eos_token_id, *dict.fromkeys(firsts)]
    stopped = rollout.generate(model, tokenizer, prompts, greedy=True)
    assert stopped.lengths.tolist() == [1, 1]
    assert not stopped.truncated.any()
    assert stopped.completion_mask[:, 0].tolist() == [1, 1] and int(stopped.completion_mask[:, 1:].sum()) == 0


def test_chunked_logprobs_apply_scale_and_softcap_with_exact_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(11, 8, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, 11, (3, 5))
    head = LogitHead(scale=0.7, softcap=1.5)
    logp, _ = token_logprobs(hidden, weight, targets, temperature=0.8, chunk_size=4, head=head)
    ref = (
        torch.log_softmax(head.apply(hidden @ weight.T) / 0.8, dim=-1)
        .gather(-1, targets.unsqueeze(-1))
        .squeeze(-1)
    )
    torch.testing.assert_close(logp, ref.float(), atol=1e-6, rtol=1e-6)
    g = torch.randn(3, 5, dtype=torch.float64)
    got = torch.autograd.grad((logp * g).sum(), (hidden, weight))
    want = torch.autograd.grad((ref * g).sum(), (hidden, weight))
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    with pytest.raises(ValueError, match="softcap must be > 0"):
        LogitHead(softcap=0.0)


def _gemma2(tokenizer):
    from transformers import Gemma2Config, Gemma2ForCausalLM

    cfg = Gemma2Config(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, final_logit_softcapping=0.5, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return Gemma2ForCausalLM(cfg)


def _cohere(tokenizer):
    from transformers import CohereConfig, CohereForCausalLM

    cfg = CohereConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, logit_scale=3.0, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.eos_token_id,
    )  # fmt: skip
    return CohereForCausalLM(cfg)


@pytest.mark.parametrize("build", [_gemma2, _cohere], ids=["gemma2-softcap", "cohere-logit-scale"])
def test_trainer_logprobs_equal_the_models_own(build):
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    policy = attach_adapters(
        build(tokenizer), ("alpha",), LoraOptions(r=2, target_modules=["q_proj", "v_proj"])
    )
    prompt = tokenizer(["1+2=", "30-4="], return_tensors="pt", padding=True)
    comp = torch.randint(1, len(tokenizer) - 8, (2, 6))
    from agon_lightning.rollout.hf import RolloutBatch

    rb = RolloutBatch(prompt["input_ids"], prompt["attention_mask"], comp, torch.ones_like(comp), ["", ""],
                      torch.full((2,), 6), torch.zeros(2, dtype=torch.bool))  # fmt: skip
    hidden = completion_hidden_states(policy, rb.prompt_ids, rb.prompt_mask, comp, rb.completion_mask)
    head = logit_head(policy)
    assert head != LogitHead(), "the model's logit transform was not found in its config"
    logp, _ = token_logprobs(hidden, output_weight(policy), comp, 0.7, 4, head)
    torch.testing.assert_close(logp, full_logprobs(policy, rb, 0.7), atol=1e-5, rtol=1e-5)
    plain, _ = token_logprobs(hidden, output_weight(policy), comp, 0.7, 4)
    assert (plain - logp).abs().max() > 1e-3, "the test would pass without the transform"
