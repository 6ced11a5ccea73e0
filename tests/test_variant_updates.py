"""Every shipped variant trains as it did before the game became a component.

The fixture holds, for each variant's 3-step fit (tests/variant_fits.py), each LoRA tensor's sum,
absolute sum and sum of squares, written from the module at commit 9959f8d, the last before
``model.game`` took a Game (``scripts/adapter_fingerprint.py`` compared that commit's adapters
with the Game's: bit-identical for all eleven). A change to any variant's update, from the
rewards, the pairing, the summary it reads or the schedule, moves these sums.

In this setting two rows cannot be told from another row at the fixture's tolerance, so they pin
a shared path rather than their own term: ``tiebreak`` ends bit-identical to ``agon`` (its term
never fires here), and ``shared_opponent`` within 1e-9 of ``no_exchange``. tests/test_rewards.py
and tests/test_pairing.py check those terms by hand.

The sums are held to 1e-5 (relative; the signed sum relative to the absolute sum, since a signed
sum can nearly cancel): thread counts and CPUs change the last bits, not that. On an Intel Xeon with
AMX one signed sum of ``margin`` moved by 4.9e-5 of itself, 4.7e-7 of its absolute sum, from the AMD
EPYC the fixture was written on. A new
torch may move them further; then write the fixture again from the commit before the upgrade
(the script saves the tensors; the fixture is their three sums per tensor), never from a commit
that changes training.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from variant_fits import NAMES, fit_variant

FIXTURE = json.loads((Path(__file__).parent / "fixtures" / "variant_updates.json").read_text())


def test_the_fixture_covers_every_variant_fitted():
    assert sorted(FIXTURE["variants"]) == sorted(NAMES)


@pytest.mark.parametrize("variant", NAMES)
def test_each_variant_updates_the_adapters_as_before(variant, tiny_model_dir, tmp_path):
    tensors = fit_variant(tiny_model_dir, variant, tmp_path)
    expected = FIXTURE["variants"][variant]
    assert sorted(tensors) == sorted(expected)
    for name, (total, absolute, squares) in expected.items():
        t = tensors[name].double()
        got = (float(t.sum()), float(t.abs().sum()), float(t.pow(2).sum()))
        # A signed sum can nearly cancel (0.0092 against an absolute sum of 0.97), so its last-bit changes are
        # measured against the absolute sum, the scale it is summed at; the other two cannot cancel.
        assert abs(got[0] - total) <= 1e-5 * absolute + 1e-8, (name, got[0], total)
        assert got[1:] == pytest.approx((absolute, squares), rel=1e-5, abs=1e-8), name
