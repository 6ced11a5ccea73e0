"""One decoder layer's seven LoRA projections, forward and backward: one product per weight against
the projections that read the same input as one product (issue 53's "fused LoRA" lever).

The update runs each adapted projection as ``fast_lora`` does: ``x Wᵀ``, then ``x Aᵀ``, then
``s · (x Aᵀ) Bᵀ`` accumulated into the first (``addmm``), seven times a layer. Three of them read the
attention's input (q, k, v) and two the MLP's (gate, up), so one product of that input with the
weights and the adapters' ``A`` stacked (``[Wq; Wk; Wv; Aq; Ak; Av]``) does their first two products
in one call, split afterwards. This script times one layer's projections both ways at the update's
shape (``--rows`` token positions, the layer's input requiring a gradient, as every layer but the
first does), alternating, one thread, and checks that both give the same outputs and gradients.

    python -m benchmarks.bench_projections                  # the Countdown model's layer, 2,000 positions
    python -m benchmarks.bench_projections --rows 500 2000 8000

Writes ``projections.json`` (``--results-dir``).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from benchmarks.common import add_results_dir, median, print_table, single_thread, write_json

# The tiny-countdown model's layer, read from its shipped config, and configs/countdown.yaml's LoRA (r 16, alpha 32).
_CONFIG = json.loads(
    (Path(__file__).resolve().parents[1] / "agon_lightning/assets/tiny-countdown/config.json").read_text()
)
HIDDEN, HEADS, KV_HEADS, HEAD_DIM, INTERMEDIATE = (
    _CONFIG[k]
    for k in ("hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size")
)
RANK, SCALING = 16, 2.0
SHAPES = {  # name: (out, in)
    "q": (HEADS * HEAD_DIM, HIDDEN), "k": (KV_HEADS * HEAD_DIM, HIDDEN), "v": (KV_HEADS * HEAD_DIM, HIDDEN),
    "o": (HIDDEN, HEADS * HEAD_DIM), "gate": (INTERMEDIATE, HIDDEN), "up": (INTERMEDIATE, HIDDEN),
    "down": (HIDDEN, INTERMEDIATE),
}  # fmt: skip
SHARED_INPUT = (("q", "k", "v"), ("gate", "up"))


class Layer:
    """Frozen weights ``W`` and trainable ``A``, ``B`` of each projection."""

    def __init__(self, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        self.w = {n: 0.05 * torch.randn(o, i, generator=g) for n, (o, i) in SHAPES.items()}
        self.a = {
            n: (0.05 * torch.randn(RANK, i, generator=g)).requires_grad_() for n, (_, i) in SHAPES.items()
        }
        self.b = {
            n: (0.05 * torch.randn(o, RANK, generator=g)).requires_grad_() for n, (o, _) in SHAPES.items()
        }

    def parameters(self) -> list[Tensor]:
        return [*self.a.values(), *self.b.values()]

    def one(self, x: Tensor, name: str) -> Tensor:
        """``x Wᵀ + s (x Aᵀ) Bᵀ`` as ``fast_lora.lora_forward`` computes it."""
        return torch.addmm(x @ self.w[name].t(), x @ self.a[name].t(), self.b[name].t(), alpha=SCALING)

    def stacked(self, x: Tensor, names: tuple[str, ...]) -> list[Tensor]:
        """The projections of ``names`` (same input) with one product for their ``W`` and ``A``."""
        weight = torch.cat([self.w[n] for n in names] + [self.a[n] for n in names])
        parts = (x @ weight.t()).split([SHAPES[n][0] for n in names] + [RANK] * len(names), dim=-1)
        return [
            torch.addmm(parts[i], parts[len(names) + i], self.b[n].t(), alpha=SCALING)
            for i, n in enumerate(names)
        ]


def outputs(layer: Layer, xs: tuple[Tensor, Tensor, Tensor], stacked: bool) -> list[Tensor]:
    """q, k, v from ``xs[0]``, o from ``xs[1]``, gate and up from ``xs[2]``, down from SiLU(gate)·up."""
    attn, mlp = ((layer.stacked(xs[0], SHARED_INPUT[0]), layer.stacked(xs[2], SHARED_INPUT[1])) if stacked
                 else ([layer.one(xs[0], n) for n in SHARED_INPUT[0]], [layer.one(xs[2], n) for n in SHARED_INPUT[1]]))  # fmt: skip
    gate, up = mlp
    return [*attn, layer.one(xs[1], "o"), gate, up, layer.one(torch.nn.functional.silu(gate) * up, "down")]


def forward_backward(
    layer: Layer, xs: tuple[Tensor, ...], stacked: bool, upstream: list[Tensor]
) -> list[Tensor]:
    """The outputs, backward from ``upstream``; returns the outputs and every gradient (detached)."""
    for t in [*xs, *layer.parameters()]:
        t.grad = None
    outs = outputs(layer, xs, stacked)  # type: ignore[arg-type]
    torch.autograd.backward(outs, upstream)
    return [o.detach() for o in outs] + [t.grad for t in [*xs, *layer.parameters()]]  # type: ignore[misc]


def measure(rows: int, repeats: int, seed: int = 0) -> dict[str, Any]:
    """Both ways at ``rows`` positions, alternating (the first of each order warms up)."""
    layer = Layer(seed)
    g = torch.Generator().manual_seed(seed + 1)
    xs = tuple(torch.randn(rows, i, generator=g).requires_grad_() for i in (HIDDEN, HEADS * HEAD_DIM, HIDDEN))
    upstream = [
        torch.randn(rows, SHAPES[n][0], generator=g) for n in ("q", "k", "v", "o", "gate", "up", "down")
    ]
    reference = forward_backward(layer, xs, False, upstream)
    other = forward_backward(layer, xs, True, upstream)
    diff = max(float((a - b).abs().max() / a.abs().max().clamp_min(1e-12)) for a, b in zip(reference, other))
    times: dict[bool, list[float]] = {False: [], True: []}
    for i in range(repeats + 1):
        for stacked in (False, True) if i % 2 else (True, False):
            start = time.perf_counter()
            forward_backward(layer, xs, stacked, upstream)
            if i:
                times[stacked].append(time.perf_counter() - start)
    one, stacked_s = median(times[False]), median(times[True])
    return {"rows": rows, "separate_ms": 1e3 * one, "stacked_ms": 1e3 * stacked_s,
            "stacked_over_separate": stacked_s / one, "max_rel_diff": diff}  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--rows", type=int, nargs="+", default=[2000], help="token positions (the update's chunk)"
    )
    parser.add_argument("--repeats", type=int, default=30, help="timed calls each way, alternating")
    add_results_dir(parser)
    cli = parser.parse_args(argv)
    single_thread()
    results = [measure(rows, cli.repeats) for rows in cli.rows]
    table = print_table(
        f"One layer's seven LoRA projections, forward + backward, one thread, median of {cli.repeats} each way",
        ["positions", "separate, ms", "stacked, ms", "stacked / separate", "max relative difference"],
        [[r["rows"], r["separate_ms"], r["stacked_ms"], r["stacked_over_separate"], r["max_rel_diff"]]
         for r in results],
    )  # fmt: skip
    write_json("projections", {"repeats": cli.repeats, "results": results, "table": table}, cli.results_dir)


if __name__ == "__main__":
    main()
