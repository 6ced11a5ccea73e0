#!/usr/bin/env bash
# GPU acceptance (one GPU, under ten minutes): 3 Agon steps of the Qwen3-0.6B architecture (random
# weights, no download) under one device, FSDP2, DeepSpeed ZeRO-2 and ZeRO-3, each with HF and vLLM
# rollouts. Prints one table; writes the JSON. Needs .[deepspeed,vllm] on a CUDA machine.
#   bash scripts/gpu_smoke.sh [OUT_JSON] [LightningCLI overrides ...]
#   bash scripts/gpu_smoke.sh smoke.json --model.gradient_checkpointing=true
#   bash scripts/gpu_smoke.sh --cpu-dry-run      # the same matrix on a tiny Qwen3, on this machine's CPU
set -euo pipefail
cd "$(dirname "$0")/.."
flags=()
if [[ "${1:-}" == "--cpu-dry-run" ]]; then flags+=(--cpu-dry-run); shift; fi
out="${1:-gpu_smoke.json}"
shift || true
exec python scripts/gpu_smoke.py --steps 3 --out "$out" "${flags[@]}" -- "$@"
