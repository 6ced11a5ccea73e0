"""The adapter bundle: every adapter of the run in PEFT's own layout plus a small ``agon.json``.

::

    bundle/
      alpha/adapter_config.json  alpha/adapter_model.safetensors
      beta/adapter_config.json   beta/adapter_model.safetensors   # one folder per adapter, whatever its name
      agon.json                  # base model, the game and how it deploys, summarizer, prompts, generation

Each adapter directory loads with plain ``peft.PeftModel.from_pretrained(base, "bundle/alpha")``.
Components are recorded as ``{"class_path", "init_args"}`` from their public attributes (our
components keep each constructor argument as a same-named attribute), so a bundle rebuilds
the exact pipeline it was trained with. ``agon.json`` records the deployed policy as the run fixed
it (:class:`~agon_lightning.training.deployment.Deployment`): ``deploy`` (``cascade``, ``single`` or
``graph``), ``drafter`` and ``answerer``, and the game (its class path and constructor arguments) whose
answer graph a ``graph`` bundle runs. A bundle written before these were recorded has two adapters (or
one) and no ``deploy``: it is the Agon cascade, ``drafter`` drafting and the other adapter answering. Writes go to a temporary sibling directory that is
renamed into place, so an interrupted save never leaves a half-written bundle. Loading checks
each adapter against the bundle (listed, has weights, trained on this base) before attaching
it with the same :func:`~agon_lightning.adapters.policy.attach_adapters` that builds a training run.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, is_dataclass
from pathlib import Path
from typing import Any

from safetensors import SafetensorError

from agon_lightning.adapters.policy import LoraOptions, attach_adapters, load_base
from agon_lightning.adapters.weights_files import ADAPTER_WEIGHTS, weights_file, weights_problem
from agon_lightning.game.names import SHIPPED as EMBEDDED_PREFIX  # agon:NAME, a shipped model
from agon_lightning.infra.errors import CommandParser, UsageError
from agon_lightning.training.deployment import Deployment

BUNDLE_FILE = "agon.json"
FORMAT_VERSION = 1


def component_spec(obj: Any) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` for a component, from its public attributes."""
    lazy_type = getattr(obj, "_lazy_class_type", None)  # a jsonargparse lazy_instance default
    if lazy_type is not None:
        obj = lazy_type(**obj._lazy_kwargs)
    cls = type(obj)
    args = {k: v for k, v in vars(obj).items() if not k.startswith("_") and not callable(v)}
    return {"class_path": class_path(cls), "init_args": as_json(args)}


def class_path(cls: type) -> str:
    """The dotted path that imports ``cls``."""
    return f"{cls.__module__}.{cls.__qualname__}"


def as_json(args: Mapping[str, Any]) -> dict[str, Any]:
    """``args`` as JSON keeps them (a value JSON cannot hold, as its ``str``)."""
    return json.loads(json.dumps(dict(args), default=str))


def build_component(spec: dict[str, Any]) -> Any:
    """Instantiate a component from :func:`component_spec`'s output."""
    module_name, _, name = spec["class_path"].rpartition(".")
    try:
        cls = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as err:
        raise ImportError(f"cannot import component {spec['class_path']!r}: {err}") from err
    return cls(**spec.get("init_args", {}))


def game_spec(module: Any) -> dict[str, Any]:
    """``{"class_path", "init_args"}`` of the module's game, for a bundle to rebuild it.

    As the config gave it where LightningCLI kept it (``hparams["game"]``: ``class_path`` and
    ``init_args``); else the game's constructor arguments, read back from the same-named attributes
    our components keep (an argument without one is left out, and takes its default when rebuilt).
    """
    given = getattr(module, "hparams", {}).get("game")
    if isinstance(given, Mapping) and "class_path" in given:
        return {"class_path": given["class_path"], "init_args": as_json(given.get("init_args") or {})}
    game = module.game
    params = list(inspect.signature(type(game).__init__).parameters)[1:]  # after self
    return {
        "class_path": class_path(type(game)),
        "init_args": as_json({name: getattr(game, name) for name in params if hasattr(game, name)}),
    }


def bundle_metadata(module: Any, drafter: str | None = None) -> dict[str, Any]:
    """``agon.json`` for an :class:`AgonModule`: its deployed policy (``module.evaluator.deployment``),
    with ``drafter`` drafting instead when given (:meth:`~agon_lightning.training.deployment.Deployment.drafting`).

    Raises:
        ValueError: ``drafter`` is not one of the module's adapters, or the game deploys as a graph.
    """
    deployment: Deployment = module.evaluator.deployment
    if drafter is not None:
        deployment = deployment.drafting(drafter, tuple(module.adapter_names))
    prompts = module.prompts
    return {
        "format_version": FORMAT_VERSION,
        "base_model": module.model_name_or_path,
        "dtype": module.dtype_name,
        "adapters": list(module.adapter_names),
        "deploy": deployment.kind,
        "drafter": deployment.drafter,
        "answerer": deployment.answerer,
        "game": game_spec(module),
        "step": module.agon_step,
        "summarizer": component_spec(module.summarizer),
        "verifier": component_spec(module.verifier),
        "rollout": component_spec(module.rollout),
        "prompts": asdict(prompts) if is_dataclass(prompts) else dict(vars(prompts)),
        "system_messages": training_system_messages(module),
    }


def bundle_deployment(meta: dict[str, Any]) -> Deployment:
    """The deployed policy ``agon.json`` records; a bundle written before it was recorded (no ``deploy``)
    is the Agon cascade: ``drafter`` drafts, the other adapter (itself alone) answers.

    Raises:
        ValueError: a record that names no usable deployment (naming it).
    """
    kind, drafter = meta.get("deploy", "cascade"), meta.get("drafter")
    answerer = meta.get("answerer")
    if kind == "cascade" and answerer is None and drafter in meta.get("adapters", []):
        answerer = next((a for a in meta["adapters"] if a != drafter), drafter)
    try:
        return Deployment(kind, drafter, answerer)
    except ValueError as err:
        raise ValueError(f"agon.json does not say how the bundle deploys: {err}") from err


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
    module: Any, path: str | Path, drafter: str | None = None, state_dict: dict[str, Any] | None = None
) -> Path:
    """Write every adapter of the module and ``agon.json`` to ``path`` atomically.

    Args:
        drafter: The adapter that drafts in the bundle's deployment (``None``: the run's deployed policy's;
            see :func:`bundle_metadata`).
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
    parser.add_argument("--bundle", required=True, help="bundle directory (a folder per adapter, agon.json)")
    parser.add_argument("--base-model", default=None, help="load the base from here instead of agon.json's")
    parser.add_argument("--dtype", default=None, choices=["float32", "bfloat16", "float16"])
    return parser
