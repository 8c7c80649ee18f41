#!/usr/bin/env bash
# shellcheck disable=SC2016  # the expect conditions are awk expressions over the census columns ($2, $3, $4)
# The SASS census of libmoex_cuda.a as a test: the tensor-core and TMA instructions each kernel family was written
# for must be in its machine code, so a change that loses them fails here, before any timing.
# It also checks that the wgmma kernels keep their accumulators in registers (local loads and stores, LDL / STL, are
# spills: 500 of them in the FP8 grouped GEMM once made FP8 prefill 2.4x slower), and runs sass_loops.py: batched_mm's
# mma main loops hold no division.
# Usage: sass_census.sh CUOBJDUMP LIBMOEX_CUDA   (one line per kernel that uses HGMMA / UTMALDG / HMMA / QGMMA;
# QGMMA is the FP8 (e4m3) wgmma)
set -euo pipefail
cuobjdump=$1 lib=$2
sass=$(mktemp)
trap 'rm -f "$sass"' EXIT
"$cuobjdump" --dump-sass "$lib" >"$sass"
census=$(awk '
    /Function :/ { if (n != "") print n, h, t, m, q, l; n = $3; h = 0; t = 0; m = 0; q = 0; l = 0 }
    /HGMMA/ { h++ } /UTMALDG/ { t++ } /HMMA/ { m++ } /QGMMA/ { q++ } /[^A-Z](LDL|STL)[ .]/ { l++ }
    END { if (n != "") print n, h, t, m, q, l }' "$sass")
printf '%-6s %-7s %-5s %-5s %-5s %s\n' HGMMA UTMALDG HMMA QGMMA LDL/STL kernel
awk '$2 + $3 + $4 + $5 > 0 { printf "%-6d %-7d %-5d %-5d %-7d %s\n", $2, $3, $4, $5, $6, substr($1, 1, 100) }' <<<"$census"

fail=0
# expect FAMILY_REGEX COUNT AWK_CONDITION WHAT: exactly COUNT kernels match, each meeting the condition.
expect() {
    local family=$1 count=$2 cond=$3 what=$4 found ok
    found=$(awk -v re="$family" '$1 ~ re' <<<"$census" | wc -l)
    ok=$(awk -v re="$family" "\$1 ~ re && ($cond)" <<<"$census" | wc -l)
    if ((found != count || ok != count)); then
        echo "FAIL: $what: $ok of $found kernels matching /$family/ (want $count of $count)"
        fail=1
    else
        echo "ok: $what ($count kernels)"
    fi
}
# The sm_90a kernel's last template argument is how it takes B (BInE0: bf16/f16 wgmma, BInE1: e4m3 wgmma, BInE2: e2m1
# codes converted to bf16 in shared memory, then bf16 wgmma).
expect 'grouped_gemm_sm90_kernel.*BInE0EEEv' 16 '$2 >= 4 && $3 >= 5' "sm_90a grouped GEMM issues HGMMA and UTMALDG"
expect 'grouped_gemm_sm90_kernel.*BInE1EEEv' 8 '$5 >= 8 && $3 >= 5' "sm_90a FP8 grouped GEMM issues QGMMA and UTMALDG"
expect 'grouped_gemm_sm90_kernel.*BInE2EEEv' 3 '$2 >= 4 && $3 >= 3' "sm_90a FP4 grouped GEMM issues HGMMA and UTMALDG"
# batched_mm: {bf16, f16} x 4 tile shapes, plain, quantized with 1, 2 or 4 vectors per load, and FP8 x e4m3
# (mma.sync e4m3, which ptxas lowers to f16 HMMAs on sm_90), plus {bf16, f16} x 2 small tiles with 16 loads in flight.
expect 'batched_proj_kernel.*LoopE0E' 44 '$4 > 0' "batched_mm mma loop issues HMMA"
expect 'weight_grad_sm90_kernel' 2 '$2 >= 4 && $3 >= 2' "sm_90a weight-gradient GEMM issues HGMMA and UTMALDG"
# Spills, as built today: none in the 16-bit and FP4 grouped GEMMs or the weight gradient; 16 in the FP8 gate epilogue
# into e4m3 codes; more in any of them fails.
expect 'grouped_gemm_sm90_kernel.*BInE0EEEv' 16 '$6 == 0' "sm_90a grouped GEMM does not spill"
expect 'grouped_gemm_sm90_kernel.*BInE1EEEv' 8 '$6 <= 16' "sm_90a FP8 grouped GEMM spills at most 16 local loads/stores"
expect 'grouped_gemm_sm90_kernel.*BInE2EEEv' 3 '$6 == 0' "sm_90a FP4 grouped GEMM does not spill"
expect 'weight_grad_sm90_kernel' 2 '$6 == 0' "sm_90a weight-gradient GEMM does not spill"
# portable: {bf16, f16} x {vector, scalar} x {K-major, N-major, quantized K-major}
expect 'grouped_gemm_portable_kernelI(6__half|13__nv_bfloat16)' 12 '$4 > 0' "portable grouped GEMM (16-bit) issues HMMA"
expect 'attention_flash_kernel' 1 '$4 > 0' "flash attention issues HMMA"
python3 "$(dirname "${BASH_SOURCE[0]}")/sass_loops.py" "$sass" || fail=1
exit $fail
