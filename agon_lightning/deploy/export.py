"""``agon export``: a bundle in the two shapes serving stacks load.

* ``--merged-out DIR``: one adapter merged into the base (PEFT's ``merge_and_unload``) and
  saved with the tokenizer as a plain Hugging Face model, for single-model serving. It is
  *one policy alone* (``val/alpha/pass@1``), not the cascade nor a game's answer graph: by
  default the bundle's drafter (the adapter of a bundle deployed alone); a graph bundle names none,
  so ``--adapter`` chooses.
* ``--lora-out DIR``: every adapter of the run as standard PEFT adapter folders plus ``agon.json``,
  the layout a multi-LoRA server loads, e.g. ``vllm serve BASE --enable-lora
  --lora-modules alpha=DIR/alpha beta=DIR/beta``. The cascade is then two requests: the
  drafter's with ``prompts.draft``, the answerer's with ``prompts.challenge`` filled with
  the draft's summary (the templates are in ``agon.json``); a game's answer graph is the game's
  own sequence of such requests (its class and arguments are in ``agon.json``).

Both outputs are written atomically, and the adapters are checked against the bundle's base
first (:func:`~agon_lightning.deploy.bundle.check_adapters`).
"""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from agon_lightning.deploy.bundle import (
    BUNDLE_FILE,
    atomic_directory,
    bundle_parser,
    check_adapters,
    load_adapters,
    read_bundle,
)
from agon_lightning.infra.model_source import resolve_model_path
from agon_lightning.rollout.vllm import lora_rank_bound


def export_merged(
    bundle: str | Path, adapter: str, out: str | Path, base_model: str | None = None, dtype: str | None = None
) -> Path:
    """Merge ``adapter`` into the base and save model + tokenizer to ``out``.

    The result loads with ``AutoModelForCausalLM.from_pretrained(out)`` alone.
    """
    meta = read_bundle(bundle)
    policy, tokenizer = load_adapters(bundle, meta, [adapter], base_model, dtype)
    merged = policy.merge_and_unload()

    def write(tmp: Path) -> None:
        merged.save_pretrained(str(tmp))
        tokenizer.save_pretrained(str(tmp))

    return atomic_directory(Path(out), write)


def export_lora(bundle: str | Path, out: str | Path) -> Path:
    """Copy every adapter (standard PEFT folders) and ``agon.json`` to ``out``."""
    bundle = Path(bundle)
    meta = read_bundle(bundle)
    check_adapters(bundle, meta, meta["adapters"])

    def write(tmp: Path) -> None:
        for name in meta["adapters"]:
            shutil.copytree(bundle / name, tmp / name)
        shutil.copy2(bundle / BUNDLE_FILE, tmp / BUNDLE_FILE)

    return atomic_directory(Path(out), write)


def vllm_rank(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds an adapter of rank ``rank``."""
    return lora_rank_bound([rank])


def vllm_command(lora_dir: str | Path, base_model: str | None = None) -> str:
    """The ``vllm serve`` command line that serves every adapter of ``lora_dir`` on their base."""
    lora_dir = Path(lora_dir)
    meta = read_bundle(lora_dir)
    configs: dict[str, Any] = {
        n: json.loads((lora_dir / n / "adapter_config.json").read_text()) for n in meta["adapters"]
    }
    rank = vllm_rank(max(int(c.get("r", 8)) for c in configs.values()))
    base = resolve_model_path(base_model or meta["base_model"])
    modules = [f"{n}={lora_dir.resolve() / n}" for n in meta["adapters"]]
    return shlex.join(
        [
            "vllm",
            "serve",
            base,
            "--enable-lora",
            "--max-lora-rank",
            str(rank),
            "--max-loras",
            str(len(modules)),
            "--lora-modules",
            *modules,
        ]
    )


def build_parser() -> argparse.ArgumentParser:
    parser = bundle_parser(
        "agon export",
        "Export a bundle: one adapter merged into the base (--merged-out) and/or every "
        "adapter in a multi-LoRA server layout (--lora-out).",
    )
    parser.add_argument(
        "--adapter",
        default=None,
        help="adapter to merge (default: the bundle's drafter; a graph bundle: required)",
    )
    parser.add_argument("--merged-out", default=None, help="write the merged Hugging Face model here")
    parser.add_argument("--lora-out", default=None, help="write every PEFT adapter + agon.json here")
    return parser


def export_main(argv: list[str] | None = None) -> None:
    """Entry point of ``agon export``."""
    parser = build_parser()
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    if not args.merged_out and not args.lora_out:
        parser.error("give --merged-out DIR, --lora-out DIR, or both")
    if args.merged_out:
        meta = read_bundle(args.bundle)
        adapter = args.adapter or meta["drafter"]
        if adapter is None:
            parser.error(
                f"--merged-out: bundle {args.bundle} deploys its game's answer graph, not one adapter; name the "
                f"adapter to merge with --adapter (one of {meta['adapters']})"
            )
        path = export_merged(args.bundle, adapter, args.merged_out, args.base_model, args.dtype)
        print(f"merged {adapter!r} into its base: {path} (loads with AutoModelForCausalLM.from_pretrained)")
    if args.lora_out:
        path = export_lora(args.bundle, args.lora_out)
        print(f"adapters written to {path}; serve them with:\n  {vllm_command(path, args.base_model)}")
