#!/usr/bin/env bash
# Session 22, call B: wip/smem-space (smem) against 765d371 (new): bf16 and mxfp4/nvfp4 prefill, alternated.
source .gpubin/s22/common.sh
for q in none mxfp4; do
  for v in new smem new smem; do
    bin=$B; [[ $v == smem ]] && bin=$SM
    timeout 60 $bin/moex bench --device cuda --shapes qwen3-30b-a3b,deepseek-v3,mixtral-8x7b --tokens 4096,16384 --backends grouped_mm --quant $q --case-seconds 0.15 2>&1 | grep -E "^(qwen|deepseek|mixtral)" | sed "s/^/$q $v /" >> $OUT/smem-ab.txt
  done
  date -u
done
cut -c1-110 $OUT/smem-ab.txt
