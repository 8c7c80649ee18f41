#!/usr/bin/env bash
# The model runtime on the GPU machine, in one call after scripts/gpu_check.sh has built build-gpu:
#   train   train the shipped model (scripts/train_embedded_model.py; copied to $OUT/moex-tiny-moe to bring it back)
#   ckpt    a random checkpoint with qwen3-30b-a3b layer shapes (scripts/make_bench_checkpoint.py, $LAYERS layers)
#   hf      transformers' generation speed on it (bench/hf_generate_bench.py: grouped_mm, batched_mm, compiled)
#   moex    `moex generate` on the same checkpoint: prefill and decode tokens/s per experts backend
# Usage: bash scripts/gpu_model_bench.sh [--steps train,ckpt,hf,moex]   (env: LAYERS=4 PROMPT=512 NEW=128
#        TRAIN_MINUTES=4 BUILD_DIR=build-gpu OUT=...). Prints one table at the end.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
STEPS=${2:-train,ckpt,hf,moex}
[[ "${1:-}" == "--steps" ]] || STEPS="train,ckpt,hf,moex"
BUILD=${BUILD_DIR:-$ROOT/build-gpu}
OUT=${OUT:-$BUILD/model-bench}
LAYERS=${LAYERS:-4} PROMPT=${PROMPT:-512} NEW=${NEW:-128}
CKPT=${CKPT:-/tmp/moex-qwen3-bench-$LAYERS}
mkdir -p "$OUT"
want() { [[ ",$STEPS," == *",$1,"* ]]; }
TABLE="$OUT/table.txt"
: >"$TABLE"
row() { printf '%-28s %-10s %12s %12s  %s\n' "$@" | tee -a "$TABLE"; }
row "what" "status" "prefill t/s" "decode t/s" "detail"

if want train; then
    t0=$(date +%s)
    if python3 "$ROOT/scripts/train_embedded_model.py" --stage train --minutes "${TRAIN_MINUTES:-4}" \
        --out "$ROOT/models/moex-tiny-moe" >"$OUT/train.log" 2>&1; then
        cp -r "$ROOT/models/moex-tiny-moe" "$OUT/"
        row "train embedded model" OK - - "$(( $(date +%s) - t0 ))s; $(grep -iE 'val' "$OUT/train.log" | tail -1 | cut -c1-80)"
    else
        row "train embedded model" FAIL - - "$(tail -3 "$OUT/train.log" | tr '\n' ' ' | cut -c1-120)"
    fi
fi

if want ckpt; then
    if python3 "$ROOT/scripts/make_bench_checkpoint.py" --out "$CKPT" --layers "$LAYERS" --device cuda \
        >"$OUT/ckpt.log" 2>&1; then
        row "bench checkpoint" OK - - "$LAYERS layers, $(du -sh "$CKPT" | cut -f1)"
    else
        row "bench checkpoint" FAIL - - "$(tail -2 "$OUT/ckpt.log" | tr '\n' ' ' | cut -c1-120)"
    fi
fi

if want hf; then
    python3 "$ROOT/bench/hf_generate_bench.py" --model "$CKPT" --prompt-tokens "$PROMPT" --new-tokens "$NEW" \
        >"$OUT/hf_generate.log" 2>&1
    grep '^{"setting"' "$OUT/hf_generate.log" >"$OUT/hf_generate.jsonl"
    python3 - "$OUT/hf_generate.jsonl" <<'PY' | while IFS='|' read -r a b c d; do row "$a" "$b" "$c" "$d" ""; done
import json, sys
for line in open(sys.argv[1]):
    j = json.loads(line)
    print(f"transformers {j.get('setting')}|{'OK' if 'error' not in j else 'FAIL'}|{j.get('prefill_tok_s', 0):.0f}|{j.get('decode_tok_s', 0):.1f}")
PY
    [[ -s "$OUT/hf_generate.jsonl" ]] || row "transformers" FAIL - - "$(tail -3 "$OUT/hf_generate.log" | tr '\n' ' ' | cut -c1-160)"
fi

if want moex; then
    # Each setting: the experts backend, then extra flags (--no-decode-graph: every op launched per token, the A/B of
    # the recorded decode step).
    for setting in grouped_mm batched_mm "grouped_mm --no-decode-graph"; do
        read -r impl flags <<<"$setting"
        log="$OUT/moex_generate_$impl${flags:+_nograph}.log"
        # shellcheck disable=SC2086  # flags is a list of words
        if "$BUILD/moex" generate --model "$CKPT" --device cuda --random-prompt "$PROMPT" --max-new-tokens "$NEW" \
                --ignore-eos --temperature 0 --runs 5 --experts-implementation "$impl" $flags --verbose >"$log" 2>&1; then
            stats=$(grep '^prefill:' "$log" | tail -1)
            pre=$(echo "$stats" | sed -E 's/.*prefill: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/')
            dec=$(echo "$stats" | sed -E 's/.*decode: [0-9]+ tokens, ([0-9.]+) tokens\/s.*/\1/')
            graph=$(echo "$stats" | grep -Eo '[0-9]+ steps from a CUDA graph')
            row "moex $setting" OK "$pre" "$dec" "$(grep -c 'experts run' "$log") backend changes; ${graph:-no graph}"
        else
            row "moex $setting" FAIL - - "$(tail -2 "$log" | tr '\n' ' ' | cut -c1-160)"
        fi
    done
fi
echo "==== model bench (layers $LAYERS, prompt $PROMPT, new $NEW; logs in $OUT) ===="
cat "$TABLE"
