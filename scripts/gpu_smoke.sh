#!/usr/bin/env bash
# GPU smoke check (one GPU, ~8 minutes): 3 Agon steps of the Qwen3-0.6B architecture, random
# init, under single-device, DeepSpeed ZeRO-2 and FSDP. Prints a table; writes gpu_smoke.json.
#   bash scripts/gpu_smoke.sh [OUT_JSON] [LightningCLI overrides ...]
#   bash scripts/gpu_smoke.sh smoke.json --model.gradient_checkpointing=true --model.grpo.kl_beta=0.04
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-gpu_smoke.json}"
shift || true
exec python scripts/gpu_smoke.py --steps 3 --out "$out" -- "$@"
