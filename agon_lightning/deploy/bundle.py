"""The adapter bundle: both adapters in PEFT's own layout plus a small ``agon.json``.

::

    bundle/
      alpha/adapter_config.json  alpha/adapter_model.safetensors
      beta/adapter_config.json   beta/adapter_model.safetensors
      agon.json                  # base model, who drafts, summarizer, prompts, generation

Each adapter directory loads with plain ``peft.PeftModel.from_pretrained(base, "bundle/alpha")``.
Components are recorded as ``{"class_path", "init_args"}`` from their public attributes (our
components keep each constructor argument as a same-named attribute), so a bundle rebuilds
the exact pipeline it was trained with. Writes go to a temporary sibling directory that is
renamed into place, so an interrupted save never leaves a half-written bundle. Loading checks
each adapter against the bundle (listed, has weights, trained on this base) before attaching
it with the same :func:`~agon_lightning.adapters.policy.attach_adapters` that builds a training run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from agon_lightning.adapters.policy import LoraOptions, attach_adapters, load_base
from agon_lightning.adapters.weights_files import ADAPTER_WEIGHTS, weights_file, weights_problem
from agon_lightning.game.names import ALPHA
from agon_lightning.game.names import SHIPPED as EMBEDDED_PREFIX  # agon:NAME, a shipped model
from agon_lightning.infra.errors import CommandParser, UsageError

BUNDLE_FILE = "agon.json"
FORMAT_VERSION = 1


def component_spec(obj: Any) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` for a component, from its public attributes."""
    lazy_type = getattr(obj, "_lazy_class_type", None)  # a jsonargparse lazy_instance default
    if lazy_type is not None:
        obj = lazy_type(**obj._lazy_kwargs)
    cls = type(obj)
    args = {k: v for k, v in vars(obj).items() if not k.startswith("_") and not callable(v)}
    return {
        "class_path": f"{cls.__module__}.{cls.__qualname__}",
        "init_args": json.loads(json.dumps(args, default=str)),
    }


def build_component(spec: dict[str, Any]) -> Any:
    """Instantiate a component from :func:`component_spec`'s output."""
    module_name, _, name = spec["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"cannot import component {spec['class_path']!r}: {err}") from err
    return cls(**spec.get("init_args", {}))


def bundle_metadata(module: Any, drafter: str = ALPHA) -> dict[str, Any]:
    """``agon.json`` for an :class:`AgonModule`."""
    if drafter not in module.adapter_names:
        raise ValueError(f"drafter must be one of {module.adapter_names}, got {drafter!r}")
    prompts = module.prompts
    return {
        "format_version": FORMAT_VERSION,
        "base_model": module.model_name_or_path,
        "dtype": module.dtype_name,
        "adapters": list(module.adapter_names),
        "drafter": drafter,
        "step": module.agon_step,
        "summarizer": component_spec(module.summarizer),
        "verifier": component_spec(module.verifier),
        "rollout": component_spec(module.rollout),
        "prompts": asdict(prompts) if is_dataclass(prompts) else dict(vars(prompts)),
        "system_messages": training_system_messages(module),
    }


def training_system_messages(module: Any) -> str | None:
    """How training showed the model system messages, for ``agon serve`` to do the same.

    ``per_row``: training problems carried their own (chat messages with a system message);
    ``template``: only ``prompts.system``; ``none``: none. ``None`` when the training problems are
    not at hand (a module saved outside a run): unknown, as in bundles written before this was recorded.
    """
    try:
        data = module.trainer.datamodule
    except (RuntimeError, AttributeError):  # not attached to a Trainer
        return None
    problems = getattr(data, "train_problems", None)
    if problems is None:
        return None
    if any(m.get("role") == "system" for p in problems for m in p.messages or ()):
        return "per_row"
    return "template" if module.prompts.system else "none"


def atomic_directory(target: Path, write: Any) -> Path:
    """Run ``write(tmp_dir)`` then rename ``tmp_dir`` onto ``target`` (replacing it)."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        if target.exists():
            old = target.with_name(f".{target.name}.old-{os.getpid()}")
            os.replace(target, old)
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return target


def save_bundle(
    module: Any, path: str | Path, drafter: str = ALPHA, state_dict: dict[str, Any] | None = None
) -> Path:
    """Write both adapters and ``agon.json`` to ``path`` atomically.

    Args:
        state_dict: The policy's adapter weights, whole (``None``: read from the policy). Under a
            sharded strategy every rank gathers them first (:func:`agon_lightning.strategies.full_tensors`).
    """
    meta = bundle_metadata(module, drafter)
    extra = {} if state_dict is None else {"state_dict": state_dict}

    def write(tmp: Path) -> None:
        module.policy.save_pretrained(str(tmp), selected_adapters=list(module.adapter_names), **extra)
        (tmp / BUNDLE_FILE).write_text(json.dumps(meta, indent=2))

    return atomic_directory(Path(path), write)


def read_bundle(path: str | Path) -> dict[str, Any]:
    """``agon.json`` of a bundle, checked for the adapters it names."""
    path = Path(path)
    meta_file = path / BUNDLE_FILE
    if not meta_file.is_file():
        raise FileNotFoundError(f"{path} is not an agon bundle: {BUNDLE_FILE} is missing")
    try:
        meta = json.loads(meta_file.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(f"{meta_file} is not valid JSON: {err}") from err
    for name in meta.get("adapters", []):
        if not (path / name / "adapter_config.json").is_file():
            raise FileNotFoundError(
                f"bundle {path} names adapter {name!r} but {path / name}/adapter_config.json is missing"
            )
    return meta


def canonical_base(name: str) -> str:
    """A base model name comparable across machines: a shipped model's path becomes ``agon:NAME``."""
    path = Path(name)
    if path.parent.name == "assets" and path.parent.parent.name == "agon_lightning":
        return EMBEDDED_PREFIX + path.name
    if not name.startswith(EMBEDDED_PREFIX) and path.exists():
        return str(path.resolve())
    return name.rstrip("/")


class DamagedBundle(UsageError):
    """A bundle file that cannot be read (truncated, or not the format its name says)."""


def damaged(path: Path, weights: Path, problem: str) -> DamagedBundle:
    """The error for an unreadable ``weights`` file of bundle ``path``: names the file and what to do."""
    return DamagedBundle(
        f"cannot read {weights} ({problem}: truncated or garbled); bundle {path} is damaged: use another "
        "bundle, e.g. the one beside another checkpoint of the run (NAME/ beside each NAME.ckpt)"
    )


def check_adapters(path: Path, meta: dict[str, Any], names: Sequence[str]) -> None:
    """Each adapter in ``names`` is in the bundle, has readable weights, and was trained on its base.

    Raises:
        ValueError: an adapter the bundle does not list, or one trained on another base.
        FileNotFoundError: an adapter without its weights file.
        DamagedBundle: a weights file that cannot be read, named.
    """
    listed = meta.get("adapters", [])
    for name in names:
        if name not in listed:
            raise ValueError(f"bundle {path} holds adapters {listed}, not {name!r}")
        adapter_dir = path / name
        weights = weights_file(adapter_dir)
        if weights is None:
            raise FileNotFoundError(
                f"adapter {name!r} has no weights: {adapter_dir / ADAPTER_WEIGHTS[0]} is missing"
            )
        if (problem := weights_problem(weights)) is not None:
            raise damaged(path, weights, problem)
        config_file = adapter_dir / "adapter_config.json"
        try:
            trained_on = json.loads(config_file.read_text()).get("base_model_name_or_path")
        except json.JSONDecodeError as err:
            raise ValueError(f"{config_file} is not valid JSON: {err}") from err
        if trained_on and canonical_base(trained_on) != canonical_base(meta["base_model"]):
            raise ValueError(
                f"{config_file} says the adapter was trained on {trained_on!r}, but {path / 'agon.json'} "
                f"names base_model {meta['base_model']!r}; the adapter does not belong to this bundle"
            )


def load_adapters(
    path: str | Path,
    meta: dict[str, Any],
    names: Sequence[str],
    base_model: str | None = None,
    dtype: str | None = None,
) -> tuple[Any, Any]:
    """``(PeftModel with the named adapters, tokenizer)`` from a bundle, in eval mode.

    Args:
        path: The bundle directory.
        meta: Its ``agon.json`` (:func:`~agon_lightning.deploy.bundle.read_bundle`).
        names: Adapters to attach.
        base_model: Load the base from here instead of ``agon.json``'s ``base_model`` (a
            local copy of the same model).
        dtype: ``float32`` | ``bfloat16`` | ``float16`` (default: the bundle's).
    """
    path = Path(path)
    check_adapters(path, meta, names)
    base_name = base_model or meta["base_model"]
    base, tokenizer = load_base(base_name, dtype or meta.get("dtype", "float32"))
    try:
        policy = attach_adapters(base, tuple(names), LoraOptions(init_from=str(path)))
    except (SafetensorError, OSError) as err:  # a file that changed since check_adapters read its header
        raise DamagedBundle(
            f"cannot read the adapters {list(names)} in {path}: {err}; use another bundle"
        ) from err
    except (RuntimeError, ValueError, KeyError) as err:  # size mismatches, target modules not found
        raise ValueError(
            f"the adapters {list(names)} in {path} do not fit base model {base_name!r}: {err}"
        ) from err
    policy.eval()
    return policy, tokenizer


def bundle_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The parser of a command that loads a bundle: ``--bundle``, ``--base-model`` and ``--dtype``."""
    parser = CommandParser(prog=prog, description=description)
    parser.add_argument("--bundle", required=True, help="bundle directory (alpha/, beta/, agon.json)")
    parser.add_argument("--base-model", default=None, help="load the base from here instead of agon.json's")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    return parser
