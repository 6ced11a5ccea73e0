"""The per-role KL anchor: each role's reference (the base, its own past adapter, the rival now) and β.

The KL a role's loss reports is checked against one computed by hand: a plain forward of the
PEFT model over each row's prompt and completion, with the reference's weights in place.
"""

from __future__ import annotations

import pytest
import torch
from test_resume import assert_a_killed_run_resumes_exactly, straight_log

from agon_lightning.adapters.policy import LoraOptions
from agon_lightning.adapters.snapshots import AdapterHistory, adapter_state, load_into, policies_of, slot_of
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule
from agon_lightning.game.names import ALPHA, BETA
from agon_lightning.rollout.hf import HFRollout
from agon_lightning.training.features.kl import KLAnchor, KLAnchorFeature, KLAnchors
from agon_lightning.training.grpo import LossNormalizer
from agon_lightning.training.module import AgonModule, GRPOOptions
from agon_lightning.training.update import loss_mask, role_loss
from agon_lightning.verifiers.reasoning_gym import ReasoningGymVerifier

N = 3


def make_module(model_dir, kl: KLAnchors | None = None, **kwargs) -> AgonModule:
    torch.manual_seed(0)
    module = AgonModule(
        model_name_or_path=str(model_dir), lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=kwargs.pop("grpo", GRPOOptions(num_generations=N)), kl=kl, rollout=HFRollout(max_new_tokens=6),
        verifier=ReasoningGymVerifier(), validate_at_start=False, **kwargs,
    )  # fmt: skip
    module.configure_model()
    return module


@pytest.fixture(scope="module")
def problem():
    return ReasoningGymDataModule(train_size=4, val_size=1, batch_size=1).train_problems[:1]


def adapter_weights(module: AgonModule, adapter: str) -> dict[str, torch.Tensor]:
    return adapter_state(module.policy, adapter)


@torch.no_grad()
def nudge(module: AgonModule, adapter: str, seed: int) -> None:
    """Move an adapter's weights as an update would (every tensor, by a seeded amount)."""
    g = torch.Generator().manual_seed(seed)
    for p in module.adapter_params[adapter]:
        p.add_(torch.randn(p.shape, generator=g) * 0.3)


@torch.no_grad()
def hand_logprobs(module: AgonModule, adapter: str | None, rollouts) -> list[torch.Tensor]:
    """Each row's completion log-probs from a plain forward over its unpadded prompt and completion."""
    policy = module.policy
    rows = []
    for i in range(len(rollouts)):
        prompt = rollouts.prompt_ids[i][rollouts.prompt_mask[i].bool()]
        length = int(rollouts.completion_mask[i].sum())
        completion = rollouts.completion_ids[i][:length]
        ids = torch.cat([prompt, completion])[None]
        if adapter is None:
            with policy.disable_adapter():
                logits = policy(input_ids=ids).logits[0]
        else:
            policy.set_adapter(adapter)
            logits = policy(input_ids=ids).logits[0]
        logp = torch.log_softmax(logits[len(prompt) - 1 : -1].float() / module.rollout.temperature, -1)
        rows.append(logp.gather(-1, completion[:, None])[:, 0])
    return rows


def hand_kl(now: list[torch.Tensor], ref: list[torch.Tensor]) -> float:
    """k3 = exp(ref − now) − (ref − now) − 1, the mean over every completion token."""
    per_token = torch.cat([torch.exp(r - n) - (r - n) - 1 for n, r in zip(now, ref)])
    return float(per_token.mean())


def role_kl(module: AgonModule, role, reference) -> float:
    norm = LossNormalizer(len(role.rollouts), int(loss_mask(role.rollouts, False).sum()), 6)
    _, stats = role_loss(module, role, slice(0, len(role.rollouts)), norm, reference)
    return float(stats["kl"])


@pytest.mark.parametrize("reference", ["base", "rival", "self"])
def test_each_reference_gives_the_hand_computed_kl(tiny_model_dir, problem, reference):
    beta = 0.3
    anchors = KLAnchors(drafter=KLAnchor(reference, beta, age=1), challenger=KLAnchor(reference, beta, age=1))
    module = make_module(tiny_model_dir, kl=anchors)
    before = {a: adapter_weights(module, a) for a in module.adapter_names}
    if module.adapter_history is not None:  # a 'self' reference: version 0 kept, the initial weights
        module.adapter_history.keep(module.policy, module.adapter_names, 0)
    for seed, a in enumerate(module.adapter_names):  # an "update": both adapters move
        nudge(module, a, seed)
    module.policy_version = 1
    record = module.play(problem)
    roles = record.roles
    module.game.advantages(roles, N, module.grpo)
    module.features.call("before_update", module, record)
    references = [r.reference for r in roles]

    for role, (ref_adapter, got_beta) in zip(roles, references):
        rival = next(r.adapter for r in roles if r.adapter != role.adapter)
        assert got_beta == beta
        assert ref_adapter == {"base": None, "rival": rival, "self": slot_of(role.adapter)}[reference]
        kl = role_kl(module, role, (ref_adapter, got_beta))
        now = hand_logprobs(module, role.adapter, role.rollouts)
        if reference == "self":  # by hand: the adapter's own weights before the nudge, put back in place
            moved = adapter_weights(module, role.adapter)
            load_into(module.policy, role.adapter, before[role.adapter])
            ref = hand_logprobs(module, role.adapter, role.rollouts)
            load_into(module.policy, role.adapter, moved)
        else:
            ref = hand_logprobs(module, None if reference == "base" else rival, role.rollouts)
        expected = hand_kl(now, ref)
        assert expected > 1e-4  # the reference differs from the policy: a KL that can be wrong
        assert kl == pytest.approx(expected, rel=1e-4, abs=1e-7), (reference, role.role)


def test_without_model_kl_both_roles_pull_toward_the_base_with_grpo_kl_beta(tiny_model_dir):
    module = make_module(tiny_model_dir, grpo=GRPOOptions(num_generations=N, kl_beta=0.05))
    anchor = next(f for f in module.features if isinstance(f, KLAnchorFeature))
    assert (
        anchor.kl is None
        and [anchor.anchor(r) for r in ("drafter", "challenger")] == [KLAnchor("base", 0.05)] * 2
    )
    assert module.adapter_history is None and policies_of(module.policy) == [ALPHA, BETA]


def test_a_self_reference_adds_frozen_slots_and_changes_nothing_else(tiny_model_dir):
    plain = make_module(tiny_model_dir)
    rng_plain = torch.get_rng_state()
    anchored = make_module(tiny_model_dir, kl=KLAnchors(drafter=KLAnchor("self", 0.1, age=2)))
    rng_anchored = torch.get_rng_state()
    assert torch.equal(rng_plain, rng_anchored)  # the slots drew nothing from the global stream
    for a in (ALPHA, BETA):
        assert adapter_weights(plain, a).keys() == adapter_weights(anchored, a).keys()
        for k, v in adapter_weights(plain, a).items():
            assert torch.equal(v, adapter_weights(anchored, a)[k]), k
        slot = adapter_state(anchored.policy, slot_of(a))
        assert all(torch.equal(slot[k], v) for k, v in adapter_weights(anchored, a).items())
    assert policies_of(anchored.policy) == [ALPHA, BETA]  # what a sampling server is given
    slot_params = {id(p) for n, p in anchored.policy.named_parameters() if "_ref." in n}
    assert slot_params and not slot_params & {id(p) for p in anchored.trainable}
    assert anchored.adapter_names == (ALPHA, BETA) and anchored.adapter_history.depth == 2


def test_the_history_keeps_what_the_ages_read_and_starts_from_the_initial_weights(tiny_model_dir):
    module = make_module(tiny_model_dir)
    history = AdapterHistory(depth=2)
    for version in range(5):
        history.record(module.policy, ALPHA, version)
        nudge(module, ALPHA, version)
    assert sorted(history.states[ALPHA]) == [2, 3, 4]  # versions 4-2 .. 4: what age <= 2 reads
    assert history.at(ALPHA, 3)[0] == 3 and history.at(ALPHA, 0)[0] == 2  # too old: the oldest kept
    fresh = AdapterHistory(depth=2)
    fresh.record(module.policy, ALPHA, 0)
    assert fresh.at(ALPHA, -1)[0] == 0  # at the start, "k updates ago" is the initial weights
    copy = AdapterHistory(depth=2)
    copy.load_state_dict(history.state_dict())
    assert all(
        torch.equal(copy.at(ALPHA, v)[1][k], history.at(ALPHA, v)[1][k]) for v in (2, 3, 4) for k in copy.at(ALPHA, v)[1]
    )  # fmt: skip
    with pytest.raises(ValueError, match="kept 2 versions of each adapter, this run keeps 3"):
        AdapterHistory(depth=3).load_state_dict(history.state_dict())


def test_bad_anchors_name_the_value(tiny_model_dir):
    with pytest.raises(ValueError, match="kl reference must be one of .* got 'teacher'"):
        KLAnchor("teacher", 0.1)
    with pytest.raises(ValueError, match="kl age must be >= 1"):
        KLAnchor("self", 0.1, age=0)
    with pytest.raises(ValueError, match="kl beta must be >= 0, got -0.1"):
        KLAnchor("base", -0.1)
    rival = KLAnchors(drafter=KLAnchor("rival", 0.1))
    with pytest.raises(
        ValueError, match="model.kl.drafter.reference='rival', but the game GRPOGame declares no rival"
    ):
        AgonModule(game="grpo", kl=rival)
    with pytest.raises(
        ValueError, match="the game AgonGame plays every role with one adapter \\(alpha\\): its rival"
    ):
        AgonModule(schedule="self_play", kl=rival)
    with pytest.raises(
        ValueError, match="model.kl.challenger sets a KL term, but the game GRPOGame has no role"
    ):
        AgonModule(game="grpo", kl=KLAnchors(challenger=KLAnchor("base", 0.1)))
    with pytest.raises(
        ValueError, match="model.kl.roles.judge sets a KL term, but the game AgonGame has no role 'judge'"
    ):
        AgonModule(kl=KLAnchors(roles={"judge": KLAnchor("base", 0.1)}))
    with pytest.raises(ValueError, match=r"grpo.kl_beta=0.05 and model.kl both set a KL term"):
        AgonModule(grpo=GRPOOptions(kl_beta=0.05), kl=rival)
    two_ages = KLAnchors(KLAnchor("self", 0.1, age=1), KLAnchor("self", 0.1, age=3))
    with pytest.raises(ValueError, match=r"share one snapshot slot; give them one age, got \[1, 3\]"):
        AgonModule(schedule="self_play", kl=two_ages)


ANCHORS = [
    '--model.kl={"drafter": {"reference": "self", "beta": 0.2, "age": 2}, '
    '"challenger": {"reference": "rival", "beta": 0.1}}'
]


@pytest.fixture(scope="module")
def straight_anchored(tiny_model_dir, tmp_path_factory):
    """An uninterrupted `agon fit` of 6 steps with both anchors (the drafter's own past, the rival now)."""
    return straight_log(tiny_model_dir, tmp_path_factory.mktemp("straight_anchored"), *ANCHORS)


def test_a_fit_with_anchors_logs_a_kl_and_resumes_exactly(tiny_model_dir, tmp_path, straight_anchored):
    rows = (straight_anchored / "metrics.csv").read_text().splitlines()
    header = rows[0].split(",")
    kl = [
        float(r.split(",")[header.index("train/kl")])
        for r in rows[1:]
        if r.split(",")[header.index("train/kl")]
    ]
    assert len(kl) == 6 and all(v >= 0 for v in kl) and any(v > 0 for v in kl)
    state = assert_a_killed_run_resumes_exactly(
        tiny_model_dir, tmp_path / "killed", straight_anchored, *ANCHORS
    )
    # the past weights travel with it: versions 1-3, kept as steps 1-3 began (version 4, the current
    # weights, is the checkpoint's own state; the next step keeps it)
    assert sorted(state["agon"]["adapter_history"]["states"][ALPHA]) == [1, 2, 3]


def test_resuming_a_self_reference_from_a_checkpoint_without_past_weights_is_refused():
    from agon_lightning.training.features.history import NoSnapshots, Snapshots

    with pytest.raises(ValueError, match="the checkpoint holds none"):
        Snapshots(2).load_state_dict({"step": 4})
    with pytest.warns(UserWarning, match="they are not used"):
        NoSnapshots().load_state_dict({"adapter_history": {"depth": 2, "states": {}}})
