"""The Python API: a shipped config (or your own) as objects, with your data and rewards plugged in.

``agon fit --config ...`` reads a YAML file and command-line overrides; a script wants the same
run built from objects it already holds: a ``datasets.Dataset``, reward functions defined a few
lines above. :func:`from_config` parses the config exactly as ``agon fit`` does — the same
parser, checks, callbacks and loggers — then puts the given objects in place of the config's
components before anything is built, and hands back the three objects Lightning's idiom
expects::

    model, data, trainer = from_config("agon:agon.yaml", "--trainer.max_steps=20",
                                       train_dataset=dataset, reward_funcs=[accuracy, style])
    trainer.fit(model, datamodule=data)

Why through the CLI's parser rather than a second set of defaults: a script and ``agon fit``
then run the same configuration, and ``config.yaml`` in the run directory records it (an object
given here is written as its ``class_path`` and public attributes, as a bundle records it).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import Namespace
from lightning.pytorch.cli import SaveConfigCallback

from agon_lightning.cli.config_files import expand_config_args
from agon_lightning.cli.game import AgonCLI
from agon_lightning.data.base import ProblemDataModule
from agon_lightning.deploy.bundle import component_spec
from agon_lightning.infra.errors import UsageError
from agon_lightning.training.module import AgonModule

RewardFunc = str | Callable[..., Any]
# TRL's argument names, as GRPOTrainer takes them; each becomes one of our components.
TRL_NAMES = ("train_dataset", "eval_dataset", "reward_funcs", "reward_weights")


def from_config(
    config: str | Path | Sequence[str | Path] = "agon:agon.yaml",
    *overrides: str,
    data: ProblemDataModule | None = None,
    train_dataset: Any = None,
    eval_dataset: Any = None,
    reward_funcs: RewardFunc | Sequence[RewardFunc] | None = None,
    reward_weights: Sequence[float] | None = None,
    **components: Any,
) -> tuple[AgonModule, ProblemDataModule, Any]:
    """``(model, datamodule, trainer)`` of ``agon fit --config CONFIG OVERRIDES``, with objects in place.

    Args:
        config: A config file, ``agon:NAME`` for a shipped one, or several (later ones override).
        overrides: Command-line overrides as ``agon fit`` takes them (``"--trainer.max_steps=20"``).
        data: A data module to train on instead of the config's.
        train_dataset: A ``datasets.Dataset`` (or ``DatasetDict``, ``IterableDataset``) in TRL's
            format, trained on through :class:`~agon_lightning.data.dataset.DatasetDataModule`
            with the config's batch sizes; not with ``data``.
        eval_dataset: Held-out problems for ``train_dataset`` (default: its ``validation`` or
            ``test`` split, else ``val_size`` rows split off; see ``DatasetDataModule``).
        reward_funcs: TRL reward functions (callables or import paths): the verifier becomes a
            :class:`~agon_lightning.verifiers.reward_function.RewardFunctionVerifier` over them and
            the reward a :class:`~agon_lightning.game.rewards.GradedReward` that pays their weighted sum.
        reward_weights: One weight per reward function (TRL's ``reward_weights``; default 1 each).
        components: Any other :class:`AgonModule` argument by name, as an object or a plain value
            (``verifier=MyVerifier()``, ``summarizer=...``, ``game="grpo"``).

    Raises:
        UsageError: an argument names no ``AgonModule`` option, or two arguments set one thing.
    """
    objects = _model_objects(components, reward_funcs, reward_weights)
    datamodule = _datamodule(data, train_dataset, eval_dataset)
    configs = [config] if isinstance(config, (str, Path)) else list(config)
    args = expand_config_args([a for c in configs for a in ("--config", str(c))] + list(overrides))
    cli = _PythonCLI(objects, datamodule, args=args, run=False, save_config_callback=_RecordedConfig)
    return cli.model, cli.datamodule, cli.trainer


def _model_objects(
    components: dict[str, Any], reward_funcs: Any, reward_weights: Sequence[float] | None
) -> dict[str, Any]:
    """``{"model.NAME": value}`` for every component given, the reward functions' pair included."""
    options = set(inspect.signature(AgonModule.__init__).parameters) - {"self"}
    unknown = sorted(set(components) - options)
    if unknown:
        raise UsageError(
            f"from_config: {', '.join(map(repr, unknown))} is no AgonModule option; options: "
            f"{', '.join(sorted(options))} (and {', '.join(TRL_NAMES)}, data)"
        )
    if reward_weights is not None and reward_funcs is None:
        raise UsageError(
            "from_config: reward_weights without reward_funcs; give both, as to TRL's GRPOTrainer"
        )
    if reward_funcs is not None:
        taken = sorted({"verifier", "reward"} & set(components))
        if taken:
            raise UsageError(
                f"from_config: reward_funcs builds the verifier and the reward; drop {' and '.join(taken)} "
                "or reward_funcs"
            )
        from agon_lightning.game.rewards import GradedReward
        from agon_lightning.verifiers.reward_function import RewardFunctionVerifier

        components = {
            **components,
            "verifier": RewardFunctionVerifier(reward_funcs=reward_funcs, reward_weights=reward_weights),
            # the config's λ, τ and form carry over, as when --model.reward=graded switches class
            "reward": _FromConfig(
                lambda config: GradedReward(**_init_args_for(GradedReward, config, "model.reward"))
            ),
        }
    return {f"model.{name}": value for name, value in components.items()}


def _datamodule(data: ProblemDataModule | None, train_dataset: Any, eval_dataset: Any) -> Any:
    """The data module given, or ``train_dataset``'s (built once the config's batch sizes are known)."""
    if data is not None and (train_dataset is not None or eval_dataset is not None):
        raise UsageError("from_config: give data or train_dataset (and eval_dataset), not both")
    if eval_dataset is not None and train_dataset is None:
        raise UsageError("from_config: eval_dataset without train_dataset")
    if data is not None and not isinstance(data, ProblemDataModule):
        raise UsageError(
            f"from_config: data must be a ProblemDataModule, got {type(data).__name__}; a datasets.Dataset "
            "goes in train_dataset"
        )
    if train_dataset is None:
        return data

    def build(batch_sizes: dict[str, Any]) -> ProblemDataModule:
        from agon_lightning.data.dataset import DatasetDataModule

        return DatasetDataModule(train_dataset, eval_dataset=eval_dataset, **batch_sizes)

    return build


class _PythonCLI(AgonCLI):
    """``AgonCLI`` that puts objects in place of parsed components before building anything."""

    def __init__(self, objects: dict[str, Any], data: Any, **kwargs: Any) -> None:
        self._objects = dict(objects)
        self._data = data
        super().__init__(**kwargs)

    def instantiate_classes(self) -> None:
        if isinstance(self._data, ProblemDataModule):
            self._objects["data"] = self._data
        elif self._data is not None:  # train_dataset: built with the config's batch sizes
            self._objects["data"] = self._data(_batch_sizes(self.config))
        for key, value in self._objects.items():
            self.config[key] = value.build(self.config) if isinstance(value, _FromConfig) else value
        self._objects = {key: self.config[key] for key in self._objects}
        super().instantiate_classes()
        # config.yaml in the run directory records each object as a bundle does: class_path + public attributes
        for key, spec in self._specs().items():
            self.config[key] = spec

    def _specs(self) -> dict[str, Namespace]:
        """``{config key: spec}`` (``class_path`` and public attributes) of each object given."""
        return {
            key: Namespace(**component_spec(value))
            for key, value in self._objects.items()
            if _is_component(value)
        }

    def _dump_config(self) -> None:
        # LightningCLI dumps the whole config to record the model's and the data module's
        # hyperparameters as it builds them. An object given here has no config form: jsonargparse
        # would warn "Unable to serialize instance" for each and record that sentence. The record
        # holds its spec instead, unvalidated, as config.yaml does (_RecordedConfig). This replaces
        # LightningCLI._dump_config (run=False: no subcommand); tests/faults/test_quiet_logs.py
        # fails if Lightning stops calling it (the warning comes back).
        if hasattr(self, "config_dump"):
            return
        specs = self._specs()
        objects = {key: self.config[key] for key in specs}
        for key, spec in specs.items():
            self.config[key] = spec
        try:
            text = self.parser.dump(
                self.config, skip_link_targets=False, skip_none=False, skip_validation=True, format="yaml"
            )
        finally:
            for key, value in objects.items():
                self.config[key] = value
        self.config_dump = yaml.safe_load(text)


class _RecordedConfig(SaveConfigCallback):
    """``config.yaml`` in the run directory, with each object written as its ``class_path`` and attributes.

    Lightning's callback validates the config before writing it, which a component written as a
    spec (a reward function's path, a dataset's repr) cannot pass; the spec is a record, not an input.
    """

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        log_dir = trainer.log_dir  # a broadcast: on every rank
        if trainer.is_global_zero:
            Path(log_dir).mkdir(parents=True, exist_ok=True)
            text = self.parser.dump(self.config, skip_validation=True)
            (Path(log_dir) / self.config_filename).write_text(text)
        self.already_saved = True


class _FromConfig:
    """An object built once the config is parsed, from what it says (``build(config)``)."""

    def __init__(self, build: Callable[[Namespace], Any]) -> None:
        self.build = build


def _init_args_for(cls: type, config: Namespace, key: str) -> dict[str, Any]:
    """The config's ``KEY.init_args`` that ``cls`` accepts (what jsonargparse keeps on a switch of class)."""
    init = config.get(f"{key}.init_args") or Namespace()
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    return {k: v for k, v in vars(init).items() if k in accepted}


def _batch_sizes(config: Namespace) -> dict[str, Any]:
    """The config's data batch sizes (``batch_size``, ``val_batch_size``), where it sets them."""
    init = config.get("data.init_args") or Namespace()
    return {k: init[k] for k in ("batch_size", "val_batch_size") if k in init and init[k] is not None}


def _is_component(value: Any) -> bool:
    return not isinstance(value, (str, int, float, bool, list, dict, tuple, type(None)))
