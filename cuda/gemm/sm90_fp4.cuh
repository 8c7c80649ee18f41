// FP4 weights (MXFP4, NVFP4) in the sm_90a grouped GEMM (grouped_gemm_sm90.cuh, BIn::kFp4). Hopper's tensor cores
// take no e2m1, so B goes through shared memory twice: the TMA thread loads each stage's e2m1 bytes (256 rows x 32
// bytes) into a byte ring beside A's stage, and the producer warpgroup's other three warps convert them into bf16
// code * fold scale (exact: quant.cuh e2m1x8_to_bf16) in the 128-byte swizzled layout a bf16 TMA load would have
// written, into a ring of kB4Stages stages the consumers' wgmma reads as they read a 16-bit B. NVFP4's global scale
// multiplies the accumulators before the epilogue. Per stage a converter thread reads 16-byte units (32 codes of one
// row, one MXFP4 scale or two NVFP4 ones) and writes four 16-byte chunks; the scales of the next stage are loaded
// while this one converts.
#pragma once

#include <cstdint>

#include "cuda/common/quant.cuh"
#include "cuda/gemm/sm90_scheduler.cuh"
#include "cuda/gemm/sm90_tma.cuh"

namespace moex::cuda::sm90 {

inline constexpr uint32_t kB4Bytes = 256 * 32;       // one stage of e2m1 B: 256 rows x 64 codes
inline constexpr int32_t kB4Stages = 3;              // converted (bf16) B stages
inline constexpr uint32_t kConverterThreads = 96;    // warps 9-11 (warp 8 issues the TMA loads)
inline constexpr uint32_t kB4Units = kB4Bytes / 16;  // 512 units per stage
inline constexpr uint32_t kB4UnitsPerThread = (kB4Units + kConverterThreads - 1) / kConverterThreads;  // 6

// What the converter warps need of the kernel's parameters and shared memory.
struct Fp4Converter {
    const WeightScales* scales;  // (E, N, K / 32) ue8m0 (mxfp4) or (E, N, K / 16) e4m3 (nvfp4)
    const int32_t* m_tile_expert;
    int32_t E, N, n_half, K, num_kb;
    bool gate_concat;
    const uint8_t* raw;  // kRawStages x kB4Bytes: row r of a stage at r * 32
    uint8_t* b16;        // kB4Stages x 32 KB: row r at r * 128, 16-byte chunk c at (c ^ (r % 8)) * 16
    uint64_t *full, *bfull, *bempty;
};

// The stored scale bits of unit u (row r = u / 2 of the tile's 256 B rows, codes 32·(u % 2) .. of stage kb): one
// ue8m0 byte, or two e4m3 bytes (the unit's two 16-code blocks, low byte first); 0 past N or K (codes are zero
// there: TMA fills them), a finite fold scale.
template <bool kNvfp4>
__device__ __forceinline__ uint32_t fp4_unit_scale(const Fp4Converter& c, int32_t e, int32_t half0, int32_t half1,
                                                   uint32_t u, int32_t kb) {
    const int32_t r = static_cast<int32_t>(u >> 1), n = r < 128 ? half0 + r : half1 + (r - 128);
    const int32_t k = kb * 64 + static_cast<int32_t>(u & 1) * 32;
    if (n >= c.N || k >= c.K) return 0u;
    const WeightScales& s = *c.scales;
    const int64_t i = (int64_t(e) * s.rows_b + n) * s.cols_b + (k >> s.col_shift);
    const uint8_t* data = static_cast<const uint8_t*>(s.data);
    if constexpr (kNvfp4) return *reinterpret_cast<const uint16_t*>(data + i);  // i even: 32 | k, 16 codes a scale
    return data[i];
}

template <bool kNvfp4>
__device__ __forceinline__ void fp4_load_scales(const Fp4Converter& c, int32_t e, int32_t half0, int32_t half1,
                                                uint32_t ctid, int32_t kb, uint32_t (&s)[kB4UnitsPerThread]) {
#pragma unroll
    for (uint32_t i = 0; i < kB4UnitsPerThread; ++i) {
        const uint32_t u = ctid + i * kConverterThreads;
        s[i] = u < kB4Units ? fp4_unit_scale<kNvfp4>(c, e, half0, half1, u, kb) : 0u;
    }
}

// One stage: every unit of this thread from the byte ring into the bf16 ring.
template <bool kNvfp4>
__device__ __forceinline__ void fp4_convert_stage(const uint8_t* raw, uint8_t* b16, uint32_t ctid,
                                                  const uint32_t (&s)[kB4UnitsPerThread]) {
#pragma unroll
    for (uint32_t i = 0; i < kB4UnitsPerThread; ++i) {
        const uint32_t u = ctid + i * kConverterThreads;
        if (u >= kB4Units) break;
        const uint32_t r = u >> 1, q = u & 1;
        const uint4 codes = *reinterpret_cast<const uint4*>(raw + u * 16);
        const __nv_bfloat162 f0 = e2m1_fold_bf16x2<kNvfp4>(s[i]);
        const __nv_bfloat162 f1 = kNvfp4 ? e2m1_fold_bf16x2<kNvfp4>(s[i] >> 8) : f0;
        const uint32_t words[4] = {codes.x, codes.y, codes.z, codes.w};
        uint8_t* row = b16 + r * 128;
#pragma unroll
        for (uint32_t j = 0; j < 4; ++j) {
            const uint32_t chunk = (q * 4 + j) ^ (r & 7);
            *reinterpret_cast<uint4*>(row + chunk * 16) = e2m1x8_to_bf16(words[j], j < 2 ? f0 : f1);
        }
    }
}

// The converter warps' loop over this CTA's tiles (the TMA thread's order): wait for the stage's bytes and a free
// bf16 stage, convert, publish to the async proxy, arrive (every converter thread: bfull counts 96).
template <bool kNvfp4, int32_t kRawStages>
__device__ void fp4_convert_tiles(const Fp4Converter& c, const TileScheduler& sched, uint32_t ctid) {
    uint32_t stage = 0, phase = 0, bst = 0, bph = 0;
    uint32_t cur[kB4UnitsPerThread], nxt[kB4UnitsPerThread] = {};
    for (int32_t t = blockIdx.x; t < sched.total; t += gridDim.x) {
        const TileCoord tile = sched.decode(t);
        int32_t e = c.m_tile_expert[tile.m];
        e = static_cast<uint32_t>(e) < static_cast<uint32_t>(c.E) ? e : 0;  // as the TMA thread: in bounds, unused
        const int32_t half0 = c.gate_concat ? tile.n * 128 : tile.n * 256;
        const int32_t half1 = c.gate_concat ? c.n_half + half0 : half0 + 128;
        fp4_load_scales<kNvfp4>(c, e, half0, half1, ctid, 0, cur);
        for (int32_t kb = 0; kb < c.num_kb; ++kb) {
            if (kb + 1 < c.num_kb) fp4_load_scales<kNvfp4>(c, e, half0, half1, ctid, kb + 1, nxt);
            mbar_wait(&c.full[stage], phase);
            mbar_wait(&c.bempty[bst], bph ^ 1);
            fp4_convert_stage<kNvfp4>(c.raw + stage * kB4Bytes, c.b16 + bst * (256 * 128), ctid, cur);
            fence_proxy_async_smem();
            mbar_arrive(&c.bfull[bst]);
#pragma unroll
            for (uint32_t i = 0; i < kB4UnitsPerThread; ++i) cur[i] = nxt[i];
            if (++stage == kRawStages) stage = 0, phase ^= 1;
            if (++bst == kB4Stages) bst = 0, bph ^= 1;
        }
    }
}

}  // namespace moex::cuda::sm90
