"""Adapters after 3-step fits, to compare the training step of two commits tensor by tensor.

Fits at K = 0 and K = 1 (``rollout.max_staleness``; the scripted engine of tests/test_prefetch.py)
and at K = 0 with HFRollout, on the tests' tiny model, for the default game and for each of the
game's variants set by name (grpo, fixed roles, self-play, a shared opponent), and, with the
scripted rollout, for each shipped overlay that changes training (tests/variant_fits.py, the fits
tests/test_variant_updates.py pins; ``variant_*.pt``); each fit's adapter tensors are saved::

    python scripts/adapter_fingerprint.py CHECKOUT_A OUT_A      # e.g. a worktree at the old commit
    python scripts/adapter_fingerprint.py CHECKOUT_B OUT_B
    python scripts/adapter_fingerprint.py --compare OUT_A OUT_B # bit-identical? per fit

The package and the tests' helpers come from CHECKOUT; tests/variant_fits.py from CHECKOUT if it
has one, else from this checkout.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

# the game's variants, by the module arguments every version of the module takes
VARIANTS = {
    "grpo": {"game": "grpo"},
    "fixed": {"schedule": "fixed"},
    "self_play": {"schedule": "self_play"},
    "shared": {"pairing": "shared"},
}

if sys.argv[1] == "--compare":
    import torch

    for pt in sorted(Path(sys.argv[2]).glob("*.pt")):
        a, b = torch.load(pt), torch.load(Path(sys.argv[3]) / pt.name)
        same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
        print(f"{pt.stem}: {len(a)} tensors, {'bit-identical' if same else 'DIFFERENT'}")
    sys.exit(0)
repo = Path(sys.argv[1]).resolve()
out = Path(sys.argv[2])
sys.path[:0] = [str(repo), str(repo / "tests")]
sys.path.append(str(HERE / "tests"))  # variant_fits, where CHECKOUT has none
import torch  # noqa: E402
from conftest import build_char_tokenizer, build_tiny_model  # noqa: E402
from test_prefetch import FakeEngine, fit, make_module  # noqa: E402

torch.manual_seed(0)
model_dir = out / "tiny"
if not model_dir.exists():
    tok = build_char_tokenizer()
    build_tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)


def adapters(module):
    return {k: v.detach().clone() for k, v in module.named_parameters() if "lora_" in k}


for k in (0, 1):
    torch.manual_seed(0)
    module = make_module(model_dir, FakeEngine(max_staleness=k))
    fit(module, 3, out / f"fit_k{k}")
    torch.save(adapters(module), out / f"k{k}.pt")
    print(f"K={k}: policy_version {module.policy_version}, {len(adapters(module))} tensors")

import lightning as L  # noqa: E402

from agon_lightning.adapters.policy import LoraOptions  # noqa: E402
from agon_lightning.data.reasoning_gym import ReasoningGymDataModule  # noqa: E402
from agon_lightning.game.prompts import Prompts  # noqa: E402
from agon_lightning.rollout.hf import HFRollout  # noqa: E402
from agon_lightning.training.module import AgonModule, GRPOOptions  # noqa: E402

for name, kwargs in {"hf": {}, **{f"hf_{v}": kw for v, kw in VARIANTS.items()}}.items():
    L.seed_everything(0)
    module = AgonModule(
        model_name_or_path=str(model_dir),
        lora=LoraOptions(r=2, target_modules=["q_proj", "v_proj"]),
        grpo=GRPOOptions(num_generations=2),
        rollout=HFRollout(max_new_tokens=8),
        validate_at_start=False,
        **kwargs,
    )
    trainer = L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        limit_train_batches=3,
        limit_val_batches=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=str(out / f"fit_{name}"),
    )
    with torch.serialization.safe_globals([LoraOptions, GRPOOptions, Prompts]):
        trainer.fit(module, ReasoningGymDataModule(train_size=16, val_size=1, batch_size=2))
    torch.save(adapters(module), out / f"{name}.pt")
    print(f"{name} (K=0, HFRollout) done")

from variant_fits import NAMES, fit_variant  # noqa: E402

for name in NAMES:
    torch.save(fit_variant(model_dir, name, out / f"fit_variant_{name}"), out / f"variant_{name}.pt")
    print(f"variant {name} done")
