#!/usr/bin/env bash
# Session 22, call F: FP8 decode at three CTAs an SM (new) against c13edc0 (before); the new decode test on main's loop.
source .gpubin/s22/common.sh
timeout 100 $B/moex_tests --gtest_filter='QuantBackendsCuda.DecodeAtEverySplitAndTileHeight:QuantBackendsCuda.Fp8Blocks128MatchTheReference:QuantBackendsCuda.MatchTheReferenceOnDequantizedValues' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests from .* ran" $OUT/tests.log | head; date -u
for v in new before new before; do
  bin=$B; [[ $v == before ]] && bin=$V0
  timeout 50 $bin/moex bench --device cuda --shapes deepseek-v3,qwen3-30b-a3b,mixtral-8x7b --tokens 1,8 --backends batched_mm --quant fp8_block --case-seconds 0.12 2>&1 | grep -E "^(qwen|deepseek|mixtral)" | sed "s/^/$v /" >> $OUT/occ-ab.txt
done
cut -c1-100 $OUT/occ-ab.txt; date -u
