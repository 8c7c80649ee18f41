// The portable grouped GEMM: 128x128x32 CTA tiles, register-staged global loads, mma.sync m16n8k16 for bf16/f16
// and SIMT FMA for f32, and an epilogue through shared memory (bias, gate over column pairs, row_scale, store).
// Honours the whole GroupedGemmArgs contract (any K/N, b_n_major, d_f32) and reads the routing from device memory.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/numeric.cuh"
#include "cuda/common/quant.cuh"
#include "cuda/gemm/grouped_gemm.h"

namespace moex::cuda::gemm_portable {

inline constexpr int kBM = 128, kBN = 128, kBK = 32, kThreads = 256;
static_assert(kBM == kRowAlign, "one CTA row tile is one M tile of the routing");

// Shared-memory row pitches (elements). 16-bit: +8 keeps 16-byte alignment and makes the fragment loads
// conflict-free; f32: +4 keeps 16-byte alignment.
template <class T>
struct Pitch {
    static constexpr int kPad = sizeof(T) == 2 ? 8 : 4;
    static constexpr int kA = kBK + kPad;   // As[kBM][kA]
    static constexpr int kBk = kBK + kPad;  // K-major Bs[kBN][kBk]
    static constexpr int kBn = kBN + kPad;  // N-major Bs[kBK][kBn]
    static constexpr int kC = kBN + 4;      // Cs[kBM][kC] (float)
};

template <class T>
constexpr size_t smem_bytes() {
    const size_t a = size_t(kBM) * Pitch<T>::kA * sizeof(T);
    const size_t bk = size_t(kBN) * Pitch<T>::kBk * sizeof(T), bn = size_t(kBK) * Pitch<T>::kBn * sizeof(T);
    const size_t main = a + (bk > bn ? bk : bn);
    const size_t epi = size_t(kBM) * Pitch<T>::kC * sizeof(float);
    return main > epi ? main : epi;
}

// Logical CTA column j (0..kBN) -> physical column of B / pre-epilogue output, -1 when out of range.
// kStore: n0 + j. kGate, concatenated [gate | up]: j < 64 gate channel c0 + j, else up channel c0 + j - 64 (at
// column N/2 + channel). kGate, interleaved [g0, u0, g1, u1, ...]: 2*c0 + j (gate at even j, up at odd j).
struct ColMap {
    int64_t N, half, first;  // first = n0 (kStore) or c0 (kGate)
    bool gate, concat;
    __device__ __forceinline__ int64_t operator()(int j) const {
        if (!gate) return first + j < N ? first + j : -1;
        if (concat) {
            const int64_t ch = first + (j & (kBN / 2 - 1));
            return ch < half ? (j < kBN / 2 ? ch : half + ch) : -1;
        }
        const int64_t p = 2 * first + j;
        return p < N ? p : -1;
    }
};

template <class T, int V>
struct Stage {  // 16 elements per thread for A and for B: 4096-element tiles over 256 threads
    static constexpr int kNV = 16 / V;
    using Vec = std::conditional_t<V == 1, T, uint4>;
    Vec a[kNV], b[kNV];
};

template <int V, class T>
__device__ __forceinline__ typename Stage<T, V>::Vec load_vec(const T* p, bool ok) {
    if constexpr (V == 1) {
        return ok ? p[0] : T(0.0f);
    } else {
        return ok ? *reinterpret_cast<const uint4*>(p) : uint4{0, 0, 0, 0};
    }
}

template <int V, class T>
__device__ __forceinline__ void store_vec(T* p, const typename Stage<T, V>::Vec& v) {
    if constexpr (V == 1) {
        *p = v;
    } else {
        *reinterpret_cast<uint4*>(p) = v;
    }
}

// V quantized weights (e, p, k .. k + V - 1) of K-major row bytes `row`, rounded to T (zeros when !ok).
template <int V, class T>
__device__ __forceinline__ typename Stage<T, V>::Vec load_quant_vec(const WeightScales& s, const uint8_t* row,
                                                                    int64_t e, int64_t p, int64_t k, bool ok) {
    using Vec = typename Stage<T, V>::Vec;
    constexpr bool k16 = sizeof(T) == 2;  // code * fold_scale, the rest promoted; f32: the whole value
    if constexpr (V == 1) {
        if (!ok) return T(0.0f);
        return from_f32<T>(k16 ? dequant1_folded(s, row, e, p, k) : dequant1(s, row, e, p, k));
    } else {
        Vec v{0, 0, 0, 0};
        if (!ok) return v;
        if constexpr (V == 8) return load_quant8<T>(s, row, e, p, k);
        T* t = reinterpret_cast<T*>(&v);
#pragma unroll
        for (int i = 0; i < V; ++i) t[i] = from_f32<T>(dequant1(s, row, e, p, k + i));
        return v;
    }
}

// Global -> registers for the K tile at k0. V elements per vector (V divides K, N and N/2 when V > 1).
// kQuant: B holds quantized codes (K-major), decoded here: 16-bit T gets code * fold_scale (exact), f32 the value.
template <class T, int V, bool kNMajor, bool kQuant>
__device__ __forceinline__ void load_stage(Stage<T, V>& st, const GroupedGemmArgs& g, const T* A, const void* Bv, int e,
                                           const ColMap& cmap, int64_t row0, int64_t k0) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int v = 0; v < Stage<T, V>::kNV; ++v) {
        const int id = tid + v * kThreads;
        const int r = id / (kBK / V), k = (id % (kBK / V)) * V;
        st.a[v] = load_vec<V>(A + (row0 + r) * g.K + k0 + k, k0 + k < g.K && row0 + r < g.P);  // packed: P bounds
    }
#pragma unroll
    for (int v = 0; v < Stage<T, V>::kNV; ++v) {
        const int id = tid + v * kThreads;
        if constexpr (kQuant) {
            const int j = id / (kBK / V), k = (id % (kBK / V)) * V;
            const int64_t p = cmap(j), rb = quant_row_bytes(g.b_scales.format, g.K);
            const uint8_t* row = static_cast<const uint8_t*>(Bv) + (int64_t(e) * g.N + (p < 0 ? 0 : p)) * rb;
            st.b[v] = load_quant_vec<V, T>(g.b_scales, row, e, p, k0 + k, p >= 0 && k0 + k < g.K);
        } else if constexpr (!kNMajor) {  // B_e (N, K): logical row j <- physical row cmap(j)
            const T* B = static_cast<const T*>(Bv) + int64_t(e) * g.N * g.K;
            const int j = id / (kBK / V), k = (id % (kBK / V)) * V;
            const int64_t p = cmap(j);
            st.b[v] = load_vec<V>(B + (p < 0 ? 0 : p) * g.K + k0 + k, p >= 0 && k0 + k < g.K);
        } else {
            const T* B = static_cast<const T*>(Bv) +
                         int64_t(e) * g.N *
                             g.K;  // B_e (K, N): logical column j <- physical column cmap(j); V columns are contiguous
            const int k = id / (kBN / V), j = (id % (kBN / V)) * V;
            const int64_t p = cmap(j);
            st.b[v] = load_vec<V>(B + (k0 + k) * g.N + (p < 0 ? 0 : p), p >= 0 && k0 + k < g.K);
        }
    }
}

template <class T, int V, bool kNMajor>
__device__ __forceinline__ void store_stage(const Stage<T, V>& st, T* As, T* Bs) {
    const int tid = threadIdx.x;
#pragma unroll
    for (int v = 0; v < Stage<T, V>::kNV; ++v) {
        const int id = tid + v * kThreads;
        const int r = id / (kBK / V), k = (id % (kBK / V)) * V;
        store_vec<V>(As + r * Pitch<T>::kA + k, st.a[v]);
    }
#pragma unroll
    for (int v = 0; v < Stage<T, V>::kNV; ++v) {
        const int id = tid + v * kThreads;
        if constexpr (!kNMajor) {
            const int j = id / (kBK / V), k = (id % (kBK / V)) * V;
            store_vec<V>(Bs + j * Pitch<T>::kBk + k, st.b[v]);
        } else {
            const int k = id / (kBN / V), j = (id % (kBN / V)) * V;
            store_vec<V>(Bs + k * Pitch<T>::kBn + j, st.b[v]);
        }
    }
}

__device__ __forceinline__ uint32_t lds32(const void* p) { return *reinterpret_cast<const uint32_t*>(p); }
__device__ __forceinline__ uint32_t pack2(uint16_t lo, uint16_t hi) { return uint32_t(lo) | (uint32_t(hi) << 16); }

template <class T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
    }
}

// 16-bit compute: 8 warps as 2 (M) x 4 (N), each 64 x 32 = 4 x 4 mma tiles of 16 x 8.
// Fragments (PTX m16n8k16): a0 (row g, k 2q..), a1 (row g+8, k 2q..), a2 (row g, k 2q+8..), a3 (row g+8, k 2q+8..);
// b0 (k 2q.., col g), b1 (k 2q+8.., col g); c0,c1 (row g, cols 2q, 2q+1), c2,c3 (row g+8, same cols).
template <class T, bool kNMajor>
__device__ __forceinline__ void compute_mma(float (&acc)[4][4][4], const T* As, const T* Bs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3, wm = warp >> 2, wn = warp & 3;
    const uint16_t* Bh = reinterpret_cast<const uint16_t*>(Bs);
#pragma unroll
    for (int kk = 0; kk < kBK; kk += 16) {
        uint32_t a[4][4], b[4][2];
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
            const T* p = As + (wm * 64 + mi * 16 + g) * Pitch<T>::kA + kk + 2 * q;
            a[mi][0] = lds32(p);
            a[mi][1] = lds32(p + 8 * Pitch<T>::kA);
            a[mi][2] = lds32(p + 8);
            a[mi][3] = lds32(p + 8 * Pitch<T>::kA + 8);
        }
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int c = wn * 32 + ni * 8 + g;
            if constexpr (!kNMajor) {
                const T* p = Bs + c * Pitch<T>::kBk + kk + 2 * q;
                b[ni][0] = lds32(p);
                b[ni][1] = lds32(p + 8);
            } else {
                const int k = kk + 2 * q;
                b[ni][0] = pack2(Bh[k * Pitch<T>::kBn + c], Bh[(k + 1) * Pitch<T>::kBn + c]);
                b[ni][1] = pack2(Bh[(k + 8) * Pitch<T>::kBn + c], Bh[(k + 9) * Pitch<T>::kBn + c]);
            }
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi)
#pragma unroll
            for (int ni = 0; ni < 4; ++ni) mma_16816<T>(acc[mi][ni], a[mi], b[ni]);
    }
}

// Promotion (quantized weights, 16-bit): acc += tmp * a_scale(row, slice) * promo_scale(column, slice); tmp = 0.
// Thread layout as compute_mma: rows wm*64 + mi*16 + g (+8), columns wn*32 + ni*8 + 2q (+1).
// slice: the index of the K slice, k_at its first K, slices: K slices per row.
__device__ __forceinline__ void promote_mma(float (&acc)[4][4][4], float (&tmp)[4][4][4], const GroupedGemmArgs& g,
                                            const ColMap& cmap, int e, int64_t row0, int64_t slice, int64_t k_at,
                                            int64_t slices) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int gq = lane >> 2, q = lane & 3, wm = warp >> 2, wn = warp & 3;
    float sa[4][2], sw[4][2];
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t r = row0 + wm * 64 + mi * 16 + gq + 8 * h;
            sa[mi][h] = g.a_scales != nullptr && r < g.P ? g.a_scales[r * slices + slice] : 1.0f;
        }
#pragma unroll
    for (int ni = 0; ni < 4; ++ni)
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            const int64_t p = cmap(wn * 32 + ni * 8 + 2 * q + c);
            sw[ni][c] = p >= 0 ? promo_scale(g.b_scales, e, p, k_at) : 0.0f;
        }
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni)
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                acc[mi][ni][i] = fmaf(tmp[mi][ni][i], sa[mi][i / 2] * sw[ni][i % 2], acc[mi][ni][i]);
                tmp[mi][ni][i] = 0.0f;
            }
}

template <class T>
__device__ __forceinline__ void store_acc_mma(const float (&acc)[4][4][4], float* Cs) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3, wm = warp >> 2, wn = warp & 3;
#pragma unroll
    for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int ni = 0; ni < 4; ++ni) {
            const int r = wm * 64 + mi * 16 + g, c = wn * 32 + ni * 8 + 2 * q;
            *reinterpret_cast<float2*>(Cs + r * Pitch<T>::kC + c) = make_float2(acc[mi][ni][0], acc[mi][ni][1]);
            *reinterpret_cast<float2*>(Cs + (r + 8) * Pitch<T>::kC + c) = make_float2(acc[mi][ni][2], acc[mi][ni][3]);
        }
}

// f32 compute: thread (tx, ty) of a 16 x 16 grid owns rows ty + 16 i and columns tx + 16 j (i, j < 8).
template <bool kNMajor>
__device__ __forceinline__ void compute_simt(float (&acc)[8][8], const float* As, const float* Bs) {
    const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll 4
    for (int k = 0; k < kBK; ++k) {
        float a[8], b[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) a[i] = As[(ty + 16 * i) * Pitch<float>::kA + k];
#pragma unroll
        for (int j = 0; j < 8; ++j)
            b[j] = kNMajor ? Bs[k * Pitch<float>::kBn + tx + 16 * j] : Bs[(tx + 16 * j) * Pitch<float>::kBk + k];
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// Epilogue from the f32 tile Cs (logical columns): bias, gate, row_scale, store (coalesced along columns). Rows at or
// past row_lim (packed layout: the next expert's) are not written.
template <class T>
__device__ void epilogue(const GroupedGemmArgs& g, const float* Cs, int e, int64_t row0, int64_t row_lim,
                         int64_t first) {
    const T* bias = g.bias != nullptr ? static_cast<const T*>(g.bias) + int64_t(e) * g.N : nullptr;
    if (g.epilogue == Epilogue::kGate) {
        const int64_t half = g.N / 2;
        for (int idx = threadIdx.x; idx < kBM * (kBN / 2); idx += kThreads) {
            const int r = idx / (kBN / 2), i = idx % (kBN / 2);
            const int64_t ch = first + i;
            if (ch >= half || row0 + r >= row_lim) continue;
            const int gj = g.gate.concatenated ? i : 2 * i, uj = g.gate.concatenated ? kBN / 2 + i : 2 * i + 1;
            const int64_t gp_col = g.gate.concatenated ? ch : 2 * ch,
                          up_col = g.gate.concatenated ? half + ch : 2 * ch + 1;
            float gv = Cs[r * Pitch<T>::kC + gj], uv = Cs[r * Pitch<T>::kC + uj];
            if (bias != nullptr) gv += to_f32(bias[gp_col]), uv += to_f32(bias[up_col]);
            float v = apply_gate(g.gate, gv, uv);
            if (g.row_scale != nullptr) v *= g.row_scale[row0 + r];
            const int64_t o = (row0 + r) * half + ch;
            if (g.d_f32)
                static_cast<float*>(g.D)[o] = v;
            else
                static_cast<T*>(g.D)[o] = from_f32<T>(v);
        }
    } else {
        for (int idx = threadIdx.x; idx < kBM * kBN; idx += kThreads) {
            const int r = idx / kBN, j = idx % kBN;
            const int64_t n = first + j;
            if (n >= g.N || row0 + r >= row_lim) continue;
            float v = Cs[r * Pitch<T>::kC + j];
            if (bias != nullptr) v += to_f32(bias[n]);
            if (g.row_scale != nullptr) v *= g.row_scale[row0 + r];
            const int64_t o = (row0 + r) * g.N + n;
            if (g.d_f32)
                static_cast<float*>(g.D)[o] = v;
            else
                static_cast<T*>(g.D)[o] = from_f32<T>(v);
        }
    }
}

// Grid: x = M tiles (max_m_tiles; tiles >= *num_m_tiles exit), y = column tiles. 256 threads.
template <class T, int V, bool kNMajor, bool kQuant>
__global__ void __launch_bounds__(kThreads) grouped_gemm_portable_kernel(const __grid_constant__ GroupedGemmArgs g) {
    const int m = blockIdx.x;
    if (m >= *g.num_m_tiles) return;
    extern __shared__ __align__(16) unsigned char smem[];
    T* As = reinterpret_cast<T*>(smem);
    T* Bs = As + kBM * Pitch<T>::kA;
    float* Cs = reinterpret_cast<float*>(smem);  // reused after the main loop

    const int e = g.m_tile_expert[m];
    const int64_t row0 = g.m_tile_row0 != nullptr ? int64_t(g.m_tile_row0[m]) : int64_t(m) * kBM;
    const bool gate = g.epilogue == Epilogue::kGate;
    const int64_t first = int64_t(blockIdx.y) * (gate ? kBN / 2 : kBN);
    const ColMap cmap{g.N, g.N / 2, first, gate, g.gate.concatenated};
    const T* A = static_cast<const T*>(g.A);
    // A bad expert id (never written by the routing) loads expert 0's weights in bounds; its rows are padding.
    const int eb = e >= 0 && e < g.E ? e : 0;

    constexpr bool kMma = sizeof(T) == 2, kPromote = kQuant && kMma;
    float acc_mma[kMma ? 4 : 1][4][4] = {};
    float tmp_mma[kPromote ? 4 : 1][4][4] = {};  // kPromote: this K slice's partial sums
    const int64_t k_slice = kPromote ? promotion_group(g.b_scales, g.K) : g.K;
    float acc_simt[kMma ? 1 : 8][8] = {};
    Stage<T, V> st;
    load_stage<T, V, kNMajor, kQuant>(st, g, A, g.B, eb, cmap, row0, 0);
    store_stage<T, V, kNMajor>(st, As, Bs);
    __syncthreads();
    for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
        const bool more = k0 + kBK < g.K;
        if (more)
            load_stage<T, V, kNMajor, kQuant>(st, g, A, g.B, eb, cmap, row0, k0 + kBK);  // in flight during the math
        if constexpr (kPromote) {
            compute_mma<T, kNMajor>(reinterpret_cast<float(&)[4][4][4]>(tmp_mma), As, Bs);
            if ((k0 + kBK) % k_slice == 0 || !more)  // slices are multiples of kBK (the host checks)
                promote_mma(reinterpret_cast<float(&)[4][4][4]>(acc_mma), reinterpret_cast<float(&)[4][4][4]>(tmp_mma),
                            g, cmap, eb, row0, k0 / k_slice, k0 / k_slice * k_slice, g.K / k_slice);
        } else if constexpr (kMma) {
            compute_mma<T, kNMajor>(reinterpret_cast<float(&)[4][4][4]>(acc_mma), As, Bs);
        } else {
            compute_simt<kNMajor>(reinterpret_cast<float(&)[8][8]>(acc_simt), As, Bs);
        }
        __syncthreads();
        if (more) {
            store_stage<T, V, kNMajor>(st, As, Bs);
            __syncthreads();
        }
    }
    if constexpr (kMma) {
        store_acc_mma<T>(reinterpret_cast<float(&)[4][4][4]>(acc_mma), Cs);
    } else {
        const int tx = threadIdx.x & 15, ty = threadIdx.x >> 4;
#pragma unroll
        for (int i = 0; i < 8; ++i)
#pragma unroll
            for (int j = 0; j < 8; ++j) Cs[(ty + 16 * i) * Pitch<T>::kC + tx + 16 * j] = acc_simt[i][j];
    }
    __syncthreads();
    // Padded layout: the whole tile, its padding rows included; packed: up to the expert's end, or to P after the
    // last expert (rows of no expert, which later kernels' tiles read); a bad id: nothing.
    int64_t row_lim = g.P;
    if (g.m_tile_row0 != nullptr) {
        const int64_t end = int64_t(g.expert_row_start[eb]) + g.expert_row_count[eb];
        row_lim = e != eb ? row0 : end == g.expert_row_start[g.E] ? g.P : end;
    }
    epilogue<T>(g, Cs, e, row0, row_lim, first);
}

}  // namespace moex::cuda::gemm_portable
