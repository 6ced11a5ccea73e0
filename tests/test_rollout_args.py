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
