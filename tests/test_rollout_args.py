"""Every rollout backend refuses the same bad arguments with the same message."""

from __future__ import annotations

import pytest

from agon_lightning.rollout.base import check_generate_args


def test_generate_needs_prompts_and_one_adapter_name_per_prompt():
    check_generate_args(["a", "b"], None)
    check_generate_args(["a", "b"], ["alpha", None])
    with pytest.raises(ValueError, match="at least one prompt"):
        check_generate_args([], None)
    with pytest.raises(ValueError, match="one name per prompt: 1 for 2"):
        check_generate_args(["a", "b"], ["alpha"])


def test_each_row_gets_its_adapter_and_an_unknown_one_is_named(monkeypatch):
    from agon_lightning.rollout import base

    # Names given: as is, PEFT's base name read as adapters off.
    assert base.row_adapters(None, ["a", "b"], ["alpha", "__base__"], {"alpha"}, "here") == ["alpha", None]
    with pytest.raises(
        ValueError, match=r"no adapter \['gamma'\] on the servers; held there: \['alpha', 'beta'\]"
    ):
        base.row_adapters(None, ["a"], ["gamma"], {"alpha", "beta"}, "on the servers")
    # No names: the model's active adapter on every row.
    monkeypatch.setattr(base, "active_adapter", lambda model: "beta")
    assert base.row_adapters(object(), ["a", "b"], None, {"alpha", "beta"}, "here") == ["beta", "beta"]
