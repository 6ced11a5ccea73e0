import itertools

import pytest
import torch

from agon_lightning.rewards import CompetitiveReward, CorrectnessReward


@pytest.mark.parametrize("a,b,shorter", list(itertools.product([0, 1], [0, 1], [False, True])))
def test_competitive_truth_table(a, b, shorter):
    lam, tau = 1.0, 0.25
    draft_len = torch.tensor([10.0])
    chall_len = torch.tensor([5.0 if shorter else 15.0])
    out = CompetitiveReward(conversion_bonus=lam, length_tiebreak=tau)(
        torch.tensor([float(a)]), torch.tensor([float(b)]), draft_len, chall_len
    )
    expected = b + lam * b * (1 - a) + tau * (a and b and shorter)
    assert out.draft.item() == a
    assert out.challenge.item() == pytest.approx(expected)


def test_conversion_bonus_scales_and_equal_lengths_get_no_tiebreak():
    r = CompetitiveReward(conversion_bonus=2.0, length_tiebreak=1.0)
    out = r(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]), torch.tensor([4, 4]), torch.tensor([4, 4]))
    assert out.challenge.tolist() == [3.0, 1.0]


def test_correctness_reward_is_plain_correctness():
    out = CorrectnessReward()(torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0]))
    assert out.draft.tolist() == [0.0, 1.0] and out.challenge.tolist() == [1.0, 0.0]
    assert CorrectnessReward()(torch.tensor([1.0])).challenge is None


@pytest.mark.parametrize(
    "kwargs,name",
    [({"conversion_bonus": -1.0}, "conversion_bonus"), ({"length_tiebreak": -0.5}, "length_tiebreak")],
)
def test_negative_coefficients_are_rejected(kwargs, name):
    with pytest.raises(ValueError, match=name):
        CompetitiveReward(**kwargs)
