"""The static-shape decode loop (a fixed cache, every row to the end, a step compiled once): the decode loop's tokens."""
# ruff: noqa: F811  (the fixture `shipped` is imported from test_decode and named by each test)

from __future__ import annotations

import pytest
import torch
from test_decode import _sample, shipped  # noqa: F401  (the shipped tiny Qwen3 with two adapters)

from agon_lightning.adapters.policy import generating, using
from agon_lightning.rollout.hf import HFRollout


@pytest.mark.parametrize("adapter", [None, "alpha", "beta"])
def test_greedy_tokens_equal_the_decode_loops_for_every_policy(shipped, adapter):  # noqa: F811
    static = _sample(*shipped, adapter, fused=True, static_cache=True)
    loop = _sample(*shipped, adapter, fused=True)
    assert torch.equal(static.completion_ids, loop.completion_ids)
    assert torch.equal(static.completion_mask, loop.completion_mask)
    assert torch.allclose(static.logprobs, loop.logprobs, atol=1e-5)
    assert static.truncated.any() and not static.truncated.all()  # rows end at different tokens


def test_both_adapters_in_one_batch_give_each_policys_own_tokens(shipped):  # noqa: F811
    policy, tokenizer, prompts = shipped
    names = ["__base__", "alpha", "beta", "alpha", "__base__"]
    with generating(policy):
        static = HFRollout(max_new_tokens=36, static_cache=True).generate(
            policy, tokenizer, prompts, 1, True, adapter_names=names
        )
        loop = HFRollout(max_new_tokens=36).generate(policy, tokenizer, prompts, 1, True, adapter_names=names)
    assert static.texts == loop.texts


def teacher_forced(policy, batch, adapter: str) -> torch.Tensor:
    """Each completion token's log-prob under the model's own forward (temperature 1)."""
    ids = torch.cat([batch.prompt_ids, batch.completion_ids], dim=1)
    attn = torch.cat([batch.prompt_mask, batch.completion_mask], dim=1)
    positions = (attn.cumsum(dim=1) - 1).clamp(min=0)
    with torch.no_grad(), using(policy, adapter):
        logits = policy(input_ids=ids, attention_mask=attn, position_ids=positions).logits
    width = batch.prompt_ids.shape[1]
    logp = logits[:, width - 1 : -1].float().log_softmax(-1)
    return logp.gather(-1, batch.completion_ids[..., None])[..., 0] * batch.completion_mask


def test_sampled_log_probs_are_those_of_the_drawn_tokens_under_the_model(shipped):  # noqa: F811
    policy, tokenizer, prompts = shipped
    torch.manual_seed(0)
    batch = _sample(
        policy, tokenizer, prompts, "alpha", fused=True, greedy=False, num_samples=3, static_cache=True
    )
    assert batch.completion_mask.sum() > 50
    assert torch.allclose(batch.logprobs, teacher_forced(policy, batch, "alpha"), atol=1e-4)


def test_a_compiled_step_gives_the_same_tokens(shipped):  # noqa: F811
    compiled = _sample(
        *shipped, "beta", fused=True, max_new_tokens=12, static_cache=True, compile_mode="default"
    )
    assert torch.equal(
        compiled.completion_ids, _sample(*shipped, "beta", fused=True, max_new_tokens=12).completion_ids
    )


def test_settings_that_do_not_compose_are_refused_with_the_value():
    with pytest.raises(ValueError, match="'fastest'"):
        HFRollout(static_cache=True, compile_mode="fastest")
    with pytest.raises(ValueError, match="static_cache=True"):
        HFRollout(compile_mode="default")
    with pytest.raises(ValueError, match="fused_decode=True"):
        HFRollout(static_cache=True, fused_decode=False)


def test_a_compiled_call_of_any_row_count_and_width_meets_few_shapes_and_keeps_its_own_rows(
    shipped, monkeypatch
):  # noqa: F811
    from agon_lightning.rollout import static_decode

    seen = []
    real = static_decode.prefill

    def recording(w, ids, attn, counts, capacity, *tables):
        seen.append((ids.shape[0], capacity))  # rows run, cache width
        return real(w, ids, attn, counts, capacity, *tables)

    monkeypatch.setattr(static_decode, "prefill", recording)
    policy, tokenizer, prompts = shipped
    three = _sample(policy, tokenizer, prompts[:3], "alpha", fused=True, num_samples=1, static_cache=True,
                    compile_mode="default")  # fmt: skip
    five = _sample(policy, tokenizer, prompts, "alpha", fused=True, num_samples=1, static_cache=True,
                   compile_mode="default")  # fmt: skip
    assert [rows for rows, _ in seen] == [8, 8] and all(
        width % static_decode.CAPACITY_STEP == 0 for _, width in seen
    )
    loop = _sample(policy, tokenizer, prompts, "alpha", fused=True, num_samples=1)
    assert torch.equal(five.completion_ids, loop.completion_ids)
    assert three.texts == loop.texts[:3]


def test_compiled_calls_reuse_their_cache_buffers_and_read_nothing_a_call_before_left(shipped):  # noqa: F811
    from agon_lightning.rollout import static_decode

    policy, tokenizer, prompts = shipped
    loop = _sample(policy, tokenizer, prompts, "alpha", fused=True, num_samples=1)
    first = _sample(policy, tokenizer, prompts, "beta", fused=True, num_samples=1, static_cache=True,
                    compile_mode="default")  # fmt: skip
    kept = {id(t) for c in static_decode._caches.values() for t in c.keys}
    again = _sample(policy, tokenizer, prompts, "alpha", fused=True, num_samples=1, static_cache=True,
                    compile_mode="default")  # fmt: skip
    assert kept & {id(t) for c in static_decode._caches.values() for t in c.keys}  # the same buffers
    assert torch.equal(again.completion_ids, loop.completion_ids)  # beta's keys left there: never read
    assert first.texts != again.texts
