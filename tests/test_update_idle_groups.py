"""Groups whose advantages are all 0 run their update forward without autograd: the same loss, statistics and gradients.

With β = 0 such a group adds exactly nothing to any gradient, so ``trained_logprobs`` runs it
under ``no_grad`` and the backward skips it. Checked against the plain path (every row with a
graph) on one batch with idle and live groups, on a micro-batch that cuts groups, when every
group is idle (one keeps its graph, so the adapter is still in the backward) and with β > 0
(nothing skipped: the KL term has a gradient in every row).
"""

from __future__ import annotations

import pytest
import torch
from scripted import ScriptedRollout

import agon_lightning.training.update as update
from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.games.records import RoleRollout
from agon_lightning.games.selection import take_rows
from agon_lightning.rollout.base import RolloutBatch
from agon_lightning.training.grpo import LossNormalizer
from agon_lightning.training.module import AgonModule, GRPOOptions

N, GROUPS = 4, 4


@pytest.fixture(scope="module")
def module(tiny_model_dir):
    torch.manual_seed(0)
    m = AgonModule(
        model_name_or_path=str(tiny_model_dir), game="grpo", lora=LoraOptions(r=2, beta_init_std=0.05),
        grpo=GRPOOptions(num_generations=N, logprob_chunk_size=5), rollout=ScriptedRollout(max_new_tokens=9),
        validate_at_start=False,
    )  # fmt: skip
    m.configure_model()
    with torch.no_grad():  # alpha's B starts at zero; give it weight so the gradients of A are not 0
        for name, p in m.policy.named_parameters():
            if ".lora_B." in name:
                p.normal_(0, 0.1)
    return m


def rollouts(seed: int = 1) -> RolloutBatch:
    g = torch.Generator().manual_seed(seed)
    prompts = torch.randint(3, 60, (GROUPS, 6), generator=g).repeat_interleave(
        N, 0
    )  # a group shares its prompt
    prompt_mask = torch.ones_like(prompts)
    prompt_mask[: 2 * N, :2] = 0  # two groups left-padded
    completions = torch.randint(3, 60, (GROUPS * N, 9), generator=g)
    lengths = torch.randint(2, 10, (GROUPS * N,), generator=g)
    mask = (torch.arange(9)[None] < lengths[:, None]).long()
    return RolloutBatch(
        prompts, prompt_mask, completions, mask, [f"row {i}" for i in range(GROUPS * N)], lengths,
        lengths == 9, None, [f"v{i}" for i in range(GROUPS * N)],
    )  # fmt: skip


def role(advantages: list[float]) -> RoleRollout:
    r = RoleRollout("alpha", rollouts(), [], torch.zeros(GROUPS * N))
    r.advantages = torch.tensor(advantages)
    return r


LIVE = [0.5, -0.5, 1.0, -1.0]
IDLE = [0.0] * N


def loss_stats_grads(module, r: RoleRollout, rows: slice, beta: float = 0.0):
    module.policy.zero_grad(set_to_none=True)
    norm = LossNormalizer(len(r.rollouts), int(r.rollouts.completion_mask.sum()), 9)
    reference = None if beta == 0 else (None, beta)
    loss, stats = update.role_loss(module, r, rows, norm, reference)
    loss.backward()
    grads = {n: p.grad.clone() for n, p in module.policy.named_parameters() if p.grad is not None}
    return float(loss.detach()), {k: float(v) for k, v in stats.items()}, grads


def plain(learner, r, rows, beta):
    return update.policy_logprobs(learner, r.adapter, r.rollouts, rows, r.group_size)


@pytest.mark.parametrize(
    ("advantages", "rows", "beta", "calls"),
    [
        (LIVE + IDLE + LIVE + IDLE, slice(0, 16), 0.0, [(8, True), (8, False)]),
        (IDLE + LIVE + IDLE + LIVE, slice(2, 14), 0.0, [(6, True), (6, False)]),  # cuts groups 0 and 3
        (
            IDLE * GROUPS,
            slice(0, 16),
            0.0,
            [(4, True), (12, False)],
        ),  # one group keeps the adapter in the backward
        (LIVE + IDLE + LIVE + IDLE, slice(0, 16), 0.05, [(16, True)]),  # β > 0: every row has a gradient
        (IDLE * GROUPS, slice(4, 7), 0.0, [(3, True)]),  # one idle group, cut: it keeps its graph
    ],
    ids=["half-idle", "cut-groups", "all-idle", "kl", "one-idle-group"],
)
def test_idle_groups_skip_the_graph_with_the_same_loss_stats_and_gradients(
    module, monkeypatch, advantages, rows, beta, calls
):
    r = role(advantages)
    seen: list[tuple[int, bool]] = []
    inner = update._logprobs

    def spy(learner, adapter, rb, groups):
        if adapter is not None:  # the KL reference's forward (the base) is not the trained one
            seen.append((len(rb), torch.is_grad_enabled()))
        return inner(learner, adapter, rb, groups)

    monkeypatch.setattr(update, "_logprobs", spy)
    loss, stats, grads = loss_stats_grads(module, r, rows, beta)
    assert seen == calls
    monkeypatch.setattr(update, "trained_logprobs", plain)
    want_loss, want_stats, want_grads = loss_stats_grads(module, r, rows, beta)
    assert loss == pytest.approx(want_loss, rel=1e-6, abs=1e-7)
    assert stats.keys() == want_stats.keys()
    for k in stats:
        assert stats[k] == pytest.approx(want_stats[k], rel=1e-5, abs=1e-6), k
    assert grads.keys() == want_grads.keys() and any(".lora_A.alpha." in n for n in grads)
    for name, g in want_grads.items():
        assert torch.allclose(grads[name], g, rtol=1e-5, atol=1e-7 + 1e-5 * float(g.abs().max())), name
    if all(a == 0 for a in advantages) and beta == 0:
        assert all(float(g.abs().max()) == 0 for g in grads.values())  # nothing to learn, and nothing learnt


def test_idle_groups_are_the_groups_whose_every_advantage_is_zero():
    groups = torch.tensor([2, 4, 4, 1])
    adv = torch.tensor([0.0, 0.0, 1.0, 0.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0])
    assert update.idle_groups(adv, groups).tolist() == [True, False, True, True]


def test_the_rows_taken_keep_every_column():
    rb = rollouts()
    picked = take_rows(rb, torch.tensor([5, 0, 9]))
    assert torch.equal(picked.completion_ids, rb.completion_ids[[5, 0, 9]])
    assert torch.equal(picked.prompt_mask, rb.prompt_mask[[5, 0, 9]])
    assert picked.texts == ["row 5", "row 0", "row 9"] and picked.versions == ["v5", "v0", "v9"]
    assert torch.equal(picked.lengths, rb.lengths[[5, 0, 9]]) and torch.equal(
        picked.truncated, rb.truncated[[5, 0, 9]]
    )
