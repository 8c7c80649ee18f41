#!/usr/bin/env bash
# Session 22, call A: AK7's checks (CUDA suite, weight-gradient check) and A/B of 765d371 (new) against 8761697 (before).
source .gpubin/s22/common.sh
timeout 60 $B/weight_grad_sm90_check --check > $OUT/wg-check.log 2>&1; echo "wg check rc $?"; tail -2 $OUT/wg-check.log
timeout 200 $B/moex_tests --gtest_filter='*Cuda*:*cuda*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests from .* ran" $OUT/tests.log | head; date -u
for v in new before new before; do
  bin=$B; [[ $v == before ]] && bin=$V0
  timeout 40 $bin/moex bench --device cuda --shapes sonicmoe-7b,sonicmoe-coarse --tokens 24576,32768 --backends grouped_mm --backward --case-seconds 0.3 2>&1 | grep -E "^sonic" | sed "s/^/$v /" >> $OUT/bwd-ab.txt
done
cut -c1-100 $OUT/bwd-ab.txt; date -u
for v in new before new; do
  bin=$B; [[ $v == before ]] && bin=$V0
  timeout 50 $bin/moex bench --device cuda --shapes qwen3-30b-a3b,deepseek-v3,mixtral-8x7b,qwen1.5-moe-a2.7b --tokens 4096,16384 --backends grouped_mm --case-seconds 0.15 2>&1 | grep -E "^(qwen|deepseek|mixtral)" | sed "s/^/$v /" >> $OUT/fwd-ab.txt
done
cut -c1-100 $OUT/fwd-ab.txt; date -u
