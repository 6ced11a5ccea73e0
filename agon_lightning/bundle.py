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
renamed into place, so an interrupted save never leaves a half-written bundle.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import tempfile
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

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


def bundle_metadata(module: Any, drafter: str = "alpha") -> dict[str, Any]:
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
    }


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


def save_bundle(module: Any, path: str | Path, drafter: str = "alpha") -> Path:
    """Write both adapters and ``agon.json`` to ``path`` atomically."""
    meta = bundle_metadata(module, drafter)

    def write(tmp: Path) -> None:
        module.policy.save_pretrained(str(tmp), selected_adapters=list(module.adapter_names))
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
