"""The update's length-sorted chunks give what the one-call forward gives, at fewer token positions."""

from __future__ import annotations

import pytest
import torch
from test_fast_paths import policy  # noqa: F401  the fixture: a tiny model, both adapters weighted

import agon_lightning.adapters.policy as policy_module
from agon_lightning.adapters.policy import (
    completion_hidden_states,
    length_chunks,
)


def batch(lengths: list[int], prompt: int = 6, groups: int = 2):
    """Left-padded prompts (``groups`` distinct, each repeated) and right-padded completions of ``lengths``."""
    torch.manual_seed(1)
    rows, width = len(lengths), max(lengths)
    prompt_ids = torch.randint(3, 90, (groups, prompt)).repeat_interleave(rows // groups, 0)
    prompt_mask = torch.ones_like(prompt_ids)
    prompt_mask[rows // groups :, :2] = 0  # the second prompt is shorter: left padding
    completion = torch.randint(3, 90, (rows, width))
    completion_mask = (torch.arange(width)[None] < torch.tensor(lengths)[:, None]).long()
    return prompt_ids, prompt_mask, completion.masked_fill(completion_mask == 0, 0), completion_mask


def test_length_chunks_cover_every_row_once_longest_first():
    lengths = [3, 120, 2, 118, 1, 119, 4, 117]
    _, prompt_mask, _, completion_mask = batch(lengths)
    chunks, cost = length_chunks(prompt_mask.sum(dim=1), completion_mask)
    order = torch.cat(chunks)
    assert sorted(order.tolist()) == list(range(len(lengths)))
    assert [lengths[i] for i in order] == sorted(lengths, reverse=True)
    one_call = len(lengths) * (prompt_mask.shape[1] + completion_mask.shape[1]) + policy_module.CALL_TOKENS
    assert len(chunks) == 2 and cost < one_call  # the long half and the short half
    assert length_chunks(prompt_mask[:1].sum(dim=1), completion_mask[:1]) is None


@pytest.mark.parametrize("shared_prompts", [True, False], ids=["prefixes-once", "whole-prompts"])
def test_chunked_forward_matches_the_full_forward(policy, monkeypatch, shared_prompts):  # noqa: F811
    policy.set_adapter("alpha")
    lengths = [3, 120, 2, 118, 1, 119, 4, 117]
    prompt_ids, prompt_mask, completion, completion_mask = batch(lengths)
    completion_mask[1, 2:118] = 0  # a masked stretch inside a completion: its last tokens still count
    args = (policy, prompt_ids, prompt_mask, completion, completion_mask)
    mask = completion_mask.unsqueeze(-1)
    weights = torch.randn(len(lengths), max(lengths), 32)
    if not shared_prompts:
        monkeypatch.setattr(policy_module, "shared_prefixes", lambda *a: None)

    def run():
        policy.zero_grad(set_to_none=True)
        hidden = completion_hidden_states(*args)
        (hidden * weights * mask).sum().backward()
        grads = {n: p.grad.clone() for n, p in policy.named_parameters() if p.grad is not None}
        return hidden.detach() * mask, grads

    cut = []
    original = policy_module.length_chunks
    monkeypatch.setattr(policy_module, "length_chunks", lambda *a: cut.append(original(*a)) or cut[-1])
    chunked, chunked_grads = run()
    assert len(cut[0][0]) == 2  # the chunks ran: the long rows and the short ones
    monkeypatch.setattr(policy_module, "length_chunks", lambda *a: None)
    monkeypatch.setattr(policy_module, "shared_prefixes", lambda *a: None)
    full, full_grads = run()
    assert torch.allclose(chunked, full, atol=1e-5)
    assert chunked_grads.keys() == full_grads.keys() and full_grads
    for name, g in full_grads.items():
        assert torch.allclose(chunked_grads[name], g, atol=1e-5 * g.abs().max().item()), name


def test_equal_lengths_run_in_one_call(policy, monkeypatch):  # noqa: F811
    args = (policy, *batch([5] * 8))
    monkeypatch.setattr(policy_module, "_chunked_hidden_states", lambda *a: pytest.fail("chunked"))
    original = policy_module.prefix_hidden_states
    called = []
    monkeypatch.setattr(
        policy_module, "prefix_hidden_states", lambda *a: called.append(len(a)) or original(*a)
    )
    assert completion_hidden_states(*args).shape == (8, 5, 32)
    assert len(called) == 1  # the shared prompts ran once, the rest in one call
