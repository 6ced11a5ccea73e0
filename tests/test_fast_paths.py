"""The faster paths of a step give what the plain ones give: fused LoRA, merged sampling, shared prompts."""

from __future__ import annotations

import pytest
import torch
from conftest import build_char_tokenizer, build_tiny_model
from torch import nn

from agon_lightning.adapters import fast_lora
from agon_lightning.adapters.policy import (
    LoraOptions,
    attach_adapters,
    completion_hidden_states,
    enable_checkpointing,
    generating,
)
from agon_lightning.adapters.shared_prompt import (
    prompt_groups,
    sample_groups,
    shared_prefixes,
    shares_prompts,
)
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.rollout.merged import merged_for_sampling

LORA = LoraOptions(r=4, alpha=8, beta_init_std=0.2)


@pytest.fixture
def policy():
    torch.manual_seed(0)
    model = attach_adapters(build_tiny_model(build_char_tokenizer()), ("alpha", "beta"), LORA)
    with torch.no_grad():  # alpha's B starts at zero: give it weight so both adapters matter
        for name, p in model.named_parameters():
            if ".lora_B.alpha." in name:
                p.normal_(0, 0.2)
    for name, p in model.named_parameters():
        p.requires_grad_("lora_" in name)
    return model


def outputs_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    logits = model(input_ids=ids).logits
    (logits * torch.linspace(-1, 1, logits.shape[-1])).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return logits.detach(), grads


@pytest.mark.parametrize("adapter", ["alpha", "beta"])
def test_fused_lora_forward_matches_peft_in_values_and_gradients(policy, adapter):
    assert len(fast_lora.lora_layers(policy)) == 2 * 7  # every targeted projection is routed
    policy.set_adapter(adapter)
    ids = torch.randint(0, 90, (3, 11))
    fused, fused_grads = outputs_and_grads(policy, ids)
    fast_lora.uninstall(policy)
    plain, plain_grads = outputs_and_grads(policy, ids)
    assert torch.allclose(fused, plain, atol=1e-5)
    assert fused_grads.keys() == plain_grads.keys() and any(f".{adapter}." in n for n in plain_grads)
    for name, g in plain_grads.items():
        assert torch.allclose(fused_grads[name], g, atol=1e-5 * g.abs().max().item()), name


def test_merged_sampling_never_writes_the_base_and_never_reaches_a_backward(policy):
    policy.set_adapter("beta")
    base = {n: p for n, p in policy.named_parameters() if "lora_" not in n}
    before = {n: p.detach().clone() for n, p in base.items()}
    ids = torch.randint(0, 90, (2, 9))
    with torch.no_grad():
        unmerged = policy(input_ids=ids).logits
    with merged_for_sampling(policy, "beta") as merged:
        assert merged
        with torch.no_grad():
            sampled = policy(input_ids=ids).logits
        with_grad, grads = outputs_and_grads(policy, ids)  # autograd on: the LoRA path, not the merged copy
    assert torch.allclose(sampled, unmerged, atol=1e-5) and not torch.equal(sampled, unmerged)
    assert torch.equal(with_grad, unmerged)
    assert any(".lora_B.beta." in n and g.abs().sum() > 0 for n, g in grads.items())
    for name, p in policy.named_parameters():
        if "lora_" not in name:
            assert p is base[name] and torch.equal(p, before[name]), name  # bit for bit
    assert all(m.forward.__func__ is fast_lora.lora_forward for m in fast_lora.lora_layers(policy))


def test_merged_copy_is_not_used_once_the_adapters_change(policy):
    ids = torch.randint(0, 90, (2, 9))
    with torch.no_grad():
        policy.set_adapter("alpha")
        alpha = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base = policy(input_ids=ids).logits
        policy.set_adapter("beta")
        with merged_for_sampling(policy, "beta"):
            policy.set_adapter("alpha")
            assert torch.equal(policy(input_ids=ids).logits, alpha)  # the LoRA path of the new adapter
            with policy.disable_adapter():
                assert torch.equal(policy(input_ids=ids).logits, base)


def test_base_only_without_peft_walks_gives_the_base_and_restores_every_flag(policy):
    from agon_lightning.adapters.policy import base_only

    policy.set_adapter("beta")
    trainable = [p for n, p in policy.named_parameters() if "lora_" in n]
    ids = torch.randint(0, 90, (2, 9))
    with torch.no_grad():
        adapted = policy(input_ids=ids).logits
        with policy.disable_adapter():
            base = policy(input_ids=ids).logits
        with fast_lora.adapters_disabled(policy) as fast:
            assert fast and policy._adapters_disabled
            assert torch.equal(policy(input_ids=ids).logits, base)
        with base_only(policy, trainable):
            assert torch.equal(policy(input_ids=ids).logits, base)
        assert torch.equal(policy(input_ids=ids).logits, adapted)
    assert not policy._adapters_disabled and policy.active_adapter == "beta"
    assert not any(m._disable_adapters for m in fast_lora.lora_layers(policy))
    assert all(p.requires_grad for p in trainable)
    fast_lora.uninstall(policy)  # PEFT's own layers: PEFT's own switch
    with fast_lora.adapters_disabled(policy) as fast, torch.no_grad():
        assert not fast
    with base_only(policy, trainable), torch.no_grad():
        assert torch.equal(policy(input_ids=ids).logits, base)


def test_no_merge_for_the_base_nor_for_sharded_weights(policy):
    with merged_for_sampling(policy, None) as merged:
        assert not merged
    layer = fast_lora.lora_layers(policy)[0]
    layer.base_layer.weight = nn.Parameter(torch.empty(0), requires_grad=False)  # as ZeRO-3 leaves it
    with pytest.warns(UserWarning, match="sharded"), merged_for_sampling(policy, "alpha") as merged:
        assert not merged


def test_prompt_groups_are_runs_of_identical_prompts():
    ids = torch.tensor([[0, 5, 6], [0, 5, 6], [0, 5, 6], [7, 5, 6], [1, 2, 3], [1, 2, 3]])
    mask = torch.ones_like(ids)
    assert prompt_groups(ids, mask).tolist() == [3, 1, 2]
    assert prompt_groups(ids[2:4], mask[2:4]) is None  # no two rows share a prompt
    mask[1, 0] = 0  # same ids, different padding: not the same prompt
    assert prompt_groups(ids, mask).tolist() == [1, 1, 1, 1, 2]


@pytest.mark.parametrize("completion_len", [1, 6])
def test_shared_prompt_forward_matches_the_full_forward(policy, completion_len):
    policy.set_adapter("alpha")
    torch.manual_seed(1)
    prompts = torch.randint(3, 90, (3, 7))
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[1, :3] = 0  # left padding
    counts = torch.tensor([3, 1, 2])  # uneven groups, as a micro-batch cut through a group gives
    prompt_ids = prompts.repeat_interleave(counts, 0)
    prompt_mask = prompt_mask.repeat_interleave(counts, 0)
    completion = torch.randint(3, 90, (6, completion_len))
    completion_mask = torch.ones_like(completion)
    completion_mask[0, completion_len // 2 + 1 :] = 0  # a row that stopped early
    weights = torch.randn(6, completion_len, 32)
    args = (policy, prompt_ids, prompt_mask, completion, completion_mask)

    def run():
        policy.zero_grad(set_to_none=True)
        hidden = completion_hidden_states(*args)
        (hidden * weights).sum().backward()
        return hidden.detach(), {
            n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None
        }

    assert shares_prompts(policy.get_base_model().get_decoder())
    shared, shared_grads = run()
    import agon_lightning.adapters.policy as policy_module

    original = policy_module.prompt_groups
    policy_module.prompt_groups = lambda *a: None  # every row for itself
    try:
        full, full_grads = run()
    finally:
        policy_module.prompt_groups = original
    assert shared.shape == (6, completion_len, 32)
    assert torch.allclose(shared, full, atol=1e-5)
    assert shared_grads.keys() == full_grads.keys() and full_grads
    for name, g in full_grads.items():
        assert torch.allclose(shared_grads[name], g, atol=1e-5 * g.abs().max().item()), name


def hidden_and_grads(policy, args, weights):
    policy.zero_grad(set_to_none=True)
    hidden = completion_hidden_states(*args)
    (hidden * weights).sum().backward()
    return hidden.detach(), {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}


def left_pad(rows, width):
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, row in enumerate(rows):
        ids[i, width - len(row) :], mask[i, width - len(row) :] = torch.tensor(row), 1
    return ids, mask


@pytest.mark.parametrize("completion_len", [1, 5])
def test_a_shared_prefix_runs_once_and_matches_the_full_forward(policy, completion_len):
    """Challenger-like prompts: a group shares the problem, then each row reads its own draft."""
    policy.set_adapter("beta")
    torch.manual_seed(2)
    problems = [torch.randint(3, 90, (n,)).tolist() for n in (6, 4)]
    rows = [problems[0] + torch.randint(3, 90, (k,)).tolist() for k in (3, 1, 5)]
    rows += [problems[1] + torch.randint(3, 90, (k,)).tolist() for k in (2, 2)] + [[7, 8, 9]]
    prompt_ids, prompt_mask = left_pad(rows, 12)
    groups = torch.tensor([3, 2, 1])
    aligned, shared = shared_prefixes(prompt_ids, prompt_mask, groups)
    assert shared.tolist() == [6, 6, 6, 4, 4, 2]  # the problem; a lone row: all but its last token
    assert torch.equal(aligned[:, :3], torch.tensor([r[:3] for r in rows]))
    completion = torch.randint(3, 90, (6, completion_len))
    completion_mask = torch.ones_like(completion)
    completion_mask[2, completion_len // 2 + 1 :] = 0
    weights = torch.randn(6, completion_len, 32)
    args = (policy, prompt_ids, prompt_mask, completion, completion_mask)
    shared_hidden, shared_grads = hidden_and_grads(policy, (*args, groups), weights)
    full, full_grads = hidden_and_grads(policy, (*args, torch.ones(6, dtype=torch.long)), weights)
    assert shared_prefixes(prompt_ids, prompt_mask, torch.ones(6, dtype=torch.long)) is None  # nothing shared
    assert torch.allclose(shared_hidden, full, atol=1e-5)
    assert shared_grads.keys() == full_grads.keys() and full_grads
    for name, g in full_grads.items():
        assert torch.allclose(shared_grads[name], g, atol=1e-5 * g.abs().max().item()), name


def test_sample_groups_follow_grpo_groups_through_micro_batches():
    assert sample_groups(slice(0, 8), 8, 4).tolist() == [4, 4]
    assert sample_groups(slice(3, 9), 12, 4).tolist() == [1, 4, 1]  # a micro-batch cutting two groups
    assert sample_groups(slice(8, 14), 12, 4).tolist() == [4]


def test_prompts_not_left_padded_are_not_shared():
    ids = torch.tensor([[5, 6, 7, 0], [5, 6, 7, 8]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])  # right padding
    assert shared_prefixes(ids, mask, torch.tensor([2])) is None


def test_checkpointing_turns_prompt_sharing_off(policy):
    decoder = policy.get_base_model().get_decoder()
    assert shares_prompts(decoder)
    enable_checkpointing(policy)
    assert not shares_prompts(decoder)


@pytest.mark.parametrize("greedy", [True, False])
def test_one_prefill_per_prompt_samples_what_a_prefill_per_row_samples(policy, greedy, monkeypatch):
    tokenizer = build_char_tokenizer()
    tokenizer.padding_side = "left"
    # The generate path's prefill (the decode loop has its own, tests/test_decode.py); chunks of 6
    # rows cut through a group of 4.
    rollout = HFRollout(max_new_tokens=8, max_batch_size=6, fused_decode=False)
    prompts = ["12+30=", "7+8=", "100-1="]  # different lengths: left padding
    policy.set_adapter("beta")

    def sample():
        torch.manual_seed(3)
        with generating(policy):
            return rollout.generate(policy, tokenizer, prompts, 4, greedy)

    calls = []
    original = HFRollout._shared_prefill
    monkeypatch.setattr(
        HFRollout, "_shared_prefill", staticmethod(lambda *a: calls.append(1) or original(*a))
    )
    shared = sample()
    with torch.no_grad():  # both chunks (6 rows each) had prompts to share
        assert len(calls) == 2 and all(original(policy, shared.prompt_ids[i : i + 6], shared.prompt_mask[i : i + 6]) for i in (0, 6))  # fmt: skip
    monkeypatch.setattr(HFRollout, "_shared_prefill", staticmethod(lambda *a: {}))
    per_row = sample()
    assert shared.texts == per_row.texts and torch.equal(shared.completion_ids, per_row.completion_ids)
    assert len(set(shared.texts)) > 1
