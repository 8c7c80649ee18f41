// FP4 weights (MXFP4, NVFP4) in the sm_90a grouped GEMM (grouped_gemm_sm90.cuh, BIn::kFp4). Hopper's tensor cores
// take no e2m1, so B goes through shared memory twice: the TMA thread loads each stage's e2m1 bytes (256 rows x 32
// bytes) into a byte ring beside A's stage, and the two consumer warpgroups convert them into bf16 code * fold scale
// (exact: quant.cuh e2m1x8_to_bf16) in the 128-byte swizzled layout a bf16 TMA load would have written, into a ring of
// kB4Stages stages their wgmma reads as it reads a 16-bit B. Warpgroup w converts rows 128w .. 128w + 127 of stage
// kb + 1 while the MMAs of stage kb run (the issue slots a consumer leaves idle while its wgmma runs); the scales of a
// stage are loaded two stages ahead. NVFP4's global scale multiplies the accumulators before the epilogue.
// A thread converts two 16-byte units (32 codes of one row: one MXFP4 scale or two NVFP4 ones), four 16-byte chunks
// each.
#pragma once

#include <cstdint>

#include "cuda/common/quant.cuh"

namespace moex::cuda::sm90 {

inline constexpr uint32_t kB4Bytes = 256 * 32;  // one stage of e2m1 B: 256 rows x 64 codes
inline constexpr int32_t kB4Stages = 3;         // converted (bf16) B stages
inline constexpr uint32_t kB4Threads = 256;     // both consumer warpgroups convert

// Where one tile's B rows and scales are: the two 128-row halves (half0, half1) of expert e (in range).
struct Fp4Tile {
    const WeightScales* scales;  // (E, N, K / 32) ue8m0 (mxfp4) or (E, N, K / 16) e4m3 (nvfp4)
    int32_t e, half0, half1, N, K, num_kb;
};

// A consumer thread's two units of a stage: u0 = 256·wg + tid and u0 + 128 (rows u0 / 2 and u0 / 2 + 64 of the
// tile, codes 32·(tid % 2) ..).
__device__ __forceinline__ uint32_t fp4_first_unit(uint32_t wg, uint32_t tid) { return 256 * wg + tid; }

// The stored scale bits of unit u at stage kb: one ue8m0 byte, or two e4m3 bytes (the unit's two 16-code blocks,
// low byte first); 0 past N, K or the tile's last stage (codes are zero there: TMA fills them), a finite fold scale.
template <bool kNvfp4>
__device__ __forceinline__ uint32_t fp4_unit_scale(const Fp4Tile& t, uint32_t u, int32_t kb) {
    const int32_t r = static_cast<int32_t>(u >> 1), n = r < 128 ? t.half0 + r : t.half1 + (r - 128);
    const int32_t k = kb * 64 + static_cast<int32_t>(u & 1) * 32;
    if (kb >= t.num_kb || n >= t.N || k >= t.K) return 0u;
    const WeightScales& s = *t.scales;
    const int64_t i = (int64_t(t.e) * s.rows_b + n) * s.cols_b + (k >> s.col_shift);
    const uint8_t* data = static_cast<const uint8_t*>(s.data);
    if constexpr (kNvfp4) return *reinterpret_cast<const uint16_t*>(data + i);  // i even: 32 | k, 16 codes a scale
    return data[i];
}
template <bool kNvfp4>
__device__ __forceinline__ uint2 fp4_scales(const Fp4Tile& t, uint32_t u0, int32_t kb) {
    return make_uint2(fp4_unit_scale<kNvfp4>(t, u0, kb), fp4_unit_scale<kNvfp4>(t, u0 + 128, kb));
}

// This thread's two units of one stage, from the byte ring's stage into the bf16 ring's stage.
template <bool kNvfp4>
__device__ __forceinline__ void fp4_convert_units(const uint8_t* raw, uint8_t* b16, uint32_t u0, uint2 s) {
#pragma unroll
    for (uint32_t i = 0; i < 2; ++i) {
        const uint32_t u = u0 + 128 * i, r = u >> 1, q = u & 1, sw = i == 0 ? s.x : s.y;
        const uint4 codes = *reinterpret_cast<const uint4*>(raw + u * 16);
        const __nv_bfloat162 f0 = e2m1_fold_bf16x2<kNvfp4>(sw);
        const __nv_bfloat162 f1 = kNvfp4 ? e2m1_fold_bf16x2<kNvfp4>(sw >> 8) : f0;
        const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
        uint8_t* row = b16 + r * 128;
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) {
            const uint32_t chunk = (q * 4 + j) ^ (r & 7);
            *reinterpret_cast<uint4*>(row + chunk * 16) = e2m1x8_to_bf16(words[j], j < 2 ? f0 : f1);
        }
    }
}

}  // namespace moex::cuda::sm90
