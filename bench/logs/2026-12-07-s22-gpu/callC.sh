#!/usr/bin/env bash
# Session 22, call C: batched_mm's quantized decode through a cp.async ring (new) against c13edc0 (before).
source .gpubin/s22/common.sh
timeout 220 $B/moex_tests --gtest_filter='*Cuda*:*cuda*' > $OUT/tests.log 2>&1; echo "tests rc $?"
grep -E "^\[  (PASSED|FAILED)|FAILED  \]|tests from .* ran" $OUT/tests.log | head -20; date -u
for q in mxfp4 fp8_block; do
  for v in new before new before; do
    bin=$B; [[ $v == before ]] && bin=$V0
    timeout 60 $bin/moex bench --device cuda --shapes deepseek-v3,qwen3-30b-a3b,mixtral-8x7b --tokens 1,8,64 --backends batched_mm --quant $q --case-seconds 0.12 2>&1 | grep -E "^(qwen|deepseek|mixtral)" | sed "s/^/$q $v /" >> $OUT/ring-ab.txt
  done
  date -u
done
cut -c1-110 $OUT/ring-ab.txt
SAN=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
left=$((540 - SECONDS)); echo "left $left s"
if ((left > 60)); then
  timeout $((left / 2)) $SAN --tool memcheck --error-exitcode 3 $B/moex_tests --gtest_filter='QuantBackendsCuda.DecodeRing*' > $OUT/memcheck.log 2>&1; echo "memcheck rc $?"
  grep -E "ERROR SUMMARY|^\[  (PASSED|FAILED)" $OUT/memcheck.log | head -5
  left=$((540 - SECONDS))
  timeout $left $SAN --tool racecheck --error-exitcode 3 $B/moex_tests --gtest_filter='QuantBackendsCuda.DecodeRing*' > $OUT/racecheck.log 2>&1; echo "racecheck rc $?"
  grep -E "RACECHECK SUMMARY|ERROR SUMMARY|^\[  (PASSED|FAILED)" $OUT/racecheck.log | head -5
fi
date -u
