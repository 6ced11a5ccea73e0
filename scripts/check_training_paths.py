"""One Agon step of the default config under each option that changes how the step is computed.

The shipped tiny model, ``configs/agon.yaml``'s data and rollouts, plain SGD with lr 1 and no
clipping (so each adapter's update is exactly minus its gradient), the same seed for every
option (so the same games). Prints, per option, each adapter's update, its largest difference
from the plain path's update, and how many tensors of each adapter the checkpoint holds::

    python scripts/check_training_paths.py [--out results.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import lightning as L
import torch

from agon_lightning.cli import AgonCLI

ROOT = Path(__file__).resolve().parents[1]
OPTIONS = {
    "plain": [],
    "gradient_checkpointing": ["--model.gradient_checkpointing=true"],
    "micro_batch_size=2": ["--model.grpo.micro_batch_size=2"],
    "kl_beta=1e-9": ["--model.grpo.kl_beta=1e-9"],
}


def one_step(extra: list[str], root: Path) -> tuple[dict, dict, dict]:
    """``(before, after, checkpoint tensors per adapter)`` of one step."""
    cli = AgonCLI(
        args=["--config", str(ROOT / "configs/agon.yaml"), "--model.optimizer=torch.optim.SGD",
              "--model.optimizer.lr=1.0", "--model.max_grad_norm=null", "--model.validate_at_start=false",
              "--data.init_args.batch_size=4", *extra],
        run=False,
    )  # fmt: skip
    module, data = cli.model, cli.datamodule
    L.seed_everything(0)
    module.configure_model()
    before = {n: p.detach().clone() for n, p in module.policy.named_parameters() if "lora_" in n}
    trainer = L.Trainer(
        accelerator="cpu", max_epochs=1, limit_train_batches=1, limit_val_batches=0, logger=False,
        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, default_root_dir=root,
    )  # fmt: skip
    trainer.fit(module, data)
    after = {n: p.detach().clone() for n, p in module.policy.named_parameters() if "lora_" in n}
    trainer.save_checkpoint(root / "step.ckpt")
    state = torch.load(root / "step.ckpt", weights_only=False)["state_dict"]
    counts = {a: sum(f".{a}." in k for k in state) for a in ("alpha", "beta")}
    return before, after, counts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="also write the table as JSON here")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in OPTIONS.items():
            (Path(tmp) / name).mkdir()
            runs[name] = one_step(extra, Path(tmp) / name)
    plain_before, plain_after, _ = runs["plain"]
    rows = []
    for name, (before, after, counts) in runs.items():
        row = {"option": name, "checkpoint_tensors": counts}
        for adapter in ("alpha", "beta"):
            keys = [k for k in after if f".{adapter}." in k]
            row[f"{adapter}_update"] = max(float((after[k] - before[k]).abs().max()) for k in keys)
            row[f"{adapter}_diff_vs_plain"] = max(
                float(((after[k] - before[k]) - (plain_after[k] - plain_before[k])).abs().max()) for k in keys
            )
        rows.append(row)
    print(
        "| option | alpha update | alpha diff vs plain | beta update | beta diff vs plain | checkpoint tensors |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['option']} | {r['alpha_update']:.3g} | {r['alpha_diff_vs_plain']:.2g} | {r['beta_update']:.3g} "
              f"| {r['beta_diff_vs_plain']:.2g} | alpha {r['checkpoint_tensors']['alpha']}, beta {r['checkpoint_tensors']['beta']} |")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
