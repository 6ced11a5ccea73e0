"""The ``agon`` commands: each one's entry point and its line of help.

A table of strings, so ``agon --help`` lists every command without importing any of them, and
the modules behind the commands read it (``agon_lightning.cli.game`` builds LightningCLI's
subcommands from it) without importing the ``agon`` dispatcher back.
"""

from __future__ import annotations

LIGHTNING_MAIN = "agon_lightning.cli.game:lightning_main"


# name → (entry point "module:function" taking the command's arguments, one line of help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": (LIGHTNING_MAIN, "train the drafter/challenger pair (start from --config agon:agon.yaml)"),
    "validate": (LIGHTNING_MAIN, "held-out pass@1 and length of the base, both adapters and both cascades"),
    "test": (LIGHTNING_MAIN, "the same evaluation through Lightning's test loop"),
    "predict": ("agon_lightning.cli.predict:predict_main", "run a bundle's two-stage cascade over a problem file (JSON lines out)"),
    "sft": ("agon_lightning.cli.sft:sft_main", "supervised warm-start: teach a base model the answer format"),
    "sweep": ("agon_lightning.experiments.sweep:sweep_main", "the paper's variants x seeds, one `agon fit` each, resumable; results table and plots"),
    "serve": ("agon_lightning.deploy.serve:serve_main", "serve a bundle's cascade behind an OpenAI-compatible HTTP endpoint"),
    "export": ("agon_lightning.deploy.export:export_main", "merge an adapter into its base, or lay out both for a multi-LoRA server"),
    "config": ("agon_lightning.cli.config_files:config_main", "list the configs shipped with the package, or print one"),
    "plan": ("agon_lightning.infra.plan:plan_main", "will it fit? predicted memory per device for every strategy"),
    "vllm-serve": ("agon_lightning.rollout.server_command:vllm_serve_main", "print (or --run) the vLLM server command a --model.rollout=vllm_server run needs"),
}  # fmt: skip
