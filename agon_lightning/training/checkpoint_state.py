"""What a game run saves beside its adapters, and the checks before a checkpoint loads.

Checkpoints hold the adapters only (the base is frozen and reloads from ``model_name_or_path``),
chosen by name, and under ``agon`` the step, the evaluation history, the skip counters, the
policy version, the game's state and each feature's (the adapters' past versions, the league's
record, the drafts dropped).
"""

from __future__ import annotations

from typing import Any

from agon_lightning.adapters.snapshots import check_adapter_state
from agon_lightning.strategies.gather import of_adapter
from agon_lightning.training.resume_check import check_saved_shapes


def adapter_state_keys(adapter_names: tuple[str, ...], keys: Any) -> dict[str, list[str]]:
    """The state-dict keys among ``keys`` that hold each adapter's weights, by adapter name."""
    return {name: [k for k in keys if of_adapter(k, name)] for name in adapter_names}


def save_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """Keep only the adapters in ``checkpoint`` and add the run's ``agon`` state.

    Raises:
        RuntimeError: an adapter has no tensors (a checkpoint without it would restore as nothing).
    """
    state = checkpoint["state_dict"]
    by_adapter = adapter_state_keys(module.adapter_names, state)
    empty = [name for name, keys in by_adapter.items() if not keys]
    # Under a one-file format of a sharded strategy only rank 0 holds the tensors it writes.
    if empty and (state or module.global_rank == 0):
        raise RuntimeError(f"refusing to write a checkpoint without adapter(s) {empty}: no tensors found")
    checkpoint["state_dict"] = {k: state[k] for keys in by_adapter.values() for k in keys}
    checkpoint["agon"] = {
        "step": module.agon_step,
        "history": module.evaluator.history,
        "adapters": {name: len(keys) for name, keys in by_adapter.items()},
        "skipped_steps": module.skipped_steps,
        "skips_in_a_row": module.skips_in_a_row,
        "policy_version": module.policy_version,
        "game": module.game.state_dict(),
        **module.features.state_dict(),
    }


def load_state(module: Any, checkpoint: dict[str, Any]) -> None:
    """Check the checkpoint's adapters against the run's, then restore the ``agon`` state."""
    state = checkpoint.get("agon", {})
    # Once configure_model has run, the adapters the checkpoint must hold are known. (DeepSpeed
    # keeps module weights in its own files: there is no "state_dict" here to check.)
    if module.policy is not None and "state_dict" in checkpoint:
        shapes = {n: tuple(p.shape) for n, p in module.named_parameters()}
        check_adapter_state(
            adapter_state_keys(module.adapter_names, list(shapes)), checkpoint["state_dict"], state
        )
        # another lora.r (or base) names the option, not a hundred torch "size mismatch" lines
        check_saved_shapes(
            shapes, checkpoint["state_dict"], checkpoint.get("hyper_parameters"), module.hparams
        )
    module.agon_step = int(state.get("step", 0))
    module.evaluator.history = list(state.get("history", []))
    module.skipped_steps = int(state.get("skipped_steps", 0))
    module.skips_in_a_row = int(state.get("skips_in_a_row", 0))
    module.policy_version = int(state.get("policy_version", module.agon_step - module.skipped_steps))
    module.game.load_state_dict(state.get("game") or {})
    for feature in module.features:
        feature.load_state_dict(state)
