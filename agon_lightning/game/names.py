"""The names the package gives its two adapters and the base model.

Every module that names an adapter, or the base model as a policy of its own, takes the
name from here, so a key in a metric, a bundle's ``agon.json`` or a plot's legend is spelled
once. The values are user-facing (``val/alpha/pass@1``, ``val/base/pass@1``, ``--drafter beta``)
and saved in configs and bundles: they do not change.

Three spellings of "no adapter" used to meet in the code; the rule now is:

- :data:`BASE` (``"base"``) is the base model as the evaluator, plots, reports and the server
  name it — a key users read.
- ``None`` is "adapters off" in every signature of our own (``adapter: str | None``).
- PEFT's own name for it in a mixed-adapter batch (``"__base__"``) never leaves
  :mod:`agon_lightning.adapters.peft_boundary`, which translates ``None`` to it.
"""

from __future__ import annotations

ALPHA = "alpha"  # the first adapter: the drafter of a fixed schedule, the only one of GRPO and self-play
BETA = "beta"  # the second adapter: the challenger of a fixed schedule
ADAPTERS: tuple[str, str] = (ALPHA, BETA)
BASE = "base"  # the base model (adapters off) as a policy the evaluator scores and users read
SHIPPED = (
    "agon:"  # the prefix naming a config or a model shipped in the package: agon:agon.yaml, agon:tiny-qwen3
)
