// FP8 weights' block scales in the sm_90a grouped GEMM (grouped_gemm_sm90.cuh, BIn::kFp8): one producer warp
// stages, for every ring stage, the two B halves' scales of its 128-deep K block, decoded to f32 and multiplied by
// the expert's global scale, into an 8-byte slot beside the stage, and arrives on the stage's full barrier (which
// then waits for the TMA bytes and this arrival). A consumer reads each half's scale after that half's MMAs are waited.
// Why not in the consumers: a B scale word is the same for every thread of the warpgroup, so ptxas keeps it in a
// uniform register and moves it there (R2UR) right after its global load, which made the MMA warps wait an L2
// round trip in every K block however far ahead the load was issued (bench/RESULTS.md AM1: 6-7% of the main loop's
// samples) besides ~60 instructions of index arithmetic and format dispatch per block. The slots take 32 bytes of
// the 960 the kernel's shared memory leaves free (A's activation scales, 512 bytes a stage, do not fit; they differ
// per thread, so their loads are vector loads the consumers issue two blocks ahead without such a wait).
#pragma once

#include <cstdint>

#include "cuda/common/quant.cuh"

namespace moex::cuda::sm90 {

inline constexpr uint32_t kFp8ScaleSlotBytes = 8;  // float2: the two B halves' scales of one stage

// Where one tile's B scales are: expert e (in range), the B rows of the two 128-wide halves, and whether the second
// half exists (N = 128: no second half, its scale 0).
struct Fp8ScaleRows {
    int64_t row0, row1;  // first scale word of each half's row of blocks
    float g;             // the expert's global scale (1 without)
    bool has_half1;
};

__device__ __forceinline__ Fp8ScaleRows fp8_scale_rows(const WeightScales& s, int32_t e, int32_t half0, int32_t half1,
                                                       int32_t n) {
    const auto row = [&](int32_t r) { return (int64_t(e) * s.rows_b + (int64_t(r) >> s.row_shift)) * s.cols_b; };
    const bool h1 = half1 < n;
    return {row(half0), h1 ? row(half1) : 0, s.global != nullptr ? s.global[e] : 1.f, h1};
}

// The f32 scales of K block kb (128 deep) of both halves. Weight blocks of 2^col_shift >= 128 along K: block
// kb >> (col_shift - 7); shifts in 64 bits (a per-tensor scale is one block of shift 62, cuda_bridge.cpp).
__device__ __forceinline__ float2 fp8_block_scales(const WeightScales& s, const Fp8ScaleRows& r, int32_t kb) {
    const int64_t c = int64_t(kb) >> (s.col_shift - 7);
    const float w0 = decode_scale_word(s, scale_word_at(s, r.row0 + c)) * r.g;
    const float w1 = r.has_half1 ? decode_scale_word(s, scale_word_at(s, r.row1 + c)) * r.g : 0.f;
    return make_float2(w0, w1);
}

}  // namespace moex::cuda::sm90
