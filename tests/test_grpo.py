import math

import pytest
import torch

from agon_lightning.training.grpo import (
    LossNormalizer,
    aggregate,
    clipped_policy_loss,
    group_advantages,
    logprob_mismatch,
    sampler_correction,
    token_logprobs,
)


def test_group_advantages_hand_computed():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 2.0, 2.0, 2.0, 2.0])
    adv, zero_std = group_advantages(rewards, 4, scale_std=True, eps=0.0)
    # group 1: mean 0.25, population std sqrt(3)/4
    std = math.sqrt(3) / 4
    assert adv[:4].tolist() == pytest.approx([0.75 / std, -0.25 / std, -0.25 / std, -0.25 / std])
    assert adv[4:].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert zero_std.tolist() == [False, True]


def test_group_advantages_dr_grpo_only_centres():
    adv, _ = group_advantages(torch.tensor([3.0, 1.0]), 2, scale_std=False)
    assert adv.tolist() == [1.0, -1.0]


def test_group_advantages_rejects_ragged_groups():
    with pytest.raises(ValueError, match="groups of 4"):
        group_advantages(torch.zeros(6), 4)


def test_chunked_logprobs_match_naive_values_and_gradients():
    torch.manual_seed(0)
    hidden = torch.randn(3, 5, 8, requires_grad=True)
    weight = torch.randn(50, 8)
    targets = torch.randint(0, 50, (3, 5))
    lp, ent = token_logprobs(hidden, weight, targets, temperature=0.7, chunk_size=4)
    logits = hidden @ weight.t() / 0.7
    naive = torch.log_softmax(logits, -1).gather(-1, targets[..., None]).squeeze(-1)
    probs = torch.softmax(logits, -1)
    assert torch.allclose(lp, naive, atol=1e-5)
    assert torch.allclose(ent, -(probs * probs.log()).sum(-1), atol=1e-5)
    (g1,) = torch.autograd.grad(lp.sum(), hidden)
    (g2,) = torch.autograd.grad(naive.sum(), hidden)
    assert torch.allclose(g1, g2, atol=1e-5)


def _norm(mask):
    return LossNormalizer(num_seqs=mask.shape[0], num_tokens=int(mask.sum()), max_tokens=mask.shape[1])


def test_aggregations_hand_computed():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    n = _norm(mask)
    assert aggregate(per_token, mask, "token_mean", n).item() == pytest.approx(10 / 4)
    assert aggregate(per_token, mask, "seq_mean", n).item() == pytest.approx((2 + 4) / 2)
    assert aggregate(per_token, mask, "dr_grpo", n).item() == pytest.approx(10 / 6)
    with pytest.raises(ValueError, match="'mean'"):
        aggregate(per_token, mask, "mean", n)


def test_micro_batched_loss_sums_to_full_batch_loss():
    torch.manual_seed(1)
    logp = torch.randn(4, 6)
    mask = (torch.rand(4, 6) > 0.3).long()
    adv = torch.randn(4)
    n = _norm(mask)
    for agg in ("token_mean", "seq_mean", "dr_grpo"):
        full, _ = clipped_policy_loss(logp, logp, adv, mask, n, aggregation=agg)
        parts = sum(clipped_policy_loss(logp[i : i + 2], logp[i : i + 2], adv[i : i + 2], mask[i : i + 2], n, aggregation=agg)[0]
                    for i in (0, 2))  # fmt: skip
        assert parts.item() == pytest.approx(full.item(), abs=1e-6)


def test_on_policy_loss_is_minus_advantage_and_gradient_is_policy_gradient():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    loss, stats = clipped_policy_loss(logp, logp.detach(), torch.tensor([0.5]), mask, _norm(mask))
    assert loss.item() == pytest.approx(-0.5)
    loss.backward()
    assert logp.grad.tolist() == [[-0.25, -0.25]]
    assert stats["clip_fraction"].item() == 0.0


def test_clipping_hand_computed():
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    mask = torch.ones(1, 2)
    loss, stats = clipped_policy_loss(
        logp, old, torch.tensor([1.0]), mask, _norm(mask), eps_low=0.2, eps_high=0.3
    )
    # positive advantage: min(1.5, 1.3) = 1.3 and min(0.5, 0.8) = 0.5
    assert loss.item() == pytest.approx(-(1.3 + 0.5) / 2)
    assert stats["clip_fraction"].item() == pytest.approx(0.5)


def test_kl_term_is_k3_and_zero_at_reference():
    logp = torch.tensor([[-1.0, -1.0]])
    mask = torch.ones(1, 2)
    _, s0 = clipped_policy_loss(logp, logp, torch.zeros(1), mask, _norm(mask), ref_logp=logp, beta=0.1)
    assert s0["kl"].item() == 0.0
    ref = torch.tensor([[-2.0, -1.0]])
    loss, s1 = clipped_policy_loss(logp, logp, torch.zeros(1), mask, _norm(mask), ref_logp=ref, beta=0.1)
    k3 = math.exp(-1) + 1 - 1
    assert s1["kl"].item() == pytest.approx(k3 / 2)
    assert loss.item() == pytest.approx(0.1 * k3 / 2)
    with pytest.raises(ValueError, match="ref_logp"):
        clipped_policy_loss(logp, logp, torch.zeros(1), mask, _norm(mask), beta=0.1)


def test_sampler_correction_is_the_capped_trainer_engine_ratio():
    trainer = torch.log(torch.tensor([[0.5, 0.9, 0.2]]))
    engine = torch.log(torch.tensor([[0.25, 0.9, 0.8]]))  # ratios 2, 1, 0.25
    weights = sampler_correction(trainer, engine, cap=1.5)
    assert weights[0].tolist() == pytest.approx([1.5, 1.0, 0.25])
    assert not weights.requires_grad
    with pytest.raises(ValueError, match="cap must be > 0, got 0"):
        sampler_correction(trainer, engine, cap=0)


def test_sampler_weights_scale_the_surrogate_not_the_kl():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    mask = torch.ones(1, 2)
    weights = torch.tensor([[2.0, 0.5]])
    loss, _ = clipped_policy_loss(
        logp, logp.detach(), torch.tensor([1.0]), mask, _norm(mask), sampler_weights=weights
    )
    assert loss.item() == pytest.approx(-(2.0 + 0.5) / 2)
    loss.backward()
    assert logp.grad[0].tolist() == pytest.approx([-1.0, -0.25])
    ref = logp.detach()  # KL = 0 at the reference whatever the weights
    loss_kl, stats = clipped_policy_loss(
        logp,
        logp.detach(),
        torch.zeros(1),
        mask,
        _norm(mask),
        ref_logp=ref,
        beta=0.5,
        sampler_weights=weights,
    )
    assert loss_kl.item() == 0.0 and stats["kl"].item() == 0.0


def test_logprob_mismatch_is_the_masked_mean_absolute_gap():
    trainer = torch.tensor([[-1.0, -2.0, -3.0]])
    engine = torch.tensor([[-1.5, -1.0, 9.0]])
    mask = torch.tensor([[1, 1, 0]])
    assert logprob_mismatch(trainer, engine, mask).item() == pytest.approx((0.5 + 1.0) / 2)


def test_group_std_population_and_unbiased_against_a_hand_computation():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0])  # mean 0.25, squared deviations 0.5625, 3 × 0.0625
    population = (0.75 / 4) ** 0.5  # sum of squares 0.75 over N
    unbiased = (0.75 / 3) ** 0.5  # over N − 1
    pop, _ = group_advantages(rewards, 4, eps=0.0)
    unb, _ = group_advantages(rewards, 4, eps=0.0, std="unbiased")
    assert pop[0].item() == pytest.approx(0.75 / population) and unb[0].item() == pytest.approx(
        0.75 / unbiased
    )
    assert (pop / unb)[0].item() == pytest.approx((4 / 3) ** 0.5)


def test_group_std_kind_is_validated_naming_the_value():
    from agon_lightning.training.module import GRPOOptions

    with pytest.raises(ValueError, match="'sample'"):
        group_advantages(torch.zeros(4), 2, std="sample")
    with pytest.raises(ValueError, match=r"grpo.std must be one of .*'bessel'"):
        GRPOOptions(std="bessel")
    assert GRPOOptions().std == "population"
