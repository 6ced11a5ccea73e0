"""The paper's reward, every form, on a table of cases; what group normalisation leaves of each term."""

from pathlib import Path

import pytest
import torch
import yaml

from agon_lightning.game.rewards import CompetitiveReward, CorrectnessReward, Outcomes, RoleOutcome
from agon_lightning.games.schedule import opponent_rows
from agon_lightning.training.grpo import group_advantages

GOOD = "<think>1+1=2</think>2<answer>2</answer>"  # φ = 1
BAD = "2"  # φ = 0: no trace, no answer block


def role(correct, texts, lengths=None):
    lengths = lengths or [10] * len(correct)
    return RoleOutcome(torch.tensor(correct, dtype=torch.float32), torch.tensor(lengths), texts)


# (a, φ(a), b, φ(b), len(b) < len(a)) → challenger reward under each form, with the paper's
# weights (w_c 2, λ 1, w_f 0.5) and τ 0.25 for the tiebreak column.
CASES = [
    # a  φa b  φb shorter  bonus  margin  cooperative  tiebreak(bonus, τ=.25)
    (0, 0, 0, 0, False, 0.0, 0.0, 0.0, 0.0),
    (0, 1, 1, 1, False, 3.5, 3.5, 2.5, 3.5),  # conversion: correctness + the bonus
    (0, 0, 1, 0, True, 3.0, 3.0, 2.0, 3.0),  # shorter but the draft was wrong: no tiebreak
    (1, 1, 1, 1, False, 2.5, 2.5, 2.5, 2.5),
    (1, 1, 1, 0, True, 2.0, 2.0, 2.0, 2.25),  # both right, challenger shorter: τ
    (1, 0, 0, 1, True, 0.5, -0.5, 0.5, 0.5),  # regression: the margin charges λ
    (1, 1, 0, 0, False, 0.0, -1.0, 0.0, 0.0),
]


@pytest.mark.parametrize("a,fa,b,fb,shorter,bonus,margin,coop,tiebreak", CASES)
def test_each_form_on_a_table_of_cases(a, fa, b, fb, shorter, bonus, margin, coop, tiebreak):
    draft = role([a], [GOOD if fa else BAD], [10])
    challenge = role([b], [GOOD if fb else BAD], [5 if shorter else 15])
    outcomes = Outcomes(draft, challenge)
    rewards = {
        "bonus": CompetitiveReward()(outcomes),
        "margin": CompetitiveReward(form="margin")(outcomes),
        "cooperative": CorrectnessReward()(outcomes),
        "tiebreak": CompetitiveReward(length_tiebreak=0.25)(outcomes),
    }
    for name, expected in zip(rewards, (bonus, margin, coop, tiebreak)):
        assert rewards[name].challenge.item() == pytest.approx(expected), name
        assert rewards[name].draft.item() == pytest.approx(2 * a + 0.5 * fa), name  # w_c·c(a) + w_f·φ(a)


def test_every_weight_is_an_option():
    outcomes = Outcomes(role([0, 1], [GOOD, BAD]), role([1, 1], [GOOD, GOOD], [10, 4]))
    r = CompetitiveReward(
        correctness_weight=3.0, conversion_bonus=0.5, length_tiebreak=0.125, format_weight=1.0
    )
    out = r(outcomes)
    assert out.draft.tolist() == [1.0, 3.0]
    assert out.challenge.tolist() == [3.0 + 0.5 + 1.0, 3.0 + 0.125 + 1.0]
    assert out.metrics()["train/challenge/competitive"] == 0.5
    assert out.metrics()["train/draft/format"] == 0.5
    assert CompetitiveReward(format=None, format_weight=0.0)(outcomes).draft.tolist() == [0.0, 2.0]


def test_grpo_has_no_challenger_and_cooperative_is_lambda_zero():
    draft = role([0, 1], [GOOD, GOOD])
    assert CorrectnessReward()(Outcomes(draft)).challenge is None
    outcomes = Outcomes(draft, role([1, 0], [BAD, GOOD], [3, 30]))
    assert torch.equal(
        CorrectnessReward()(outcomes).challenge,
        CompetitiveReward(conversion_bonus=0.0, length_tiebreak=0.0)(outcomes).challenge,
    )


def test_the_challenger_is_graded_against_the_draft_it_was_paired_with():
    draft = role([0, 1], [GOOD, GOOD], [10, 10])
    challenge = role([1, 1], [GOOD, GOOD], [5, 5])
    reward = CompetitiveReward(length_tiebreak=0.25)
    shared = Outcomes(
        draft, challenge, opponent=draft.select(torch.tensor([1, 1]))
    )  # both answer the right draft
    assert reward(shared).challenge.tolist() == [2.75, 2.75]  # 2 + τ + 0.5 each
    assert reward(Outcomes(draft, challenge)).challenge.tolist() == [3.5, 2.75]  # row 0 converted its own


def test_a_shared_opponent_makes_the_bonus_group_constant_and_it_normalises_away():
    n, p = 4, 3
    rows = opponent_rows(p, n, "shared")
    assert rows.tolist() == [0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8]  # one draft per group
    draft = role([0, 1, 1, 0, 1, 0, 0, 1, 0, 0, 1, 1], [BAD] * (p * n))
    challenge = role([1, 1, 0, 0, 1, 1, 1, 0, 0, 1, 1, 1], [BAD] * (p * n))
    no_format = {"format": None, "format_weight": 0.0}
    shared = Outcomes(draft, challenge, opponent=draft.select(rows))
    terms = CompetitiveReward(**no_format)(shared).terms
    miss = (1 - shared.paired_draft.correct).view(p, n)
    assert (miss == miss[:, :1]).all()  # 1 − c(a) is constant in each group
    assert torch.equal(terms["challenge/competitive"], challenge.correct * (1 - shared.paired_draft.correct))

    def advantages(reward, outcomes):
        return group_advantages(reward(outcomes).challenge, n, True, eps=0.0)[0]

    cooperative = advantages(CorrectnessReward(**no_format), shared)
    for form in ("bonus", "margin"):
        torch.testing.assert_close(advantages(CompetitiveReward(form=form, **no_format), shared), cooperative)
    # Per-rollout opponents differ inside a group: the bonus changes the direction.
    per_rollout = Outcomes(draft, challenge)
    assert not torch.allclose(advantages(CompetitiveReward(**no_format), per_rollout), cooperative)


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"conversion_bonus": -1.0}, "conversion_bonus must be >= 0, got -1.0"),
        ({"length_tiebreak": -0.5}, "length_tiebreak must be >= 0"),
        ({"correctness_weight": -2.0}, "correctness_weight must be >= 0"),
        ({"format_weight": -0.5}, "format_weight must be >= 0"),
        ({"form": "ratio"}, "form must be one of .*'ratio'"),
        ({"format": None}, "format_weight=0.5 pays a format check, but format is null"),
    ],
)
def test_bad_options_are_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CompetitiveReward(**kwargs)


def test_an_outcome_needs_one_text_per_rollout():
    with pytest.raises(ValueError, match="got 2, 2 and 1"):
        role([0, 1], [GOOD])


PAPER_WEIGHTS = {
    "correctness_weight": 2.0,
    "conversion_bonus": 1.0,
    "length_tiebreak": 0.0,
    "format_weight": 0.5,
}
ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("config", ["agon.yaml", "deepmath_qwen3_0.6b.yaml", "codecontests_qwen3.yaml"])
def test_the_class_and_every_shipped_config_take_the_papers_weights(config):
    reward = CompetitiveReward()
    assert {k: getattr(reward, k) for k in PAPER_WEIGHTS} == PAPER_WEIGHTS and reward.form == "bonus"
    block = yaml.safe_load((ROOT / "configs" / config).read_text())["model"]["reward"]
    assert block["class_path"] == "agon_lightning.game.rewards.CompetitiveReward"
    assert {k: block["init_args"][k] for k in PAPER_WEIGHTS} == PAPER_WEIGHTS
    assert block["init_args"]["format"]["class_path"] == "agon_lightning.game.formats.ThinkAnswerFormat"


def test_the_graded_reward_pays_the_functions_sum_and_the_bonus_on_c():
    from agon_lightning.game.rewards import GradedReward, Outcomes, RoleOutcome

    nan = float("nan")
    draft = RoleOutcome(torch.tensor([1.0, 0.0, 0.0]), torch.tensor([5, 5, 5]), ["a", "b", "c"],
                        torch.tensor([1.5, 0.25, nan]))  # fmt: skip
    challenge = RoleOutcome(torch.tensor([1.0, 1.0, 0.0]), torch.tensor([3, 9, 9]), ["x", "y", "z"],
                            torch.tensor([1.2, 1.0, -0.5]))  # fmt: skip
    rewards = GradedReward(conversion_bonus=0.5, length_tiebreak=0.1)(Outcomes(draft, challenge))
    assert rewards.draft.tolist() == [1.5, 0.25, 0.0]  # R(a); no function applied: 0
    # R(b) + 0.5·c(b)(1−c(a)) + 0.1·[both right, b shorter]
    assert torch.allclose(rewards.challenge, torch.tensor([1.2 + 0.1, 1.0 + 0.5, -0.5]))
    # without graded values R is c
    plain = RoleOutcome(torch.tensor([1.0, 0.0]), torch.tensor([1, 1]), ["a", "b"])
    assert GradedReward()(Outcomes(plain)).draft.tolist() == [1.0, 0.0]
