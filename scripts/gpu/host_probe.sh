#!/usr/bin/env bash
# A short look at the GPU machine, for what its figures mean (issue #15 item 3, issue #12 item 2), in one call:
#   topology  lscpu, the kernel's thread siblings, NUMA nodes, and bench/micro/smt_pairs.cpp (built here with g++):
#             which logical CPUs share a physical core, measured (a VM reports what its hypervisor says)
#   decode    packed `moex bench` of batched_mm decode (qwen3-30b-a3b, deepseek-v3; T = 1, 8), plain and graph, and
#             qwen3 T = 1 under MOEX_BATCHED_KS = 1, 2, 4, 8 (the K split of both projections, batched.cu choose_ks)
#   nsys      where a plain qwen3 T = 1 call's time goes: the CUDA API calls on the host against the kernels on the GPU
#             (nsys stats: cuda_api_sum, cuda_gpu_kern_sum, and the traces, xz-compressed), when nsys is installed
# Usage (device tool, carry [".deps", ".gpubin/pack"]): bash scripts/gpu/host_probe.sh [--steps topology,decode,nsys]
# Needs .gpubin/pack/new.tar.xz (scripts/gpu/packed_check.sh pack). Env: OUT, BUDGET_S (400).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
STEPS=topology,decode,nsys
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
OUT=${OUT:-$ROOT/.gpubin/probe}
BUDGET_S=${BUDGET_S:-400}
# shellcheck source=scripts/gpu/lib.sh
source "$ROOT/scripts/gpu/lib.sh"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
trap 'echo "==== host_probe summary ($(($(date +%s) - START))s; logs in $OUT) ===="; cat "$SUMMARY"' EXIT

if want topology; then
    {
        lscpu
        lscpu -e
        for f in /sys/devices/system/cpu/cpu[0-9]*/topology/thread_siblings_list; do echo "$f: $(cat "$f")"; done
        command -v numactl >/dev/null && numactl -H
    } >"$OUT/topology.txt" 2>&1
    if box smt-build 60 "$OUT/smt.txt" g++ -O2 -pthread -o "$OUT/smt_pairs" bench/micro/smt_pairs.cpp &&
        box smt 60 "$OUT/smt.txt" "$OUT/smt_pairs" 0.25 0; then
        record topology PASS "$(grep -c 'shared core' "$OUT/smt.txt") of $(grep -c '^ *0 +' "$OUT/smt.txt") CPUs share CPU 0's core"
    else
        fail_step topology "see smt.txt"
    fi
    rm -f "$OUT/smt_pairs"
fi

BIN=$ROOT/.gpubin/bin/new
if want decode || want nsys; then
    export LD_LIBRARY_PATH="${MOEX_DEPS:-$ROOT/.deps}/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
    rm -rf "$BIN"
    if ! { mkdir -p "$BIN" && tar -C "$BIN" -xJf "$ROOT/.gpubin/pack/new.tar.xz"; }; then
        fail_step unpack "no .gpubin/pack/new.tar.xz"
        exit 1
    fi
    nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv >"$OUT/gpu.txt" 2>&1
fi
SHAPES=qwen3-30b-a3b,deepseek-v3
DECODE=(--device cuda --shapes "$SHAPES" --tokens "8,1,8" --backends batched_mm --case-seconds 0.2)
if want decode; then
    log=$OUT/decode.txt
    box decode-plain 90 "$log" "$BIN/moex" bench "${DECODE[@]}" &&
        box decode-graph 90 "$log" "$BIN/moex" bench "${DECODE[@]}" --graph
    for ks in 1 2 4 8; do
        box "ks-$ks" 40 "$log" env MOEX_BATCHED_KS=$ks "$BIN/moex" bench --device cuda --shapes qwen3-30b-a3b \
            --tokens 1,1 --backends batched_mm --case-seconds 0.2
    done
    record decode PASS "$(grep -c 'batched_mm' "$log") rows in decode.txt"
fi
if want nsys; then
    if command -v nsys >/dev/null; then
        rep=/tmp/moex-probe
        box nsys 120 "$OUT/nsys.txt" nsys profile -o "$rep" -t cuda --force-overwrite true "$BIN/moex" bench \
            --device cuda --shapes qwen3-30b-a3b --tokens 1 --backends batched_mm --case-seconds 0.05
        nsys stats -q -r cuda_api_sum,cuda_gpu_kern_sum -f csv "$rep.nsys-rep" >"$OUT/nsys-sum.csv" 2>&1
        nsys stats -q -r cuda_api_trace,cuda_gpu_trace -f csv "$rep.nsys-rep" 2>&1 | tail -4000 | xz >"$OUT/nsys-trace.csv.xz"
        record nsys PASS "$(wc -l <"$OUT/nsys-sum.csv") summary lines"
    else
        record nsys SKIP "no nsys on this machine"
    fi
fi
exit "$FAILED"
