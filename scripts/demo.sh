#!/usr/bin/env bash
# The main job on a fresh machine: install, build, list the backends, run one experts call from a problem file
# through every CPU backend, a short CPU benchmark against the machine's measured floors, then text from the small
# MoE model shipped in models/moex-tiny-moe.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --preset release -DMOEX_TESTS=OFF >/dev/null
cmake --build --preset release -j "$(nproc)"
moex=build/moex
$moex backends
mkdir -p build/demo
$moex experts make-problem --shape qwen3-30b-a3b --tokens 16 --dtype bf16 --scale-e 4 --seed 1 \
  --out build/demo/problem.safetensors
for b in eager batched_mm grouped_mm; do
  $moex experts run --problem build/demo/problem.safetensors --backend "$b" --out "build/demo/out_$b.safetensors"
done
# The same experts with FP8 block-quantized weights (dynamic FP8 activations), through the CPU grouped_mm.
$moex experts make-problem --shape qwen3-30b-a3b --tokens 16 --dtype bf16 --scale-e 4 --seed 1 --quant fp8_block \
  --out build/demo/problem_fp8.safetensors
$moex experts run --problem build/demo/problem_fp8.safetensors --backend grouped_mm --out build/demo/out_fp8.safetensors
$moex bench --shapes qwen3-30b-a3b --tokens 1,64,1024 --dtype bf16 --reps 5
$moex generate --prompt "And God said," --max-new-tokens 80 --seed 7
