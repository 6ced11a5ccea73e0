"""What every LightningCLI-based ``agon`` command shares: its parser, ``--threads``, and its errors.

LightningCLI reports a bad value in one of two ways, and neither reads well from a shell:
jsonargparse prints the whole usage (hundreds of lines) above its message, and a value a
component's constructor rejects surfaces as a traceback, sometimes wrapped in a dump of
every Union member it tried. Here both become one line that names the option:

* parse errors go through :meth:`AgonArgumentParser.error` (an unknown component name lists
  the registered ones, an unknown option suggests the closest, a missing ``--config`` says
  where the shipped ones are);
* a ``ValueError`` raised while building a component becomes a :class:`UsageError` naming the
  option jsonargparse was building (``--model.reward``) and the component's own message.

Abbreviated options are off: ``--model.grpo.num_generation`` is an error, not a guess.
"""

from __future__ import annotations

import difflib
import re
import traceback
import warnings
from typing import Any, NoReturn

import torch
from jsonargparse import Namespace
from lightning.fabric.utilities.exceptions import MisconfigurationException
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI

from agon_lightning.cli.origins import data_origins
from agon_lightning.cli.registry import (
    available_names,
    entry_point_paths,
    group_for_option,
    load_plugins,
    resolve_component_names,
)
from agon_lightning.infra.errors import UsageError, fail, is_verbose, one_line
from agon_lightning.infra.model_source import check_model_source
from agon_lightning.infra.quiet import quiet_dependency_noise
from agon_lightning.strategies import check_strategy_option

PARSER_KEY = re.compile(r'^Parser key "([^"]+)":\s*(.*)$', re.DOTALL)
IMPORT_PATH = re.compile(r"(?:dot import path string|class_path)[^:]*:\s*'?([\w.]+)")
REQUIRED_DATA = re.compile(r"arguments are required:.*?\b(?:(\w+)\.)?data\b")


def explain_parse_error(message: str, option_strings: list[str]) -> str:
    """jsonargparse's error ``message`` as one line that says what to change."""
    match = PARSER_KEY.match(message)
    if match:
        key, detail = match.groups()
        group = group_for_option(key.rsplit(".", 1)[-1])
        value = IMPORT_PATH.search(detail)
        if group is not None and value is not None:
            kind = group.rsplit(".", 1)[-1].rstrip("s")
            return (
                f"unknown {kind} {value.group(1)!r} for --{key}; available: {', '.join(available_names(group))} "
                f"(or by entry-point name: {', '.join(sorted(entry_point_paths(group)))}; registered under "
                f"the entry-point group {group}), or an importable class_path"
            )
        detail = re.sub(r"Expected a <class '(\w+)'>\. Got value: (.*)", r"expected \1, got '\2'", detail)
        return f"--{key}: {one_line(detail)}"
    required = REQUIRED_DATA.search(message)
    if required:
        command = f"agon {required.group(1) or 'fit'}"
        return (
            f"no data module given to `{command}`; start from a config: {command} --config configs/agon.yaml "
            f"(in a checkout) or {command} --config agon:agon.yaml (shipped with the package; `agon config` "
            "lists them)"
        )
    unknown = re.match(r"unrecognized arguments: (.*)", message, re.DOTALL)
    if unknown:
        given = [a.split("=", 1)[0] for a in unknown.group(1).split() if a.startswith("--")]
        close = [m for g in given for m in difflib.get_close_matches(g, option_strings, n=1, cutoff=0.8)]
        return one_line(message) + (f"; did you mean {' or '.join(close)}?" if close else "")
    return one_line(message)


def compact_usage(prog: str) -> str:
    """A usage line that fits a screen (argparse's own lists all ~100 options)."""
    return (
        f"{prog} [-h] [-c CONFIG ...] [--print_config] [--threads N] [--model.KEY VALUE ...] "
        "[--data.KEY VALUE ...] [--trainer.KEY VALUE ...]"
    )


class AgonArgumentParser(LightningArgumentParser):
    """LightningCLI's parser without abbreviated options, and with one-line errors (exit 2)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str, ex: Exception | None = None) -> NoReturn:
        # Parsers nested inside type checks raise instead of exiting (exit_on_error=False):
        # that is how jsonargparse tries one type after another. Those stay as they are.
        if not self.exit_on_error or is_verbose():
            super().error(message, ex)
        parser = getattr(ex, "subcommand_parser", None) or self
        options = [o for o in parser._option_string_actions if o.startswith("--")]
        fail(parser.prog.replace(" [options]", ""), explain_parse_error(message, options))


def root_cause(err: BaseException) -> BaseException:
    """The innermost ``__cause__``: the component's own error, not jsonargparse's wrapper of it."""
    while err.__cause__ is not None:
        err = err.__cause__
    return err


def building(err: BaseException) -> tuple[str | None, str | None]:
    """``(option, class)`` that jsonargparse was building when ``err`` was raised.

    jsonargparse does not attach the option to the error, but its frames hold it: the
    outermost jsonargparse argument (``self``) or group (``group``) on the traceback with a
    ``dest`` (``model.reward``, ``model.grpo``, ``data``). The class is that of the outermost
    constructor on the root cause's traceback. ``None`` where not found; the message then
    goes without it.
    """
    key = None
    for frame, _ in traceback.walk_tb(err.__traceback__):
        if frame.f_globals.get("__name__", "").startswith("jsonargparse"):
            dest = getattr(frame.f_locals.get("group", frame.f_locals.get("self")), "dest", None)
            if isinstance(dest, str) and dest:
                key = dest
                break
    for frame, _ in traceback.walk_tb(root_cause(err).__traceback__):
        if frame.f_code.co_name in ("__init__", "__post_init__") and "self" in frame.f_locals:
            return key, type(frame.f_locals["self"]).__name__
    return key, None


class BaseCLI(LightningCLI):
    """LightningCLI with :class:`AgonArgumentParser`, plugins loaded, ``--threads``, model and data
    options first in ``--help``, a base-model check before anything loads, usage errors as
    :class:`UsageError`, and no dependency noise in the log (:mod:`agon_lightning.infra.quiet`).
    """

    model_source_key = "model.model_name_or_path"  # checked by check_model_source before anything loads

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        load_plugins()
        quiet_dependency_noise()
        kwargs.setdefault("parser_class", AgonArgumentParser)
        kwargs.setdefault("auto_configure_optimizers", False)
        super().__init__(*args, **kwargs)

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        # ``agon CMD`` hands each command its slice of sys.argv; LightningCLI would warn that
        # args and sys.argv are both set.
        if isinstance(args, list):  # --model.rollout=vllm: an entry-point name, as its class path
            args = resolve_component_names(args)
        self.argv = args if isinstance(args, list) else None  # read again for where data options came from
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="LightningCLI's args parameter")
            super().parse_arguments(parser, args)

    def standard_callbacks(self, trainer_config: dict[str, Any], standard: Any) -> list[Any]:
        """The run's callbacks: ``standard(...)`` (the command's standard set), less ``--skip_callbacks``,
        with the config's own ``trainer.callbacks`` in place of the standard one of their class."""
        from agon_lightning.callbacks.defaults import trainer_callbacks

        skip = self._get(self.config, "skip_callbacks", default=None) or []
        try:
            return trainer_callbacks(trainer_config, standard, skip)
        except ValueError as err:
            raise UsageError(f"--{err}") from err

    def add_core_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        # What a run is about first, then the Trainer's ~60 options (LightningCLI's order reversed).
        parser.add_lightning_class_args(self._model_class, "model", subclass_mode=self.subclass_mode_model)
        if self.datamodule_class is not None:
            parser.add_lightning_class_args(
                self._datamodule_class, "data", subclass_mode=self.subclass_mode_data
            )
        parser.add_lightning_class_args(self.trainer_class, "trainer")
        parser.set_defaults({f"trainer.{k}": v for k, v in self.trainer_defaults.items() if k != "callbacks"})

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.add_argument(
            "--threads",
            type=int | None,
            default=None,
            help="torch CPU threads (default: torch's choice). On a shared or busy CPU, 1 avoids "
            "oversubscribed threads spinning, which can slow a tiny model 100-fold.",
        )

    def before_instantiate_classes(self) -> None:
        config = self.config[self.subcommand] if self.subcommand else self.config
        threads = config.get("threads")
        if threads is not None:
            if threads < 1:
                raise UsageError(f"--threads must be >= 1 or null, got {threads}")
            torch.set_num_threads(threads)
        source = config.get(self.model_source_key)
        if isinstance(source, str):
            check_model_source(source, f"--{self.model_source_key}")
        check_strategy_option(config.get("trainer.strategy"))

    def instantiate_classes(self) -> None:
        self._instantiate_reporting_errors()
        config = self.config[self.subcommand] if self.subcommand else self.config
        data, set_origins = config.get("data"), getattr(self.datamodule, "set_origins", None)
        if callable(set_origins) and self.argv is not None and isinstance(data, Namespace):
            # messages about a parsed data module's options say who set them (an object given in Python: its owner)
            set_origins(
                data_origins(self.argv, data.get("class_path"), vars(data.get("init_args") or Namespace()))
            )

    def _instantiate_reporting_errors(self) -> None:
        try:
            super().instantiate_classes()
        except (ValueError, MisconfigurationException) as err:
            if isinstance(err, UsageError):
                raise
            key, cls = building(err)
            if key is None and cls == self.trainer_class.__name__:
                key = "trainer"  # LightningCLI builds the Trainer itself, outside jsonargparse
            if key and cls:
                where = f"--{key} ({cls}): "
            else:
                where = f"--{key}: " if key else f"{cls}: " if cls else ""
            raise UsageError(where + str(root_cause(err))) from err
