#!/usr/bin/env bash
# moex against its CPU peers in one run (issue #15 item 5): `moex bench`, transformers' experts backends
# (bench/hf_cpu_bench.py) and llama.cpp's experts layer (bench/peers/ggml.sh) on the same shapes, token counts and
# threads, one after the other on a quiet machine, then one markdown table (hf_cpu_bench.py --combine).
#
#   bash bench/cpu_side_by_side.sh                    # bf16 (ggml: bf16 and f16 weights), qwen3 + mixtral
#   DTYPE=f32 bash bench/cpu_side_by_side.sh          # f32 everywhere
#   QUANT=fp8_block bash bench/cpu_side_by_side.sh    # moex FP8 experts (bf16 activations) beside ggml's q8_0
#   QUANT=mxfp4 bash bench/cpu_side_by_side.sh        # moex MXFP4 beside ggml's MXFP4 and q4_0 (nvfp4: ggml's NVFP4)
#
# Env: MOEX (build/moex), PY (a python with torch + transformers, default ~/.cache/moex/venv/bin/python), SHAPES,
#      TOKENS, DTYPE (bf16 | f32), QUANT (none | fp8_block | mxfp4 | nvfp4), THREADS (default nproc), OUT (folder of the JSON lines),
#      SECONDS_PER_CASE (3), TORCH_GEMM (1: torch's dense GEMM rate, bench/torch_gemm_rate.py, joins moex bench's
#      floor as --peer-gemm, so the compute term is the machine's fastest GEMM: oneDNN's AMX on a Xeon; 0: not).
#      Slow peers are cut so the run stays bounded: moex's and transformers' batched_mm (one
#      weight copy per routed pair) and transformers' eager only up to SMALL_T (64); at T > SMALL_T transformers'
#      grouped_mm is timed on one call without a warm-up (its bf16 path takes minutes there on an AVX2 CPU).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
MOEX=${MOEX:-$ROOT/build/moex}
PY=${PY:-$HOME/.cache/moex/venv/bin/python}
SHAPES=${SHAPES:-qwen3-30b-a3b,mixtral-8x7b}
TOKENS=${TOKENS:-1,8,64,512,1024}
DTYPE=${DTYPE:-bf16}
QUANT=${QUANT:-none}
THREADS=${THREADS:-$(nproc)}
SMALL_T=${SMALL_T:-64}
CASE_S=${SECONDS_PER_CASE:-3}
OUT=${OUT:-$(mktemp -d /tmp/moex_side_by_side.XXXXXX)}
mkdir -p "$OUT"
[[ -x $MOEX ]] || { echo "cpu_side_by_side: no moex program at $MOEX (set MOEX=...)" >&2; exit 1; }

IFS=, read -r -a all_t <<<"$TOKENS"
small=() large=()
for t in "${all_t[@]}"; do if ((t <= SMALL_T)); then small+=("$t"); else large+=("$t"); fi; done
join() { local IFS=,; echo "$*"; }
log() { echo "cpu_side_by_side: $*" >&2; }

moex_args=(bench --shapes "$SHAPES" --dtype "$DTYPE" --threads "$THREADS" --case-seconds "$CASE_S" --json)
[[ $QUANT != none ]] && moex_args+=(--quant "$QUANT")
if [[ ${TORCH_GEMM:-1} == 1 ]]; then  # at moex bench's GEMM size: 2048³, and 4096³ too above 4 threads
    for n in 2048 $((THREADS > 4 ? 4096 : 0)); do
        ((n)) || continue
        rate=$("$PY" "$ROOT/bench/torch_gemm_rate.py" --dtype "$DTYPE" --n "$n" --threads "$THREADS") &&
            moex_args+=(--peer-gemm "$rate") && log "floor GEMM candidate: $rate"
    done
fi
# A failed case (an error, a wrong output, a time below its floor) makes moex bench exit 1 after the other cases:
# the peers still run, and this script exits 1 at the end.
status=0
log "moex ($QUANT weights, $DTYPE activations); JSON lines in $OUT"
: >"$OUT/moex.jsonl"
if ((${#small[@]})); then
    "$MOEX" "${moex_args[@]}" --tokens "$(join "${small[@]}")" --backends eager,batched_mm,grouped_mm \
        >>"$OUT/moex.jsonl" || status=1
fi
if ((${#large[@]})); then
    "$MOEX" "${moex_args[@]}" --tokens "$(join "${large[@]}")" --backends eager,grouped_mm >>"$OUT/moex.jsonl" ||
        status=1
fi
((status == 0)) || log "moex bench reported a failed case (see $OUT/moex.jsonl)"

peers=("$OUT/moex.jsonl")
if [[ $QUANT == none ]]; then  # transformers' CPU experts take no quantized weights
    log "transformers ($DTYPE)"
    hf=(--shapes "$SHAPES" --dtype "$DTYPE" --threads "$THREADS" --case-seconds "$CASE_S" --json)
    : >"$OUT/hf.jsonl"
    if ((${#small[@]})); then
        "$PY" "$ROOT/bench/hf_cpu_bench.py" "${hf[@]}" --tokens "$(join "${small[@]}")" \
            --backends eager,batched_mm,grouped_mm >>"$OUT/hf.jsonl"
    fi
    if ((${#large[@]})); then
        "$PY" "$ROOT/bench/hf_cpu_bench.py" "${hf[@]}" --tokens "$(join "${large[@]}")" --backends grouped_mm \
            --warmup 0 --reps 1 >>"$OUT/hf.jsonl"
    fi
    peers+=("$OUT/hf.jsonl")
fi

# ggml at the nearest weight precision: bf16 -> bf16 and f16, f32 -> f32, FP8 -> q8_0 (8.5 bits per weight), and the
# FP4 formats to ggml's own MXFP4 / NVFP4 (the same codes and scales; its dot products take the activations as q8_0),
# MXFP4 also beside q4_0 (4.5 bits per weight, llama.cpp's most used 4-bit type).
case "$QUANT/$DTYPE" in
    none/bf16) ggml_types=(bf16 f16) ;;
    none/*) ggml_types=("$DTYPE") ;;
    mxfp4/*) ggml_types=(mxfp4 q4_0) ;;
    nvfp4/*) ggml_types=(nvfp4) ;;
    *) ggml_types=(q8_0) ;;
esac
for w in "${ggml_types[@]}"; do
    log "llama.cpp ggml ($w weights)"
    bash "$ROOT/bench/peers/ggml.sh" --shapes "$SHAPES" --tokens "$TOKENS" --weights "$w" --threads "$THREADS" \
        --case-seconds "$CASE_S" --json >"$OUT/ggml-$w.jsonl"
    peers+=("$OUT/ggml-$w.jsonl")
done

"$PY" "$ROOT/bench/hf_cpu_bench.py" --combine "${peers[@]}"
exit "$status"
