// The backward's two GEMM kernels, plain f32 SIMT tiles (64 x 64 outputs per CTA, 4 x 4 per thread, K in slices of
// 16 through shared memory): every output element is summed by one thread in K order, so the results are the same
// bits on every run. Operands of any dtype are widened to f32 on their way into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/backward/backward_kernels.h"
#include "cuda/backward/operand.cuh"
#include "cuda/common/numeric.cuh"

namespace moex::cuda::backward {

inline constexpr int kThreads = 256;  // 16 x 16 threads, each 4 x 4 outputs
inline constexpr int kSliceK = 16;    // K (or rows, for the weight gradient) per shared-memory slice
inline constexpr int kPad = 4;        // shared rows padded against bank conflicts of the transposing stores

// The 4 x 4 outputs of thread (tx, ty): rows ty + 16 i, columns tx + 16 j of the tile.
__device__ __forceinline__ void mma_slice(float (*As)[kTile + kPad], float (*Bs)[kTile + kPad], int tx, int ty,
                                          float (&acc)[4][4]) {
#pragma unroll
    for (int kk = 0; kk < kSliceK; ++kk) {
        float a[4], b[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) a[i] = As[kk][ty + 16 * i], b[i] = Bs[kk][tx + 16 * i];
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
            for (int j = 0; j < 4; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// C (S, N) f32 = A · B_eᵀ (+ bias) per routing tile: blockIdx.x the tile (past *num_tiles: nothing), blockIdx.y the
// 64 columns. TA: A's element type (f32 for an f32 buffer), TB: B's and the bias's.
template <class TA, class TB>
__global__ void __launch_bounds__(kThreads) row_gemm_kernel(const __grid_constant__ RowGemmArgs g) {
    const int tile = int(blockIdx.x);
    if (tile >= *g.num_tiles) return;
    __shared__ float As[kSliceK][kTile + kPad];  // As[c][r] = A(row0 + r, k0 + c)
    __shared__ float Bs[kSliceK][kTile + kPad];  // Bs[c][n] = B_e(n0 + n, k0 + c)
    __shared__ int64_t a_off[kTile];             // element offset of each tile row in A, -1 past the tile's rows
    __shared__ float a_scale[kTile];
    const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
    const int e = g.tile_expert[tile], row0 = g.tile_row0[tile], nrows = g.tile_nrows[tile];
    const int64_t n0 = int64_t(blockIdx.y) * kTile, N = g.N, K = g.K;
    if (tid < kTile) {
        const bool in = tid < nrows;
        a_off[tid] = in ? operand_offset(g.A, row0 + tid) : -1;
        a_scale[tid] = in && g.A.row_scale ? g.A.row_scale[row0 + tid] : 1.0f;
    }
    __syncthreads();
    const TA* A = static_cast<const TA*>(g.A.data);
    const TB* B = static_cast<const TB*>(g.B) + int64_t(e) * N * K;
    float acc[4][4] = {};
    for (int64_t k0 = 0; k0 < K; k0 += kSliceK) {
        for (int i = tid; i < kTile * kSliceK; i += kThreads) {
            const int r = i / kSliceK, c = i % kSliceK;
            const int64_t kc = k0 + c;
            As[c][r] = a_off[r] >= 0 && kc < K ? to_f32(A[a_off[r] + kc]) * a_scale[r] : 0.0f;
        }
        for (int i = tid; i < kTile * kSliceK; i += kThreads) {
            int n, c;
            if (g.b_k_major) {
                n = i / kSliceK, c = i % kSliceK;  // contiguous along K
            } else {
                c = i / kTile, n = i % kTile;  // contiguous along N
            }
            const int64_t nn = n0 + n, kc = k0 + c;
            float v = 0.0f;
            if (nn < N && kc < K) v = to_f32(g.b_k_major ? B[nn * K + kc] : B[kc * N + nn]);
            Bs[c][n] = v;
        }
        __syncthreads();
        mma_slice(As, Bs, tx, ty, acc);
        __syncthreads();
    }
    const TB* bias = g.bias ? static_cast<const TB*>(g.bias) + int64_t(e) * N : nullptr;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int r = ty + 16 * i;
        if (r >= nrows) continue;
        float* c_row = g.C + int64_t(row0 + r) * N;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t n = n0 + tx + 16 * j;
            if (n < N) c_row[n] = bias ? acc[i][j] + to_f32(bias[n]) : acc[i][j];
        }
    }
}

// C_e (M, L) = Σ_r P(r, :)ᵀ Q(r, :) over expert e's rows, 16 rows per slice, in row order. One CTA per 64 x 64
// tile of one expert, the flat blockIdx.x = (e · m_tiles + mt) · l_tiles + lt. TP, TQ: the operands' element types,
// TC: the gradient's.
template <class TP, class TQ, class TC>
__global__ void __launch_bounds__(kThreads) weight_grad_kernel(const __grid_constant__ WeightGradArgs g) {
    const int64_t m_tiles = (g.M + kTile - 1) / kTile, l_tiles = (g.L + kTile - 1) / kTile;
    const int64_t b = int64_t(blockIdx.x);
    const int64_t e = b / (m_tiles * l_tiles), m0 = (b / l_tiles) % m_tiles * kTile, l0 = b % l_tiles * kTile;
    __shared__ float Ps[kSliceK][kTile + kPad];  // Ps[r][m] = P(rows0 + r, m0 + m)
    __shared__ float Qs[kSliceK][kTile + kPad];  // Qs[r][l] = Q(rows0 + r, l0 + l)
    __shared__ int64_t p_off[kSliceK], q_off[kSliceK];
    __shared__ float p_scale[kSliceK], q_scale[kSliceK];
    const int tid = int(threadIdx.x), tx = tid % 16, ty = tid / 16;
    const int start = g.expert_row_start[e], count = g.expert_count[e];
    const TP* P = static_cast<const TP*>(g.P.data);
    const TQ* Q = static_cast<const TQ*>(g.Q.data);
    float acc[4][4] = {};
    for (int r0 = 0; r0 < count; r0 += kSliceK) {
        if (tid < 2 * kSliceK) {
            const int r = tid % kSliceK;
            const bool in = r0 + r < count, is_p = tid < kSliceK;
            const RowOperand& o = is_p ? g.P : g.Q;
            const int row = start + r0 + r;
            (is_p ? p_off : q_off)[r] = in ? operand_offset(o, row) : -1;
            (is_p ? p_scale : q_scale)[r] = in && o.row_scale ? o.row_scale[row] : 1.0f;
        }
        __syncthreads();
        for (int i = tid; i < kTile * kSliceK; i += kThreads) {
            const int r = i / kTile, c = i % kTile;  // contiguous along the row
            const int64_t m = m0 + c, l = l0 + c;
            Ps[r][c] = p_off[r] >= 0 && m < g.M ? to_f32(P[p_off[r] + m]) * p_scale[r] : 0.0f;
            Qs[r][c] = q_off[r] >= 0 && l < g.L ? to_f32(Q[q_off[r] + l]) * q_scale[r] : 0.0f;
        }
        __syncthreads();
        mma_slice(Ps, Qs, tx, ty, acc);
        __syncthreads();
    }
    TC* C = static_cast<TC*>(g.C) + e * g.M * g.L;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const int64_t m = m0 + ty + 16 * i;
        if (m >= g.M) continue;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const int64_t l = l0 + tx + 16 * j;
            if (l < g.L) C[m * g.L + l] = from_f32<TC>(acc[i][j]);
        }
    }
}

}  // namespace moex::cuda::backward
