// Split-K decode attention (flash-decoding) for T * (nq / nkv) <= 16 query rows per kv head, in ONE launch:
// CTA (split, kv head) streams its key range of the cache through shared memory in 64-key chunks (cp.async, two
// stages), reading the T new rows from k/v instead of the cache and writing them into it; it scores every query
// row of the kv head's q-head group against each chunk (online softmax in base 2), and stores unnormalised partial
// outputs. The last CTA of a kv head to arrive (an atomic counter it resets) merges the partials and writes out.
//
// TUTORIAL: why split-K. At T = 1 a layer's attention is 32 query heads x one row: one CTA per head would use 32 of
// 132 SMs, each streaming the whole cache of its kv head. Splitting the keys gives every SM a slice (the cache is read
// once, by all SMs in parallel) at the cost of writing M x D floats per split and one merge: with 4 kv heads and a
// 4096-row cache, 32 splits of 128 keys make 128 CTAs, and the merge reads 32 x 8 x 128 floats per kv head.
#pragma once

#include <cstdint>

#include "cuda/common/pdl.cuh"
#include "cuda/model/async_copy.cuh"
#include "cuda/model/model_common.cuh"
#include "cuda/model/model_ops.h"

namespace moex::cuda::model::decode {

inline constexpr int kThreads = 128;
inline constexpr int kMaxRows = int(kDecodeMaxRows);  // query rows (t, g) per kv head
inline constexpr int kMaxSplits = 128;

template <int D>
inline constexpr int kChunk = D <= 128 ? 64 : 32;  // keys per shared-memory stage

struct DecodeParams {
    const void* q;  // (T, nq * D) row-strided
    const void* k;  // (T, nkv * D) row-strided, the new rows
    const void* v;
    void* k_cache;  // (max_len, nkv * D)
    void* v_cache;
    void* out;          // (T, nq * D) row-strided
    float* part_o;      // (nkv, splits, M, D)  unnormalised partial outputs
    float2* part_ml;    // (nkv, splits, M)     (running max in base 2, sum of exponentials)
    int32_t* counters;  // (nkv) arrivals, zero between launches
    int64_t ld_q, ld_k, ld_v, ld_out, ld_cache;
    int64_t pos0, window, key_begin, key_end, keys_per_split;
    int32_t T, G, M, splits;
    float scale_log2;  // softmax scale * log2(e)
    // A captured decode step: pos0 read from here when the kernel runs, the key range and split derived from it as
    // the host derives them (gridDim.x is then the most splits the layout can take); max_len bounds it.
    const int64_t* pos_device;
    int64_t max_len;
    int32_t sm_count;
};

template <class T, int D>
inline constexpr size_t smem_bytes() {
    constexpr int C = kChunk<D>, LD = D + 16 / int(sizeof(T));
    return size_t(kMaxRows) * D * 4 + size_t(4) * C * LD * sizeof(T) + size_t(kMaxRows) * C * 4 +
           size_t(kMaxSplits) * kMaxRows * 4 + 3 * kMaxRows * 4 + 16;
}

template <class T, int D>
__global__ void __launch_bounds__(kThreads) attention_decode_kernel(const __grid_constant__ DecodeParams p) {
    pdl_enter();  // launched by launch_pdl (cuda/common/pdl.cuh)
    constexpr int C = kChunk<D>;
    constexpr int E = kVec16<T>;  // elements per 16-byte vector
    constexpr int LD = D + E;     // padded shared row: 16-byte shifted rows keep 16-byte reads conflict-free
    constexpr int VPR = D / E;    // vectors per row
    // Scores: thread (key j = tid % C, group sg = tid / C) dots key j with rows sg, sg + SG, ... (independent chains).
    constexpr int SG = kThreads / C, kSRows = (kMaxRows + SG - 1) / SG;
    // p · v: thread (cg = tid % 64, og = tid / 64) owns columns [cg·CPT, cg·CPT + CPT) of rows og, og + OG, ...
    // A warp shares its row group, so every probability it reads from shared memory is a broadcast.
    constexpr int CPT = D / 64, OG = kThreads / 64, kORows = kMaxRows / OG;
    static_assert(D % 64 == 0 && kThreads % C == 0 && C % 4 == 0 && kMaxRows % OG == 0);

    extern __shared__ __align__(16) unsigned char smem[];
    float* q_s = reinterpret_cast<float*>(smem);               // [kMaxRows][D]
    T* kv_s = reinterpret_cast<T*>(q_s + kMaxRows * D);        // [stage][k|v][C][LD]
    float* s_s = reinterpret_cast<float*>(kv_s + 4 * C * LD);  // [kMaxRows][C] scores, then probabilities
    float* w_s = s_s + kMaxRows * C;                           // [kMaxSplits][kMaxRows] merge weights
    float* row_m = w_s + kMaxSplits * kMaxRows;
    float* row_l = row_m + kMaxRows;
    float* row_a = row_l + kMaxRows;
    int* last_s = reinterpret_cast<int*>(row_a + kMaxRows);

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int kvh = blockIdx.y, split = blockIdx.x, M = p.M, G = p.G;
    int64_t pos0 = p.pos0, key_begin = p.key_begin, key_end = p.key_end, keys_per_split = p.keys_per_split;
    int splits = p.splits;
    if (p.pos_device != nullptr) {
        pos0 = *p.pos_device;
        if (pos0 < 0 || pos0 + p.T > p.max_len) return;  // the host checked the position: never write past the cache
        key_begin = p.window > 0 ? max(int64_t(0), pos0 - p.window + 1) : 0;
        key_end = pos0 + p.T;
        const DecodeSplit ds = choose_decode_split(key_end - key_begin, gridDim.y, p.sm_count, C, kMaxSplits);
        splits = int(ds.splits), keys_per_split = ds.keys_per_split;
        if (split >= splits) return;  // the grid has the most splits any position can take
    }
    const int64_t kb = key_begin + int64_t(split) * keys_per_split;
    const int64_t ke = min(kb + keys_per_split, key_end);
    const T* Q = static_cast<const T*>(p.q);
    const T* Kn = static_cast<const T*>(p.k) + int64_t(kvh) * D;
    const T* Vn = static_cast<const T*>(p.v) + int64_t(kvh) * D;
    T* Kc = static_cast<T*>(p.k_cache) + int64_t(kvh) * D;
    T* Vc = static_cast<T*>(p.v_cache) + int64_t(kvh) * D;

    for (int i = tid; i < M * D; i += kThreads) {
        const int m = i / D, d = i % D, t = m / G, h = kvh * G + m % G;
        q_s[i] = to_f32(Q[int64_t(t) * p.ld_q + int64_t(h) * D + d]) * p.scale_log2;
    }
    if (tid < kMaxRows) row_m[tid] = -INFINITY, row_l[tid] = 0.0f;

    // Chunk c -> stage: rows past ke are zero-filled (their probability is 0, and 0 * garbage could be NaN).
    auto issue = [&](int64_t c0, int stage) {
        T* ks = kv_s + (2 * stage) * C * LD;
        T* vs = ks + C * LD;
        for (int i = tid; i < C * VPR; i += kThreads) {
            const int j = i / VPR, e = (i % VPR) * E;
            const int64_t key = c0 + j;
            const bool valid = key < ke;
            const bool fresh = key >= pos0;
            const T* sk = !valid ? Kc : fresh ? Kn + (key - pos0) * p.ld_k + e : Kc + key * p.ld_cache + e;
            const T* sv = !valid ? Vc : fresh ? Vn + (key - pos0) * p.ld_v + e : Vc + key * p.ld_cache + e;
            cp_async16(ks + j * LD + e, sk, valid ? 16 : 0);
            cp_async16(vs + j * LD + e, sv, valid ? 16 : 0);
        }
        cp_async_commit();
    };

    const int sj = tid % C, sg = tid / C;
    const int cg = tid % 64, og = tid / 64;
    float o[kORows][CPT];
#pragma unroll
    for (int r = 0; r < kORows; ++r)
#pragma unroll
        for (int c = 0; c < CPT; ++c) o[r][c] = 0.0f;

    const int64_t nchunks = ke > kb ? (ke - kb + C - 1) / C : 0;
    if (nchunks > 0) issue(kb, 0);
    for (int64_t ci = 0; ci < nchunks; ++ci) {
        const int64_t c0 = kb + ci * C;
        const int stage = int(ci & 1);
        if (ci + 1 < nchunks) {
            issue(c0 + C, stage ^ 1);
            cp_async_wait<1>();
        } else {
            cp_async_wait<0>();
        }
        __syncthreads();
        const T* ks = kv_s + (2 * stage) * C * LD;
        const T* vs = ks + C * LD;

        // The new rows of this chunk go into the cache (this CTA is the only one that holds them).
        const int64_t f0 = max(c0, pos0), f1 = min(c0 + C, ke);
        for (int64_t i = tid; i < (f1 - f0) * VPR; i += kThreads) {
            const int64_t key = f0 + i / VPR;
            const int e = int(i % VPR) * E, j = int(key - c0);
            *reinterpret_cast<uint4*>(Kc + key * p.ld_cache + e) = *reinterpret_cast<const uint4*>(ks + j * LD + e);
            *reinterpret_cast<uint4*>(Vc + key * p.ld_cache + e) = *reinterpret_cast<const uint4*>(vs + j * LD + e);
        }

        // Scores (base-2 logits) of every (row, key); masked keys get -inf. Each dot product sums in d order, one
        // fmaf per term (the order of the other attention kernels); a thread runs its rows' chains side by side.
        {
            const int64_t key = c0 + sj;
            const T* kr = ks + sj * LD;
            float sc[kSRows];
#pragma unroll
            for (int r = 0; r < kSRows; ++r) sc[r] = 0.0f;
#pragma unroll 4
            for (int e = 0; e < D; e += E) {
                float kf[E];
                load16<T>(kr + e, kf);
#pragma unroll
                for (int r = 0; r < kSRows; ++r) {
                    const int m = sg + r * SG;
                    if (m >= M) break;  // M is uniform: no divergence
                    const float* qm = q_s + m * D + e;
#pragma unroll
                    for (int u = 0; u < E; ++u) sc[r] = fmaf(qm[u], kf[u], sc[r]);
                }
            }
#pragma unroll
            for (int r = 0; r < kSRows; ++r) {
                const int m = sg + r * SG;
                if (m >= M) break;
                const int64_t pos = pos0 + m / G;
                const bool seen = key < ke && key <= pos && (p.window == 0 || key > pos - p.window);
                s_s[m * C + sj] = seen ? sc[r] : -INFINITY;
            }
        }
        __syncthreads();

        // Online softmax, one warp per row: new max, rescale factor, probabilities in place.
        for (int m = warp; m < M; m += kThreads / 32) {
            float sv[C / 32];
            float cmax = -INFINITY;
#pragma unroll
            for (int u = 0; u < C / 32; ++u) sv[u] = s_s[m * C + lane + 32 * u], cmax = fmaxf(cmax, sv[u]);
            cmax = warp_max(cmax);
            const float m_old = row_m[m], m_new = fmaxf(m_old, cmax);
            const float base = m_new == -INFINITY ? 0.0f : m_new;
            float psum = 0.0f;
#pragma unroll
            for (int u = 0; u < C / 32; ++u) {
                const float pr = exp2f(sv[u] - base);
                s_s[m * C + lane + 32 * u] = pr;
                psum += pr;
            }
            psum = warp_sum(psum);
            __syncwarp();  // every lane has read row_m[m] before lane 0 overwrites it
            if (lane == 0) {
                const float alpha = exp2f(m_old - base);
                row_m[m] = m_new;
                row_l[m] = row_l[m] * alpha + psum;
                row_a[m] = alpha;
            }
        }
        __syncthreads();

        // o = o * alpha + p · v, keys in order (one fmaf each); four keys' probabilities per 16-byte load.
#pragma unroll
        for (int r = 0; r < kORows; ++r) {
            const int m = og + r * OG;
            if (m >= M) break;
            const float alpha = row_a[m];
#pragma unroll
            for (int c = 0; c < CPT; ++c) o[r][c] *= alpha;
        }
        for (int j0 = 0; j0 < C; j0 += 4) {
            float vf[4][CPT];
#pragma unroll
            for (int j = 0; j < 4; ++j)
#pragma unroll
                for (int c = 0; c < CPT; ++c) vf[j][c] = to_f32(vs[(j0 + j) * LD + cg * CPT + c]);
#pragma unroll
            for (int r = 0; r < kORows; ++r) {
                const int m = og + r * OG;
                if (m >= M) break;
                const float4 pr = *reinterpret_cast<const float4*>(s_s + m * C + j0);
                const float pj[4] = {pr.x, pr.y, pr.z, pr.w};
#pragma unroll
                for (int j = 0; j < 4; ++j)
#pragma unroll
                    for (int c = 0; c < CPT; ++c) o[r][c] = fmaf(pj[j], vf[j][c], o[r][c]);
            }
        }
        __syncthreads();  // the stage and s_s are rewritten next iteration
    }

    T* O = static_cast<T*>(p.out);
    auto store = [&](int m, int col, float v) {
        const int t = m / G, h = kvh * G + m % G;
        O[int64_t(t) * p.ld_out + int64_t(h) * D + col] = from_f32<T>(v);
    };
    if (splits == 1) {
#pragma unroll
        for (int r = 0; r < kORows; ++r) {
            const int m = og + r * OG;
            if (m >= M) break;
            const float l = row_l[m];
#pragma unroll
            for (int c = 0; c < CPT; ++c) store(m, cg * CPT + c, l > 0.0f ? o[r][c] / l : 0.0f);
        }
        return;
    }

    const int64_t base_row = (int64_t(kvh) * splits + split) * M;
#pragma unroll
    for (int r = 0; r < kORows; ++r) {
        const int m = og + r * OG;
        if (m >= M) break;
#pragma unroll
        for (int c = 0; c < CPT; ++c) p.part_o[(base_row + m) * D + cg * CPT + c] = o[r][c];
    }
    if (tid < M) p.part_ml[base_row + tid] = make_float2(row_m[tid], row_l[tid]);
    __threadfence();  // partials visible device-wide before the arrival is counted
    __syncthreads();
    if (tid == 0) *last_s = atomicAdd(p.counters + kvh, 1) == splits - 1;
    __syncthreads();
    if (*last_s == 0) return;
    __threadfence();

    // Merge: weight of split s for row m = 2^(m_s - max_s m_s); out = sum_s w o_s / sum_s w l_s.
    const int64_t head_rows = int64_t(kvh) * splits * M;
    for (int m = warp; m < M; m += kThreads / 32) {
        float mx = -INFINITY;
        for (int s = lane; s < splits; s += 32) mx = fmaxf(mx, __ldcg(p.part_ml + head_rows + int64_t(s) * M + m).x);
        mx = warp_max(mx);
        const float base = mx == -INFINITY ? 0.0f : mx;
        float l = 0.0f;
        for (int s = lane; s < splits; s += 32) {
            const float2 ml = __ldcg(p.part_ml + head_rows + int64_t(s) * M + m);
            const float w = exp2f(ml.x - base);
            w_s[s * kMaxRows + m] = w;
            l = fmaf(w, ml.y, l);
        }
        l = warp_sum(l);
        if (lane == 0) row_l[m] = l;
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < kORows; ++r) {
        const int m = og + r * OG;
        if (m >= M) break;
        const float l = row_l[m];
#pragma unroll
        for (int c = 0; c < CPT; ++c) {
            const int col = cg * CPT + c;
            float acc = 0.0f;
            for (int s = 0; s < splits; ++s)
                acc = fmaf(w_s[s * kMaxRows + m], __ldcg(p.part_o + (head_rows + int64_t(s) * M + m) * D + col), acc);
            store(m, col, l > 0.0f ? acc / l : 0.0f);
        }
    }
    if (tid == 0) p.counters[kvh] = 0;  // ready for the next launch
}

}  // namespace moex::cuda::model::decode
