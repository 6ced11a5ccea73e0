"""Who drafts and who challenges at each step: a pure function of the step index.

``rotate`` swaps roles every step, so both adapters learn both roles against a rival that
keeps improving; ``fixed`` is the paper's fixed-roles ablation (alpha always drafts);
``self_play`` has one adapter play both roles (an ablation beyond the paper).
"""

from __future__ import annotations

from typing import Literal

Schedule = Literal["rotate", "fixed", "self_play"]
SCHEDULES: tuple[str, ...] = ("rotate", "fixed", "self_play")


def roles_for_step(step: int, schedule: str = "rotate") -> tuple[str, str]:
    """``(drafter, challenger)`` adapter names for training step ``step`` (0-based)."""
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    if schedule == "rotate":
        return ("alpha", "beta") if step % 2 == 0 else ("beta", "alpha")
    if schedule == "fixed":
        return "alpha", "beta"
    if schedule == "self_play":
        return "alpha", "alpha"
    raise ValueError(f"unknown role schedule {schedule!r}; expected one of {SCHEDULES}")


def adapters_for(schedule: str, game: str) -> tuple[str, ...]:
    """The adapters a run needs: one for GRPO and self-play, two otherwise."""
    if game == "grpo" or schedule == "self_play":
        return ("alpha",)
    return ("alpha", "beta")
