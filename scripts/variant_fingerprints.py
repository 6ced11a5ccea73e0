"""Each shipped variant's training update, to compare two commits tensor by tensor.

A 3-step fit per variant on the tests' tiny model (tests/variant_fits.py: the scripted rollout, a
verifier that needs no model, each variant set by the module arguments its overlay sets); the
adapter tensors after the fit are saved::

    python scripts/variant_fingerprints.py CHECKOUT_A OUT_A      # e.g. a worktree at the old commit
    python scripts/variant_fingerprints.py CHECKOUT_B OUT_B
    python scripts/variant_fingerprints.py --compare OUT_A OUT_B # bit-identical? per variant

The package and the tests' helpers come from CHECKOUT; tests/variant_fits.py from CHECKOUT if it
has one, else from this checkout.
"""

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]

if sys.argv[1] == "--compare":
    import torch

    for pt in sorted(Path(sys.argv[2]).glob("*.pt")):
        a, b = torch.load(pt), torch.load(Path(sys.argv[3]) / pt.name)
        same = sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
        moved = sum(float(v.abs().sum()) for k, v in a.items() if "lora_B" in k)
        print(
            f"{pt.stem}: {len(a)} tensors, |B| summed {moved:.6f}, {'bit-identical' if same else 'DIFFERENT'}"
        )
    sys.exit(0)
repo = Path(sys.argv[1]).resolve()
out = Path(sys.argv[2])
out.mkdir(parents=True, exist_ok=True)
sys.path[:0] = [str(repo), str(repo / "tests")]
sys.path.append(str(HERE / "tests"))
import torch  # noqa: E402
from conftest import build_char_tokenizer, build_tiny_model  # noqa: E402
from variant_fits import NAMES, fit_variant  # noqa: E402

assert Path(sys.modules["agon_lightning"].__file__).is_relative_to(repo), "imported another checkout"
torch.manual_seed(0)
model_dir = out / "tiny"
if not model_dir.exists():
    tok = build_char_tokenizer()
    build_tiny_model(tok).save_pretrained(model_dir)
    tok.save_pretrained(model_dir)
for name in NAMES:
    torch.save(fit_variant(model_dir, name, out / f"fit_{name}"), out / f"{name}.pt")
    print(f"{name} done")
