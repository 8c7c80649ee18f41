// batched_mm decode kernels: one CTA = (expert row chunk) x (block of weight rows). Weights stream from HBM once per
// chunk with 16-byte loads; partial sums meet in shared memory; the epilogue fuses bias + gate (up) or bias +
// routing weight + the deterministic last-CTA combine (down).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/numeric.cuh"
#include "cuda/common/pdl.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/quant.cuh"
#include "cuda/experts/batched.h"

namespace moex::cuda::batched {

inline constexpr int kThreads = 256;  // 8 warps

// TUTORIAL: swap-AB decode GEMM straight from global memory.
// A decode tile has 1..64 token rows but thousands of weight rows, so the weights take the MMA's M side (16 rows)
// and the tokens its N side (8 columns): D[w, t] = sum_k W[w, k] x[t, k]. A dot product does not care in which
// order its k terms come, as long as W and x use the same order. So instead of loading the exact PTX fragment
// layout (4-byte pieces), thread (g = lane/4, q = lane%4) loads 16 contiguous bytes of weight rows g and g+8 at
// k0 + 8q and 16 bytes of token row g at the same k0 + 8q, and feeds them to two m16n8k16 MMAs: registers .x/.y to
// the first (logical k pairs 2q and 2q+8 <- physical k0+8q+{0,1} and +{2,3}), .z/.w to the second. Both operands use
// the same physical-to-logical map because the map depends only on q, so the products are exact dot products over
// k0 .. k0+31. Weights stream with ld_stream16 (no L1 pollution, L2 prefetch of 256 B); token rows hit L1/L2.

template <class T>
__device__ __forceinline__ void mma16816(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    } else {
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
            "{%0,%1,%2,%3};\n"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
    }
}

// The FP8 form of the same trick: one m16n8k32 e4m3 MMA takes 8 codes of each operand per thread (registers 0/2 of
// row g, 1/3 of row g+8, the token's 0/1), so a 16-byte load of 16 codes per row feeds two of them as it feeds two
// m16n8k16 MMAs with 8 bf16 values. Hopper has FP8 tensor cores only through wgmma: ptxas lowers this to one
// F2FP e4m3x2 -> f16x2 unpack per two codes and two f16 HMMAs (exact: codes are exact in f16), a third of the
// conversion instructions of decoding codes to bf16 in the load (SASS of the fp8 instances: 148 vs 412).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// Logical weight row j of a CTA covering `bw` rows -> physical row, -1 when out of range.
// Down / ungated: first + j. Gated, concatenated: j < bw/2 -> gate channel c0 + j (row c0 + j), else up channel
// c0 + j - bw/2 (row I + channel). Gated, interleaved: row 2 c0 + j (gate even, up odd). first = c0 when gated.
struct RowMap {
    int64_t R, half, first;
    int bw;
    bool gate, concat;
    __device__ __forceinline__ int64_t operator()(int j) const {
        if (!gate) return first + j < R ? first + j : -1;
        if (concat) {
            const int hb = bw / 2;
            const int64_t ch = first + (j < hb ? j : j - hb);
            return ch < half ? (j < hb ? ch : half + ch) : -1;
        }
        const int64_t p = 2 * first + j;
        return p < R ? p : -1;
    }
};

struct Tile {
    int e, row0, nrows;
};

// Quantized weights read V vectors per 16-byte load (V = 1: quant.cuh's load_quant8, 8 codes from 8 or 4 bytes).
// V = 2 (e4m3) or 4 (e2m1): the load `raw` holds 8V codes of weights (e, p, k ..); vector v is weights
// k + 8v .. k + 8v + 7 as code * fold in T, the layout of one 16-byte load of the bf16 loop. The loop keeps the raw
// bytes until their MMAs and decodes one vector at a time: decoding a whole load at once held V times its registers
// and made every quantized instance spill (up to 680 bytes a thread). e2m1 (V = 4): `folds` holds the load's fold
// scale bytes as stored, one ue8m0 byte for its 32 codes (mxfp4) or an e4m3 byte per 16 (kNvfp4, lowest first).
template <class T, int V, bool kNvfp4>
__device__ __forceinline__ uint4 decode_vector(uint4 raw, int v, uint32_t folds) {
    const uint32_t w[4] = {raw.x, raw.y, raw.z, raw.w};
    const uint32_t fold_byte = kNvfp4 ? folds >> (8 * (v / 2)) : folds;
    if constexpr (V == 4 && std::is_same_v<T, __nv_bfloat16>)
        return e2m1x8_to_bf16(w[v], e2m1_fold_bf16x2<kNvfp4>(fold_byte));
    float f[8];
    if constexpr (V == 2)  // e4m3: bytes 8v .. 8v + 7
        e4m3x4_to_f32(w[2 * v], f), e4m3x4_to_f32(w[2 * v + 1], f + 4);
    else
        e2m1x8_to_f32(w[v], kNvfp4 ? e4m3_to_f32(fold_byte) : ue8m0_to_f32(fold_byte), f);
    return pack8<T>(f);
}

// One k step's weight loads in registers: kSteps 32V-deep sub-steps x RT tiles x 2 rows of 16 B, and for e2m1 the
// fold scale bytes of each load (decode_vector's `folds`).
template <int U, int RT, bool kFold>
struct StepLoads {
    uint4 w[U][RT][2];
    uint32_t folds[kFold ? U : 1][kFold ? RT : 1][2];
};

// ---- main loop 1: mma.sync, K-major weights (kQuant: codes decoded just before their MMAs). Partial sums ->
// sacc[ks][row][token] (pitch mc + 1). V: 16-byte vectors of T per thread and k step (V > 1: quantized codes, one
// 16-byte load of 8V codes feeds V vectors, and a k step is 32V deep). kF8 (V = 2, a.x_e4m3): e4m3 weights and
// activations straight into the FP8 MMA, the same 16 codes per thread and k step. kNvfp4 (V = 4): the e2m1 weights'
// scales are nvfp4's (else mxfp4's).
template <class T, int RT, int NT, bool kQuant, int V, bool kF8, bool kDeep, bool kNvfp4 = false>
__device__ __forceinline__ void loop_mma(const ProjArgs& a, const Tile& tile, const RowMap& map, float* sacc, int bw) {
    static_assert(!kF8 || (kQuant && V == 2), "the FP8 MMA loop reads 16 e4m3 codes per thread and k step");
    constexpr int64_t kXBytes = kF8 ? 1 : sizeof(T);  // bytes of one X element
    constexpr int kMc = 8 * NT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, q = lane & 3;
    const int rg_count = 8 / a.ks, rg = warp % rg_count, ks = warp / rg_count;
    const T* W = static_cast<const T*>(a.W) + int64_t(tile.e) * a.R * a.K;
    const char* X = static_cast<const char*>(a.X);
    const int64_t row_bytes = quant_row_bytes(a.scales.format, a.K);

    const T* wp[kQuant ? 1 : RT][2];          // the row's first weight of this thread (nullptr: row absent)
    const uint8_t* wq[kQuant ? RT : 1][2];    // kQuant: the row's codes (nullptr: row absent)
    constexpr bool kFold = kQuant && V == 4;  // e2m1: each load's codes carry their fold scale bytes
    const uint8_t* fq[kFold ? RT : 1][2];     // kFold: the row's scale bytes, from this thread's first block
    int32_t wrow[RT][2];                      // the physical weight row (-1: absent); launch_proj checks R < 2^31
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t p = map(rg * 16 * RT + t * 16 + g + 8 * h);
            wrow[t][h] = int32_t(p);
            if constexpr (kQuant) {
                wq[t][h] =
                    p >= 0 ? static_cast<const uint8_t*>(a.W) + (int64_t(tile.e) * a.R + p) * row_bytes : nullptr;
                if constexpr (kFold)  // blocks of 32 codes (mxfp4) or 16 (nvfp4); the thread's first is 32q
                    fq[t][h] =
                        p >= 0 ? static_cast<const uint8_t*>(a.scales.data) + scale_index(a.scales, tile.e, p, 32 * q)
                               : nullptr;
            } else {
                wp[t][h] = p >= 0 ? W + p * a.K + 8 * q : nullptr;
            }
        }
    // kQuant: the X rows of the tile's tokens (row_slot / x_div, -1: no such token), divided once here for the
    // promotions' activation scales (64-bit divisions per token and promotion, and the per-sub-step slice test that
    // the tracked slice end below replaced, cost FP8 decode 4-7%: bench/RESULTS.md AB2).
    __shared__ int32_t x_rows[kQuant ? kMc : 1];
    if constexpr (kQuant) {
        if (threadIdx.x < kMc)
            x_rows[threadIdx.x] =
                int(threadIdx.x) < tile.nrows ? int32_t(a.row_slot[tile.row0 + threadIdx.x] / a.x_div) : -1;
        __syncthreads();
    }
    const char* xp[NT];  // this thread's first X element of token 8c + g, as bytes
#pragma unroll
    for (int c = 0; c < NT; ++c) {
        const int i = 8 * c + g;
        xp[c] =
            i < tile.nrows ? X + (int64_t(a.row_slot[tile.row0 + i] / a.x_div) * a.K + 8 * V * q) * kXBytes : nullptr;
    }
    float acc[RT][NT][4];
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int c = 0; c < NT; ++c) acc[t][c][0] = acc[t][c][1] = acc[t][c][2] = acc[t][c][3] = 0.0f;

    const int64_t kchunk = (a.K + a.ks - 1) / a.ks;
    const int64_t kc = (kchunk + 32 * V - 1) / (32 * V) * (32 * V);  // split points on k step boundaries
    const int64_t k_begin = ks * kc, k_end = min(a.K, k_begin + kc);
    // kU 32V-deep sub-steps per k step, each RT x 2 weight loads of 16 B per thread: 8 loads in flight, 16 with kDeep
    // (few token rows leave the registers for it; at T = 1 a CTA with 8 loads per thread keeps ~32 KiB in flight, too
    // little to stream at the bandwidth from the 1-2 CTAs an SM holds). Quantized weights with 4 or 8 token groups
    // take 4: their per-slice partial sums double the accumulators, and 8 loads spilled them.
    constexpr int kU = kQuant && NT >= 4 ? 2 / RT : (RT == 1 ? 4 : 2) * (kDeep ? 2 : 1);
    constexpr int kVecs = kF8 ? 1 : V;  // vectors one load feeds to the MMAs (kF8: all 16 codes at once)
    const uint4 zero = {0, 0, 0, 0};

    // kQuant: each 32-wide k step goes into tmp, promoted onto acc at the end of each K slice (and of the split):
    // acc += tmp * x_scale(token row, slice) * promo_scale(weight row, slice). The weight scale words of a slice
    // are loaded one slice ahead (at the previous promotion), so their latency (HBM on first touch) hides under a
    // slice of MMAs instead of stalling each promotion.
    float tmp[kQuant ? RT : 1][kQuant ? NT : 1][4] = {};
    const int64_t k_slice = kQuant ? promotion_group(a.scales, a.K) : a.K, slices = a.K / k_slice;
    uint32_t sw_word[kQuant ? RT : 1][2];  // kQuant: the next promotion's weight scale words (0: row absent)
    auto load_promo_words = [&](int64_t of) {
#pragma unroll
        for (int t = 0; t < (kQuant ? RT : 1); ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                sw_word[t][h] = wrow[t][h] >= 0 && of < slices && a.scales.format == QuantFormat::kFp8
                                    ? weight_scale_word(a.scales, tile.e, wrow[t][h], of * k_slice)
                                    : 0u;
    };
    // The slice tmp accumulates and the K where it ends (k_slice is K or a multiple of the 32V-deep sub-step, so
    // sub-steps never straddle a slice), tracked without a division in the loop.
    int64_t slice = k_begin / k_slice, slice_end = min(k_end, (slice + 1) * k_slice);
    if constexpr (kQuant) load_promo_words(slice);
    auto promote = [&]() {
        float sw[RT][2], sx[NT][2];
#pragma unroll
        for (int t = 0; t < RT; ++t)
#pragma unroll
            for (int h = 0; h < 2; ++h)
                sw[t][h] = wrow[t][h] >= 0 ? promo_scale_of_word(a.scales, tile.e, sw_word[t][h]) : 0.0f;
        load_promo_words(slice + 1);
#pragma unroll
        for (int c = 0; c < NT; ++c)
#pragma unroll
            for (int j = 0; j < 2; ++j) {  // tokens 8c + 2q + j: their X rows read here, not kept in registers
                const int32_t r = x_rows[8 * c + 2 * q + j];
                sx[c][j] = r < 0 ? 0.0f : a.x_scales != nullptr ? a.x_scales[int64_t(r) * slices + slice] : 1.0f;
            }
#pragma unroll
        for (int t = 0; t < RT; ++t)
#pragma unroll
            for (int c = 0; c < NT; ++c)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    acc[t][c][i] = fmaf(tmp[t][c][i], sw[t][i / 2] * sx[c][i % 2], acc[t][c][i]);
                    tmp[t][c][i] = 0.0f;
                }
        ++slice, slice_end = min(k_end, slice_end + k_slice);
    };

    // One k step: every load first (16 B of weights per (u, t, h); quantized V > 1: raw codes, V == 1: the 8 codes
    // decoded by load_quant8; e2m1: each load's fold scale bytes), then the MMAs and promotions.
    auto step = [&](int64_t k, auto u_const, auto guarded_const) {
        constexpr int U = decltype(u_const)::value;
        constexpr bool kGuard = decltype(guarded_const)::value;
        StepLoads<U, RT, kFold> b;
#pragma unroll
        for (int u = 0; u < U; ++u)
#pragma unroll
            for (int t = 0; t < RT; ++t)
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    const int64_t kk = k + 32 * V * u + 8 * V * q;  // this thread's first weight of the step
                    const bool ok =
                        (kQuant ? wrow[t][h] >= 0 : wp[kQuant ? 0 : t][h] != nullptr) && (!kGuard || kk < k_end);
                    if constexpr (kF8 || (kQuant && V > 1)) {
                        const int64_t byte = a.scales.format == QuantFormat::kFp8 ? kk : kk / 2;
                        b.w[u][t][h] = ok ? ld_stream16<true>(wq[kQuant ? t : 0][h] + byte) : zero;
                        if constexpr (kFold) {  // kk - k is 128u + 32q: block 4u (mxfp4) or 8u, 8u + 1 (nvfp4)
                            const uint8_t* f = fq[t][h] + (kNvfp4 ? (k >> 4) + 8 * u : (k >> 5) + 4 * u);
                            b.folds[u][t][h] = !ok      ? 0u
                                               : kNvfp4 ? __ldg(reinterpret_cast<const uint16_t*>(f))
                                                        : __ldg(f);
                        }
                    } else if constexpr (kQuant) {
                        b.w[u][t][h] =
                            ok ? load_quant8<T>(a.scales, wq[kQuant ? t : 0][h], tile.e, wrow[t][h], kk) : zero;
                    } else {
                        b.w[u][t][h] = ok ? ld_stream16<true>(wp[kQuant ? 0 : t][h] + k + 32 * u) : zero;
                    }
                }
#pragma unroll
        for (int u = 0; u < U; ++u) {
#pragma unroll
            for (int v = 0; v < kVecs; ++v) {
                // This vector of each weight row: decoded from the raw codes (quantized, V > 1) or as loaded.
                constexpr bool kDecode = kQuant && V > 1 && !kF8;
                [[maybe_unused]] uint4 wd[kDecode ? RT : 1][2];
                if constexpr (kDecode) {
#pragma unroll
                    for (int t = 0; t < RT; ++t)
#pragma unroll
                        for (int h = 0; h < 2; ++h) {
                            wd[t][h] =
                                decode_vector<T, V, kNvfp4>(b.w[u][t][h], v, b.folds[kFold ? u : 0][kFold ? t : 0][h]);
                        }
                }
                // The vector the MMAs take: decoded above, or the load itself.
                auto w_of = [&](int t, int h) -> const uint4& {
                    if constexpr (kDecode)
                        return wd[t][h];
                    else
                        return b.w[u][t][h];
                };
#pragma unroll
                for (int c = 0; c < NT; ++c) {
                    if (8 * c >= tile.nrows) continue;  // CTA-uniform: no MMA for empty token groups
                    const bool ok = xp[c] != nullptr && (!kGuard || k + 32 * V * u + 8 * V * q < k_end);
                    if constexpr (kF8) {  // 16 codes of token 8c + g: two FP8 MMAs per weight row pair
                        const uint4 xv = ok ? __ldg(reinterpret_cast<const uint4*>(xp[c] + k + 64 * u)) : zero;
#pragma unroll
                        for (int t = 0; t < RT; ++t) {
                            const uint4 &w0 = w_of(t, 0), &w1 = w_of(t, 1);
                            mma_e4m3(tmp[t][c], w0.x, w1.x, w0.y, w1.y, xv.x, xv.y);
                            mma_e4m3(tmp[t][c], w0.z, w1.z, w0.w, w1.w, xv.z, xv.w);
                        }
                    } else {
                        const uint4 xv =
                            ok ? __ldg(reinterpret_cast<const uint4*>(xp[c] + (k + 32 * V * u + 8 * v) * kXBytes))
                               : zero;
#pragma unroll
                        for (int t = 0; t < RT; ++t) {
                            float(&d)[4] = kQuant ? tmp[kQuant ? t : 0][kQuant ? c : 0] : acc[t][c];
                            const uint4 &w0 = w_of(t, 0), &w1 = w_of(t, 1);
                            mma16816<T>(d, w0.x, w1.x, w0.y, w1.y, xv.x, xv.y);
                            mma16816<T>(d, w0.z, w1.z, w0.w, w1.w, xv.z, xv.w);
                        }
                    }
                }
            }
            if constexpr (kQuant)
                if (k + 32 * V * (u + 1) >= slice_end) promote();  // uniform over the warp
        }
    };
    constexpr int64_t kStep = 32 * V * kU;
    int64_t k = k_begin;
    for (; k + kStep <= k_end; k += kStep) step(k, std::integral_constant<int, kU>{}, std::false_type{});
    for (; k < k_end; k += 32 * V) step(k, std::integral_constant<int, 1>{}, std::true_type{});
    float* base = sacc + int64_t(ks) * bw * (kMc + 1);
#pragma unroll
    for (int t = 0; t < RT; ++t)
#pragma unroll
        for (int c = 0; c < NT; ++c) {
            const int r = rg * 16 * RT + t * 16 + g, col = 8 * c + 2 * q;
            base[r * (kMc + 1) + col] = acc[t][c][0];
            base[r * (kMc + 1) + col + 1] = acc[t][c][1];
            base[(r + 8) * (kMc + 1) + col] = acc[t][c][2];
            base[(r + 8) * (kMc + 1) + col + 1] = acc[t][c][3];
        }
}

// ---- main loop 2: N-major weights, V consecutive weight rows per thread (16-byte loads), 8 K splits, 8 rows.
template <class T, int V>
__device__ __forceinline__ void loop_vecn(const ProjArgs& a, const Tile& tile, const RowMap& map, float* sacc, int bw) {
    constexpr int kMc = 8, kKs = 8;
    const int vt = threadIdx.x % (bw / V), ks = threadIdx.x / (bw / V);
    const int j0 = vt * V;
    const int64_t p0 = map(j0);  // V consecutive logical rows map to V consecutive physical rows (host checks)
    const T* W = static_cast<const T*>(a.W) + int64_t(tile.e) * a.K * a.R;
    const T* X = static_cast<const T*>(a.X);
    const T* xp[kMc];
#pragma unroll
    for (int i = 0; i < kMc; ++i)
        xp[i] = i < tile.nrows ? X + int64_t(a.row_slot[tile.row0 + i] / a.x_div) * a.K : nullptr;
    float acc[V][kMc];
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int i = 0; i < kMc; ++i) acc[v][i] = 0.0f;
    const int64_t kc = (a.K + kKs - 1) / kKs;
    const int64_t k_begin = ks * kc, k_end = min(a.K, k_begin + kc);
    if (p0 >= 0) {
        for (int64_t k = k_begin; k < k_end; ++k) {
            const uint4 raw = ld_stream16<true>(W + k * a.R + p0);
            const T* wv = reinterpret_cast<const T*>(&raw);
            float xv[kMc];
#pragma unroll
            for (int i = 0; i < kMc; ++i) xv[i] = xp[i] != nullptr ? to_f32(xp[i][k]) : 0.0f;
#pragma unroll
            for (int v = 0; v < V; ++v) {
                const float w = to_f32(wv[v]);
#pragma unroll
                for (int i = 0; i < kMc; ++i) acc[v][i] = fmaf(w, xv[i], acc[v][i]);
            }
        }
    }
    float* base = sacc + int64_t(ks) * bw * (kMc + 1);
#pragma unroll
    for (int v = 0; v < V; ++v)
#pragma unroll
        for (int i = 0; i < kMc; ++i) base[(j0 + v) * (kMc + 1) + i] = acc[v][i];
}

// ---- main loop 3: anything else. Thread = one logical weight row x one of 4 K splits, 8 rows, scalar loads.
template <class T, bool kQuant>
__device__ __forceinline__ void loop_generic(const ProjArgs& a, const Tile& tile, const RowMap& map, float* sacc,
                                             int bw) {
    constexpr int kMc = 8, kKs = 4;
    const int j = threadIdx.x % bw, ks = threadIdx.x / bw;
    const int64_t p = map(j);
    const T* W = static_cast<const T*>(a.W) + int64_t(tile.e) * a.K * a.R;
    const T* X = static_cast<const T*>(a.X);
    const T* xp[kMc];
#pragma unroll
    for (int i = 0; i < kMc; ++i)
        xp[i] = i < tile.nrows ? X + int64_t(a.row_slot[tile.row0 + i] / a.x_div) * a.K : nullptr;
    float acc[kMc];
#pragma unroll
    for (int i = 0; i < kMc; ++i) acc[i] = 0.0f;
    const int64_t kc = (a.K + kKs - 1) / kKs;
    const int64_t k_begin = ks * kc, k_end = min(a.K, k_begin + kc);
    if (p >= 0) {
        const int64_t stride = a.n_major ? a.R : 1;
        const T* w = a.n_major ? W + p : W + p * a.K;
        const uint8_t* wq =
            static_cast<const uint8_t*>(a.W) + (int64_t(tile.e) * a.R + p) * quant_row_bytes(a.scales.format, a.K);
#pragma unroll 4
        for (int64_t k = k_begin; k < k_end; ++k) {
            const float wk = kQuant ? dequant1(a.scales, wq, tile.e, p, k) : to_f32(__ldg(w + k * stride));
#pragma unroll
            for (int i = 0; i < kMc; ++i)
                if (xp[i] != nullptr) acc[i] = fmaf(wk, to_f32(xp[i][k]), acc[i]);
        }
    }
    float* base = sacc + int64_t(ks) * bw * (kMc + 1);
#pragma unroll
    for (int i = 0; i < kMc; ++i) base[j * (kMc + 1) + i] = acc[i];
}

// Epilogue: sums the K splits in order, then bias + gate -> h (up), or (bias) * weight -> y (down).
template <class T>
__device__ void epilogue(const ProjArgs& a, const Tile& tile, const RowMap& map, const float* sacc, int bw, int ks,
                         int mc) {
    const int pitch = mc + 1;
    const T* bias = a.bias != nullptr ? static_cast<const T*>(a.bias) + int64_t(tile.e) * a.R : nullptr;
    auto sum = [&](int j, int i) {
        float s = 0.0f;
        for (int x = 0; x < ks; ++x) s += sacc[(x * bw + j) * pitch + i];
        return s;
    };
    if (a.proj == Proj::kUpGate) {
        const int hb = bw / 2;
        for (int idx = threadIdx.x; idx < tile.nrows * hb; idx += kThreads) {
            const int i = idx / hb, c = idx % hb;
            const int64_t ch = map.first + c;
            if (ch >= a.out_cols) continue;
            const int gj = a.gate.concatenated ? c : 2 * c, uj = a.gate.concatenated ? hb + c : 2 * c + 1;
            float gv = sum(gj, i), uv = sum(uj, i);
            if (bias != nullptr) gv += to_f32(bias[map(gj)]), uv += to_f32(bias[map(uj)]);
            const int64_t s = a.row_slot[tile.row0 + i];
            static_cast<T*>(a.out)[s * a.out_cols + ch] = from_f32<T>(apply_gate(a.gate, gv, uv));
        }
        return;
    }
    for (int idx = threadIdx.x; idx < tile.nrows * bw; idx += kThreads) {
        const int i = idx / bw, j = idx % bw;
        const int64_t n = map.first + j;
        if (n >= a.R) continue;
        float v = sum(j, i);
        if (bias != nullptr) v += to_f32(bias[n]);
        const int64_t s = a.row_slot[tile.row0 + i];
        if (a.proj == Proj::kUpAct) {
            static_cast<T*>(a.out)[s * a.out_cols + n] = from_f32<T>(apply_act(a.gate.activation, v));
        } else {
            static_cast<float*>(a.out)[s * a.R + n] = v * load_weight(a.weights, a.weights_f32, a.dtype, s);
        }
    }
}

// The last CTA of a column block (all tiles done) sums y over each token's slots in slot order: deterministic,
// no float atomics. The arrival counter is the only atomic.
template <class T>
__device__ void fused_combine(const ProjArgs& a, int64_t n0, int bw) {
    __shared__ int is_last;
    __threadfence();  // make this CTA's y stores visible device-wide before arriving
    __syncthreads();
    if (threadIdx.x == 0) is_last = atomicAdd(&a.arrive[blockIdx.y], 1) == int(gridDim.x) - 1;
    __syncthreads();
    if (!is_last) return;
    __threadfence();
    const float* y = static_cast<const float*>(a.out);
    const int64_t cols = min(int64_t(bw), a.R - n0);
    for (int64_t idx = threadIdx.x; idx < a.T * cols; idx += kThreads) {
        const int64_t t = idx / cols, n = n0 + idx % cols;
        float s = 0.0f;
        for (int64_t j = 0; j < a.k; ++j) {
            const int64_t slot = t * a.k + j;
            if (load_expert(a.ids, a.ids_i64, slot, a.E) >= 0) s += __ldcg(y + slot * a.R + n);
        }
        static_cast<T*>(a.final_out)[t * a.R + n] = from_f32<T>(s);
    }
}

// Grid: x = tiles (tiles_bound; those >= *num_tiles only arrive), y = blocks of bw logical weight rows.
template <class T, Loop kLoop, int RT, int NT, int V, bool kQuant, bool kF8 = false, bool kDeep = false>
__global__ void __launch_bounds__(kThreads, 2) batched_proj_kernel(const __grid_constant__ ProjArgs a) {
    extern __shared__ float sacc[];
    const bool gate = a.proj == Proj::kUpGate;
    const int bw = kLoop == Loop::kMma ? 16 * RT * (8 / a.ks) : (kLoop == Loop::kVecN ? 32 * V : 64);
    const int ks = kLoop == Loop::kMma ? a.ks : (kLoop == Loop::kVecN ? 8 : 4);
    const int mc = kLoop == Loop::kMma ? 8 * NT : 8;
    const int64_t first = int64_t(blockIdx.y) * (gate ? bw / 2 : bw);
    const RowMap map{a.R, a.R / 2, first, bw, gate, a.gate.concatenated};
    // Programmatic dependent launch: this grid may start while the previous kernel finishes; wait for its results
    // here, then let the next projection's CTAs be scheduled as ours retire (pdl.cuh).
    pdl_enter();
    const int w = blockIdx.x;
    if (w < *a.num_tiles) {
        const Tile tile{a.tile_expert[w], a.tile_row0[w], a.tile_nrows[w]};
        if constexpr (kLoop == Loop::kMma && kQuant && V == 4) {  // e2m1: the scale format is a loop parameter
            if (a.scales.format == QuantFormat::kNvfp4)
                loop_mma<T, RT, NT, kQuant, V, kF8, kDeep, true>(a, tile, map, sacc, bw);
            else
                loop_mma<T, RT, NT, kQuant, V, kF8, kDeep, false>(a, tile, map, sacc, bw);
        } else if constexpr (kLoop == Loop::kMma) {
            loop_mma<T, RT, NT, kQuant, V, kF8, kDeep>(a, tile, map, sacc, bw);
        } else if constexpr (kLoop == Loop::kVecN) {
            loop_vecn<T, V>(a, tile, map, sacc, bw);
        } else {
            loop_generic<T, kQuant>(a, tile, map, sacc, bw);
        }
        __syncthreads();
        epilogue<T>(a, tile, map, sacc, bw, ks, mc);
    }
    if (a.arrive != nullptr) fused_combine<T>(a, first, bw);
}

}  // namespace moex::cuda::batched
