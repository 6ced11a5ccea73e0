"""A checkpoint whose adapter tensors do not fit this run: say which option changed.

Resuming with other options than the run was saved with (``--model.lora.r 8`` where it trained
with 16) makes every adapter tensor the wrong shape, and torch's answer is one "size mismatch"
line per tensor — a hundred lines that never name the option. The checkpoint keeps the options
it was saved with (``hyper_parameters``); :func:`check_saved_shapes` compares its tensors' shapes
with the model's before anything is copied and, where they differ, names the options that differ,
those that shape the adapters first, and one tensor with both shapes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from agon_lightning.infra.errors import UsageError

# The options that set an adapter tensor's shape: the base model's sizes and LoRA's rank and targets.
SHAPING = ("model_name_or_path", "lora.r", "lora.target_modules")
MAX_NAMED = 4


class CheckpointMismatch(UsageError):
    """A checkpoint saved with options that give its tensors other shapes than this run's."""

    refused = True  # refused before it trained: RunOutputs lists nothing as this run's


def flat_options(options: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"lora.r": 16, ...}``: nested dicts and dataclasses written out as dotted names."""
    flat: dict[str, Any] = {}
    for key, value in options.items():
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            value = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
        if isinstance(value, Mapping):
            flat.update(flat_options(value, f"{prefix}{key}."))
        elif not str(key).startswith("_"):
            flat[f"{prefix}{key}"] = value
    return flat


def changed_options(saved: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """``model.NAME: SAVED in the checkpoint, NOW now`` for each option that differs, shaping ones first."""
    before, after = flat_options(saved), flat_options(now)
    differ = [k for k in after if k in before and _plain(before[k]) != _plain(after[k])]
    shaping = [k for k in differ if k in SHAPING]
    return [
        f"model.{k}: {before[k]!r} in the checkpoint, {after[k]!r} now"
        for k in (shaping or differ)[:MAX_NAMED]
    ]


def _plain(value: Any) -> Any:
    """Lists and tuples compare alike (a YAML list against a tuple default)."""
    return list(value) if isinstance(value, tuple) else value


def check_saved_shapes(
    shapes: Mapping[str, tuple[int, ...]],
    state: Mapping[str, Any],
    saved_options: Mapping[str, Any] | None,
    options: Mapping[str, Any],
    where: str = "the checkpoint",
) -> None:
    """Raise when a tensor in ``state`` has another shape than the model's of the same name.

    Args:
        shapes: The model's parameter shapes, by state-dict name.
        state: The checkpoint's ``state_dict``.
        saved_options: The checkpoint's ``hyper_parameters`` (``None``: not kept).
        options: This run's (the module's ``hparams``).
        where: The checkpoint, as the message names it.

    Raises:
        CheckpointMismatch: naming the options that differ (else none), and one tensor with both shapes.
    """
    wrong = [
        (name, tuple(tensor.shape), shapes[name])
        for name, tensor in state.items()
        if name in shapes and hasattr(tensor, "shape") and tuple(tensor.shape) != tuple(shapes[name])
    ]
    if not wrong:
        return
    name, saved_shape, shape = wrong[0]
    changed = changed_options(saved_options or {}, options)
    cause = "; ".join(changed) if changed else "no saved option differs (was the base model replaced?)"
    raise CheckpointMismatch(
        f"{where} does not fit this run: {cause}; resume with the options it was saved with, or start a new "
        f"run in another --trainer.default_root_dir ({len(wrong)} tensors differ, e.g. {name}: "
        f"{list(saved_shape)} in the checkpoint, {list(shape)} now)"
    )
