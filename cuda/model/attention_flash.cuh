// Prefill attention for bf16, head_dim 128: flash attention (FlashAttention-2 schedule) with mma.sync m16n8k16.
// CTA = (q head, 64-query tile), 4 warps of 16 query rows; K/V stream through shared memory in 64-key tiles with a
// two-stage cp.async pipeline. Scores and the online softmax are f32 (base 2); P is rounded to bf16 for the P·V
// product as FlashAttention does; the output is rounded once. The KV cache already holds the new rows.
//
// TUTORIAL: register reuse. The f32 accumulator of S = Q·Kᵀ for two adjacent 8-key tiles (m16n8 C fragments)
// holds, per thread, exactly the elements the m16k16 A fragment of the next mma needs (rows g and g + 8, keys
// 2·tig, 2·tig + 1 and 2·tig + 8, 2·tig + 9), so P goes from S to the P·V mma without shared memory: convert two
// floats to a bf16 pair, four pairs per 16 keys. V is read with ldmatrix.trans because the mma wants keys (its k
// dimension) paired per register while V rows are key-major in memory.
#pragma once

#include <cstdint>

#include "cuda/model/async_copy.cuh"

namespace moex::cuda::model::flash {

inline constexpr int kThreads = 128;
inline constexpr int kBr = 64;  // query rows per CTA (16 per warp)
inline constexpr int kBc = 64;  // keys per tile
inline constexpr int kD = 128;  // head_dim
inline constexpr int kTileElems = 64 * kD;
inline constexpr size_t kSmemBytes = size_t(5) * kTileElems * 2;  // Q, K x 2 stages, V x 2 stages: 80 KiB

struct FlashParams {
    const __nv_bfloat16* q;        // (T, nq * 128) row-strided
    const __nv_bfloat16* k_cache;  // (max_len, nkv * 128), rows [0, pos0 + T) valid
    const __nv_bfloat16* v_cache;
    __nv_bfloat16* out;  // (T, nq * 128) row-strided
    int64_t ld_q, ld_cache, ld_out, T, pos0, window;
    int32_t G, n_qtiles;
    float scale_log2;
};

// Element offset of (row, 16-byte chunk) in a [64][128] bf16 tile; chunks are XOR-swizzled by row so that the 8 row
// addresses of one ldmatrix (and the 8 chunks of one row written by cp.async) fall in different bank groups.
__device__ __forceinline__ int swz(int row, int chunk) { return row * kD + ((chunk ^ (row & 7)) << 3); }

// Rows [row0, row0 + 64) of a (rows, ld) bf16 matrix starting at src; rows >= limit are zero-filled.
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, int64_t row0, int64_t limit,
                                          int64_t ld) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int idx = threadIdx.x + i * kThreads, r = idx >> 4, c = idx & 15;
        const int64_t row = row0 + r;
        const bool valid = row < limit;
        cp_async16(dst + swz(r, c), valid ? src + row * ld + c * 8 : src, valid ? 16 : 0);
    }
}

__global__ void __launch_bounds__(kThreads, 2) attention_flash_kernel(const __grid_constant__ FlashParams p) {
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __nv_bfloat16* q_s = reinterpret_cast<__nv_bfloat16*>(smem_raw);
    __nv_bfloat16* k_s = q_s + kTileElems;      // [2][64][128]
    __nv_bfloat16* v_s = k_s + 2 * kTileElems;  // [2][64][128]

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, tig = lane & 3;
    const int h = blockIdx.x, kvh = h / p.G;
    const int64_t t0 = int64_t(p.n_qtiles - 1 - int(blockIdx.y)) * kBr;  // heaviest (latest) tiles first
    const int64_t kv_len = p.pos0 + p.T;
    const int64_t t_last = min(t0 + kBr - 1, p.T - 1);
    const int64_t key_lo = p.window > 0 ? max(int64_t(0), p.pos0 + t0 - p.window + 1) : 0;
    const int64_t n_first = key_lo / kBc, n_last = (p.pos0 + t_last) / kBc;
    const __nv_bfloat16* kc = p.k_cache + int64_t(kvh) * kD;
    const __nv_bfloat16* vc = p.v_cache + int64_t(kvh) * kD;

    load_tile(q_s, p.q + int64_t(h) * kD + t0 * p.ld_q, 0, p.T - t0, p.ld_q);
    load_tile(k_s, kc, n_first * kBc, kv_len, p.ld_cache);
    load_tile(v_s, vc, n_first * kBc, kv_len, p.ld_cache);
    cp_async_commit();

    // Positions of this thread's two query rows (g and g + 8 of the warp's 16).
    const int64_t pos_w = p.pos0 + t0 + warp * 16;
    const int64_t pos_r[2] = {pos_w + g, pos_w + g + 8};

    uint32_t qf[kD / 16][4];
    float o[kD / 8][4];
#pragma unroll
    for (int j = 0; j < kD / 8; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m_r[2] = {-INFINITY, -INFINITY}, l_r[2] = {0.0f, 0.0f};

    for (int64_t n = n_first; n <= n_last; ++n) {
        const int stage = int((n - n_first) & 1);
        cp_async_wait<0>();
        __syncthreads();  // tile n is visible; every warp is done with the stage the next load overwrites
        if (n == n_first) {
#pragma unroll
            for (int kk = 0; kk < kD / 16; ++kk)
                ldmatrix_x4(qf[kk], q_s + swz(warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * kk + (lane >> 4)));
        }
        if (n < n_last) {
            load_tile(k_s + (stage ^ 1) * kTileElems, kc, (n + 1) * kBc, kv_len, p.ld_cache);
            load_tile(v_s + (stage ^ 1) * kTileElems, vc, (n + 1) * kBc, kv_len, p.ld_cache);
            cp_async_commit();
        }
        const __nv_bfloat16* ks = k_s + stage * kTileElems;
        const __nv_bfloat16* vs = v_s + stage * kTileElems;

        // S (16 x 64 per warp) = Q · Kᵀ
        float s[kBc / 8][4];
#pragma unroll
        for (int j = 0; j < kBc / 8; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kD / 16; ++kk) {
#pragma unroll
            for (int np = 0; np < kBc / 16; ++np) {
                uint32_t b[4];
                ldmatrix_x4(b, ks + swz(16 * np + (lane & 7) + (lane >> 4) * 8, 2 * kk + ((lane >> 3) & 1)));
                mma_bf16_16816(s[2 * np], qf[kk], b[0], b[1]);
                mma_bf16_16816(s[2 * np + 1], qf[kk], b[2], b[3]);
            }
        }

        // Causal / sliding-window / end-of-cache mask, only on tiles that cross a boundary for this warp.
        const int64_t kbase = n * kBc;
        const bool need_mask =
            kbase + kBc - 1 > pos_w || kbase + kBc > kv_len || (p.window > 0 && kbase <= pos_w + 15 - p.window);
        if (need_mask) {
#pragma unroll
            for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
                for (int c = 0; c < 4; ++c) {
                    const int64_t key = kbase + 8 * j + 2 * tig + (c & 1), pr = pos_r[c >> 1];
                    if (key > pr || key >= kv_len || (p.window > 0 && key <= pr - p.window)) s[j][c] = -INFINITY;
                }
        }

        // Online softmax for rows g (c = 0, 1) and g + 8 (c = 2, 3); the 4 threads of a quad share a row.
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < kBc / 8; ++j) mx = fmaxf(mx, fmaxf(s[j][2 * r], s[j][2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            const float m_new = fmaxf(m_r[r], mx * p.scale_log2);
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = exp2f(m_r[r] - base);
            m_r[r] = m_new;
            l_r[r] *= alpha;
#pragma unroll
            for (int j = 0; j < kD / 8; ++j) o[j][2 * r] *= alpha, o[j][2 * r + 1] *= alpha;
#pragma unroll
            for (int j = 0; j < kBc / 8; ++j)
#pragma unroll
                for (int c = 2 * r; c < 2 * r + 2; ++c) {
                    s[j][c] = exp2f(fmaf(s[j][c], p.scale_log2, -base));
                    l_r[r] += s[j][c];
                }
        }

        // O (16 x 128 per warp) += P · V
#pragma unroll
        for (int kb = 0; kb < kBc / 16; ++kb) {
            const uint32_t a[4] = {pack_bf16x2(s[2 * kb][0], s[2 * kb][1]), pack_bf16x2(s[2 * kb][2], s[2 * kb][3]),
                                   pack_bf16x2(s[2 * kb + 1][0], s[2 * kb + 1][1]),
                                   pack_bf16x2(s[2 * kb + 1][2], s[2 * kb + 1][3])};
#pragma unroll
            for (int dp = 0; dp < kD / 16; ++dp) {
                uint32_t b[4];
                ldmatrix_x4_trans(b, vs + swz(16 * kb + (lane & 7) + ((lane >> 3) & 1) * 8, 2 * dp + (lane >> 4)));
                mma_bf16_16816(o[2 * dp], a, b[0], b[1]);
                mma_bf16_16816(o[2 * dp + 1], a, b[2], b[3]);
            }
        }
    }

    // out = O / l, one rounding; rows past T are padding.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float l = l_r[r];
        l += __shfl_xor_sync(0xffffffffu, l, 1);
        l += __shfl_xor_sync(0xffffffffu, l, 2);
        const float inv = l > 0.0f ? 1.0f / l : 0.0f;
        const int64_t row = t0 + warp * 16 + g + 8 * r;
        if (row >= p.T) continue;
        __nv_bfloat16* dst = p.out + row * p.ld_out + int64_t(h) * kD + 2 * tig;
#pragma unroll
        for (int j = 0; j < kD / 8; ++j) {
            const uint32_t v = pack_bf16x2(o[j][2 * r] * inv, o[j][2 * r + 1] * inv);
            *reinterpret_cast<uint32_t*>(dst + 8 * j) = v;
        }
    }
}

}  // namespace moex::cuda::model::flash
