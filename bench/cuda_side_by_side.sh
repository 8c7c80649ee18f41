#!/usr/bin/env bash
# moex against its GPU peers in one run on one card (issue #12 item 5): `moex bench --device cuda` (plain and under CUDA
# graphs), transformers' experts backends (bench/python_bench.py --peers-only: plain, CUDA graphs at T <= 64,
# torch.compile in issue #12's modes) and SonicMoE's forward (the shared peers' sonicmoe_bench.py), then one table
# (bench/cuda_side_by_side.py). For the GPU machine, after scripts/gpu_check.sh has built build-gpu.
#
# SonicMoE comes packed by bench/peers/sonicmoe_pack.sh into .peers (git-ignored). Its libraries are too big for one
# call's carry beside the working tree, so they travel in parts and are staged in $PEERS, which outlives a call on a
# warm machine:
#   call 1: carry [".peers/libs-base.part-00"]     bash bench/cuda_side_by_side.sh --steps stage
#   call 2: carry [".deps", ".peers/libs-base.part-01", ".peers/libs-base.sha256", ".peers/wheels",
#                  ".peers/sonicmoe_bench.py"]       bash bench/cuda_side_by_side.sh   (stage,install,moex,hf,sonic,table)
# Every step appends JSON lines to $PEERS/results, so a sweep can be split over calls (SHAPES, TOKENS) and `table`
# combines all of them into $OUT/table.md, with every JSON line in $OUT/side_by_side.jsonl.
# SonicMoE's first call per shape compiles and autotunes its kernels (~150 s per shape for the forward on an H100,
# RESULTS P). quack keeps both in $PEERS/quack (QUACK_CACHE_DIR, QUACK_CACHE_AUTOTUNING=1); `table` packs that folder
# into $OUT/quack-cache.tar.xz, and `stage` unpacks .peers/quack-cache.tar.xz when it is there: copy the file into
# .peers/ and carry it, and a later machine starts with the same card's kernels and choices.
# The `train` step (issue #14 item 5) times the training step: `moex bench --backward` and SonicMoE in training mode
# (bench/peers/sonicmoe_train.py) on SonicMoE's two published configurations at their own T and on SHAPES at
# TRAIN_TOKENS; the table gets a second part.
# Usage: bash bench/cuda_side_by_side.sh [--steps stage,install,moex,hf,sonic,train,table]
# Env: SHAPES (qwen3-30b-a3b,deepseek-v3), TOKENS (1,64,4096,16384), TRAIN_TOKENS (4096,16384), BUILD_DIR (build-gpu),
#      TRAIN_POINTS ("shapes tokens" pairs split by ';', default SonicMoE's two configurations and SHAPES at
#      TRAIN_TOKENS: one pair per call fits SonicMoE's first-call compile), PEERS (/tmp/moex-peers), HF_COMPILE (1: add
#      torch.compile rows), BUDGET_S (seconds for each SonicMoE sweep, 300), OUT.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT" || exit 1
STEPS=stage,install,moex,hf,sonic,table
[[ "${1:-}" == "--steps" ]] && STEPS=${2:?}
SHAPES=${SHAPES:-qwen3-30b-a3b,deepseek-v3}
TOKENS=${TOKENS:-1,64,4096,16384}
CLI=${BUILD_DIR:-$ROOT/build-gpu}/moex
PEERS=${PEERS:-/tmp/moex-peers}
RES=$PEERS/results
mkdir -p "$PEERS/parts" "$RES"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
log() { echo "cuda_side_by_side: $*" >&2; }
py=${PYTHON:-python3}
status=0

export QUACK_CACHE_DIR=$PEERS/quack QUACK_CACHE_AUTOTUNING=1

if want stage; then
    if [[ -f .peers/quack-cache.tar.xz ]]; then
        tar -C "$PEERS" -xJf .peers/quack-cache.tar.xz && log "unpacked SonicMoE's kernel cache"
    fi
    shopt -s nullglob
    for part in .peers/libs-base.part-*; do cp "$part" "$PEERS/parts/" && log "staged $(basename "$part")"; done
    [[ -f .peers/libs-base.sha256 ]] && cp .peers/libs-base.sha256 "$PEERS/parts/"
    shopt -u nullglob
fi

if want install && [[ ! -f $PEERS/site/.installed ]]; then
    if [[ ! -f $PEERS/parts/libs-base.sha256 ]] || ! (cd "$PEERS/parts" && sha256sum --quiet -c libs-base.sha256); then
        log "SonicMoE not installed: the staged parts are missing or do not check (see the carry plan above)"
    elif ! compgen -G ".peers/wheels/*.whl" >/dev/null; then
        log "SonicMoE not installed: no wheels in .peers/wheels (carry it)"
    else
        mkdir -p "$PEERS/site"
        cat "$PEERS"/parts/libs-base.part-* | xz -dc | tar -C "$PEERS/site" -xf - &&
            "$py" -m pip install -q --no-index --no-deps --no-compile --target "$PEERS/site" .peers/wheels/*.whl &&
            touch "$PEERS/site/.installed" && log "SonicMoE installed into $PEERS/site"
    fi
fi

if want moex; then
    if [[ -x $CLI ]]; then
        small=$(tr , '\n' <<<"$TOKENS" | awk '$1 <= 64' | paste -sd,)
        stamp=$(date +%s)  # moex bench rewrites its JSON file: one per call, so split sweeps add up
        "$CLI" bench --device cuda --shapes "$SHAPES" --tokens "$TOKENS" --backends batched_mm,grouped_mm \
            --case-seconds 0.3 --json-file "$RES/moex-$stamp.jsonl" >"$RES/moex.txt" 2>&1 || status=1
        if [[ -n $small ]]; then
            "$CLI" bench --device cuda --graph --shapes "$SHAPES" --tokens "$small" --backends batched_mm,grouped_mm \
                --case-seconds 0.3 --json-file "$RES/moex-graph-$stamp.jsonl" >>"$RES/moex.txt" 2>&1 || status=1
        fi
    else
        log "no moex program at $CLI: run scripts/gpu_check.sh --steps env,configure,build first"
        status=1
    fi
fi

if want hf; then
    compile=()
    [[ ${HF_COMPILE:-1} == 1 ]] && compile=(--compile --compile-by-T)
    "$py" bench/python_bench.py --peers-only --device cuda --shapes "$SHAPES" --tokens "$TOKENS" \
        --json "$RES/transformers.jsonl" "${compile[@]}" >"$RES/transformers.txt" 2>&1 || status=1
fi

if want sonic; then
    if [[ -f $PEERS/site/.installed && -f .peers/sonicmoe_bench.py ]]; then
        PYTHONPATH=$PEERS/site "$py" .peers/sonicmoe_bench.py --shapes "$SHAPES" --tokens "$TOKENS" \
            --budget-s "${BUDGET_S:-300}" --out "$RES/sonicmoe.jsonl" >"$RES/sonicmoe.txt" 2>&1 || status=1
    else
        # The table says why SonicMoE has no numbers at each point.
        IFS=, read -r -a shapes <<<"$SHAPES"
        IFS=, read -r -a tokens <<<"$TOKENS"
        for s in "${shapes[@]}"; do
            for t in "${tokens[@]}"; do
                echo "{\"kind\":\"skipped\",\"shape\":\"$s\",\"T\":$t,\"reason\":\"SonicMoE not installed on this machine\"}"
            done
        done >>"$RES/sonicmoe.jsonl"
    fi
fi

if want train; then
    IFS=';' read -r -a train_points <<<"${TRAIN_POINTS:-sonicmoe-coarse 32768;sonicmoe-7b 24576;$SHAPES ${TRAIN_TOKENS:-4096,16384}}"
    if [[ -x $CLI ]]; then
        stamp=$(date +%s)
        for point in "${train_points[@]}"; do
            read -r shapes tokens <<<"$point"
            for pass in forward --backward; do
                extra=()
                [[ $pass == --backward ]] && extra=(--backward)
                "$CLI" bench --device cuda --shapes "$shapes" --tokens "$tokens" --backends grouped_mm "${extra[@]}" \
                    --case-seconds 0.3 --json-file "$RES/moex-train-$stamp-${shapes%%,*}-${pass#--}.jsonl" \
                    >>"$RES/moex-train.txt" 2>&1 || status=1
            done
        done
    else
        log "no moex program at $CLI"
        status=1
    fi
    for point in "${train_points[@]}"; do
        read -r shapes tokens <<<"$point"
        PYTHONPATH=$PEERS/site "$py" bench/peers/sonicmoe_train.py --shapes "$shapes" --tokens "$tokens" \
            --budget-s "${BUDGET_S:-300}" --out "$RES/sonicmoe-train.jsonl" >>"$RES/sonicmoe-train.txt" 2>&1 || status=1
    done
fi

if want table; then
    shopt -s nullglob
    files=("$RES"/*.jsonl)
    shopt -u nullglob
    if ((${#files[@]})); then
        "$py" bench/cuda_side_by_side.py "${files[@]}" | tee "$RES/table.md"
        if [[ -n ${OUT:-} ]]; then
            mkdir -p "$OUT"
            cp "$RES/table.md" "$OUT/" && cat "${files[@]}" >"$OUT/side_by_side.jsonl"
            [[ -d $PEERS/quack ]] && tar -C "$PEERS" -cJf "$OUT/quack-cache.tar.xz" quack
        fi
    else
        log "no results in $RES yet"
    fi
fi
exit "$status"
