// Epilogue of the sm_90a grouped GEMM: each consumer warpgroup turns its 64x256 f32 accumulator tile into
// output (bias, gate, row scale in f32; rounding to the output type), stages it in shared memory in 128-byte
// swizzled 64-row boxes and writes them with TMA stores, double-buffered so staging overlaps the previous store.
// Each warp writes and stores its own 16 rows of a box (the accumulator rows it holds), so the warps of a warpgroup
// never wait for each other between boxes (bench/RESULTS.md AQ). Rows at or past row_lim (the expert's end in the
// packed layout: the next expert's rows) are not written: a warp whose 16 rows hold some stores its rows below
// row_lim through 16-byte stores instead.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/params.h"
#include "cuda/common/quant.cuh"
#include "cuda/gemm/sm90_tma.cuh"

namespace moex::cuda::sm90 {

enum class EpiKind : int32_t {
    kStore = 0,     // D = (acc + bias) · row_scale, written in the input dtype
    kStoreF32 = 1,  // same, written in f32
    kGate = 2,      // D = gate(acc + bias) · row_scale over (gate, up) column pairs, written in the input dtype
    kGateE4m3 = 3,  // kGate's values rounded to the input dtype, then to e4m3 codes with a scale per row and tile
    kGateSave = 4,  // kGate, and first the pre-activation acc + bias of every column, rounded, into `save`
};
inline constexpr bool is_gate_epi(EpiKind k) {
    return k == EpiKind::kGate || k == EpiKind::kGateE4m3 || k == EpiKind::kGateSave;
}

// One staging box: 64 rows x 128 bytes (32 f32 or 64 16-bit values), 128B-swizzled, 1024-aligned; it goes out as
// four TMA stores of kStoreBoxRows rows, one per warp (the tensor maps' box height).
inline constexpr uint32_t kStoreBoxBytes = 64 * 128;
inline constexpr int32_t kStoreBoxRows = 16;

struct EpilogueParams {
    const void* bias;           // (E, N) input dtype, or nullptr
    const float* row_scale;     // (P,) or nullptr
    const float* expert_scale;  // (E,) or nullptr: multiplies the accumulators of the tile's expert before the bias
    int32_t P;                  // rows of D
    int32_t N;                  // accumulator columns (B rows)
    int32_t n_half;             // N / 2: gate outputs per row
    GateParams gate;       // kGate: the gate and the column order ([gate | up] or interleaved [g0, u0, g1, u1, ...])
    float* d_scales;       // kGateE4m3: (P, d_scale_cols) scales of the codes, one per row and 128 output columns
    int32_t d_scale_cols;  // N / 2 / 128
    void* D;               // (P, d_row_bytes) the output, for the boxes stored row by row (a multiple of 16 bytes)
    int32_t d_row_bytes;
    uint8_t* save;           // kGateSave: (P, N) input dtype, for the boxes stored row by row
    int32_t save_row_bytes;  // N · element size
};

// Where this thread's accumulators sit: rows r_lo and r_lo + 8 of the warpgroup's 64, column pair 2q, 2q + 1
// of every 8-column block (the m64nNk16 accumulator layout, sm90_wgmma.cuh).
struct EpiThread {
    uint32_t r_lo;    // 16 · warp_in_warpgroup + lane / 4
    uint32_t q;       // lane % 4
    uint32_t tid;     // thread index in the warpgroup
    uint32_t bar_id;  // named barrier of this warpgroup
    uint32_t lane;
    bool leader;  // lane 0: issues and tracks the TMA stores of its warp
    __device__ __forceinline__ EpiThread(uint32_t warp, uint32_t lane_, uint32_t thread, uint32_t barrier)
        : r_lo(16 * (warp % 4) + lane_ / 4),
          q(lane_ % 4),
          tid(thread % 128),
          bar_id(barrier),
          lane(lane_),
          leader(lane_ == 0) {}
    __device__ __forceinline__ uint32_t row16() const { return r_lo & ~15u; }  // the warp's first row in a box
};

// What the epilogue of one tile needs besides the accumulators, loaded when the tile starts so that the loads'
// latency hides behind the main loop instead of stalling the epilogue.
struct TileExtras {
    float s_lo, s_hi;  // row_scale of rows r_lo, r_lo + 8 (1 without row_scale)
    uint32_t bias2;    // this thread's two bias values (accumulator columns 2·tid, 2·tid + 1), raw 16-bit pair
    float es;          // expert_scale of the tile's expert (1 without)
};

// x · sigmoid(k·x) = x / (1 + e^(-k·x)): MUFU.EX2 + MUFU.RCP, a few ulp. (x/2 + x/2 · tanh(k·x/2) would take one
// MUFU op but cancels for k·x << 0: tanh.approx's 2^-11 error becomes ~4% of silu(-5).) -k·x large: -0.
__device__ __forceinline__ float x_sigmoid(float x, float k) { return __fdividef(x, 1.f + __expf(-k * x)); }

// The gate in the epilogue: the functions of apply_gate (cuda/common/numeric.cuh) with MUFU approximations, a few
// ulp apart in f32 (the row-wise kernels there are not arithmetic-bound and keep libm's). kGptOss ignores kAct.
template <GateKind kKind, Activation kAct>
__device__ __forceinline__ float gate_value(float g, float u, float alpha, float limit) {
    if constexpr (kKind == GateKind::kGptOss) {
        g = fminf(g, limit);
        u = fmaxf(fminf(u, limit), -limit);
        return (u + 1.f) * x_sigmoid(g, alpha);
    } else if constexpr (kAct == Activation::kSilu) {
        return x_sigmoid(g, 1.f) * u;
    } else if constexpr (kAct == Activation::kGelu) {
        return 0.5f * g * erfcf(-0.7071067811865476f * g) * u;  // 1 + erf(x) = erfc(-x)
    } else if constexpr (kAct == Activation::kGeluTanh) {
        // 0.5·g·(1 + tanh(y)) = g · sigmoid(2y), y = sqrt(2/pi)·(g + 0.044715·g^3)
        const float y2 = 1.5957691216057308f * fmaf(0.044715f * g, g * g, g);
        return __fdividef(g, 1.f + __expf(-y2)) * u;
    } else {
        return fmaxf(g, 0.f) * u;  // relu
    }
}

template <typename T>
__device__ __forceinline__ float2 load_pair(const T* p) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(p));
    else
        return __half22float2(*reinterpret_cast<const __half2*>(p));
}
template <typename Out>
__device__ __forceinline__ void store_pair(uint8_t* dst, float a, float b) {
    if constexpr (std::is_same_v<Out, float>) {
        *reinterpret_cast<float2*>(dst) = make_float2(a, b);
    } else if constexpr (std::is_same_v<Out, __nv_bfloat16>) {
        *reinterpret_cast<__nv_bfloat162*>(dst) = __floats2bfloat162_rn(a, b);
    } else {
        *reinterpret_cast<__half2*>(dst) = __floats2half2_rn(a, b);
    }
}
template <typename Out>
__device__ __forceinline__ void store_one(uint8_t* dst, float a) {
    if constexpr (std::is_same_v<Out, __nv_bfloat16>)
        *reinterpret_cast<__nv_bfloat16*>(dst) = __float2bfloat16_rn(a);
    else
        *reinterpret_cast<__half*>(dst) = __float2half_rn(a);
}

// Byte offset of (row, byte) in a 128B-swizzled box: 16-byte chunk c of row r lives at chunk c ^ (r % 8).
// Rows r and r + 8 have the same r % 8, and the 8 rows a warp writes at once hit 8 different chunks: no conflicts.
__device__ __forceinline__ uint32_t swizzled(uint32_t row, uint32_t byte) {
    return row * 128 + ((((byte >> 4) ^ row) & 7) << 4) + (byte & 15);
}

template <typename T>
__device__ __forceinline__ uint32_t pack_pair(float a, float b) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>) {
        const __nv_bfloat162 v = __floats2bfloat162_rn(a, b);
        return *reinterpret_cast<const uint32_t*>(&v);
    } else {
        const __half2 v = __floats2half2_rn(a, b);
        return *reinterpret_cast<const uint32_t*>(&v);
    }
}

// Two 8-column blocks (b, b + 1; b even) of the warp's 16 rows of a box, 16-bit values, with one stmatrix.x4 instead
// of four 32-bit shared stores: matrix i is block b + i / 2, rows 8 (i % 2) .. + 7 of the warp's; each thread's
// registers are its accumulator pairs (m64nNk16 layout: row lane / 4, columns 2 (lane % 4) + {0, 1}, which is
// stmatrix's fragment) in the order (b, r_lo), (b, r_lo + 8), (b + 1, r_lo), (b + 1, r_lo + 8); lane l gives the
// swizzled address of matrix l / 8's row l % 8.
template <typename T>
__device__ __forceinline__ void stsm_two_blocks(uint8_t* box, const EpiThread& th, int b, float2 lo0, float2 hi0,
                                                float2 lo1, float2 hi1) {
    const uint32_t row = th.row16() + ((th.lane >> 3) & 1) * 8 + (th.lane & 7);
    const uint32_t addr = smem_u32(box) + swizzled(row, (static_cast<uint32_t>(b) + (th.lane >> 4)) * 16);
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};" ::"r"(addr),
                 "r"(pack_pair<T>(lo0.x, lo0.y)), "r"(pack_pair<T>(hi0.x, hi0.y)), "r"(pack_pair<T>(lo1.x, lo1.y)),
                 "r"(pack_pair<T>(hi1.x, hi1.y))
                 : "memory");
}

__device__ __forceinline__ float row_scale_of(const EpilogueParams& ep, int32_t row) {
    return (ep.row_scale != nullptr && row < ep.P) ? ep.row_scale[row] : 1.f;
}

// The tile's 256 accumulator columns are B rows [half0, half0 + 128) then [half1, half1 + 128) (the producer's two
// halves); thread tid fetches the bias of columns 2·tid, 2·tid + 1 with one 32-bit load.
template <typename T>
__device__ __forceinline__ TileExtras load_tile_extras(const EpilogueParams& ep, const EpiThread& th, int32_t row0,
                                                       int32_t expert, int32_t half0, int32_t half1) {
    TileExtras x{row_scale_of(ep, row0 + th.r_lo), row_scale_of(ep, row0 + th.r_lo + 8), 0u,
                 ep.expert_scale != nullptr ? ep.expert_scale[expert] : 1.f};
    const int32_t j = 2 * static_cast<int32_t>(th.tid), n = j < 128 ? half0 + j : half1 + (j - 128);
    if (ep.bias != nullptr && n < ep.N)
        x.bias2 = *reinterpret_cast<const uint32_t*>(static_cast<const T*>(ep.bias) +
                                                     static_cast<int64_t>(expert) * ep.N + n);
    return x;
}

// After the warp wrote its 16 rows of box `buf` (box row 0 = D row `row`): make the writes visible to the copy
// engine; the warp's leader waits until its previous store has read shared memory (so the next chunk may overwrite
// that box); __syncwarp publishes both facts to the warp; then the leader stores the warp's rows (issue(part,
// first_row)). Rows at or past row_lim among the warp's: its lanes copy 16-byte chunks of the rows below it to base +
// row · row_bytes + col_bytes (chunks at or past col_bytes_lim clipped as TMA clips them); the warp's next __syncwarp
// comes after these reads, before the box is written again.
template <class Issue>
__device__ __forceinline__ void store_box_rows(const EpiThread& th, const uint8_t* box, int32_t row, int32_t row_lim,
                                               Issue&& issue, uint8_t* base, int32_t row_bytes, int32_t col_bytes,
                                               int32_t col_bytes_lim) {
    const int32_t r16 = static_cast<int32_t>(th.row16());
    const uint8_t* part = box + r16 * 128;
    fence_proxy_async_smem();
    if (th.leader) bulk_wait_group_read<0>();
    __syncwarp();
    if (row + r16 + kStoreBoxRows <= row_lim) {
        if (th.leader) {
            issue(part, row + r16);
            bulk_commit_group();
        }
        return;
    }
    const int32_t rows = min(max(row_lim - row - r16, 0), kStoreBoxRows);
    for (int32_t i = static_cast<int32_t>(th.lane); i < rows * 8; i += 32) {
        const int32_t r = r16 + i / 8, byte = 16 * (i % 8);
        if (col_bytes + byte >= col_bytes_lim) continue;
        *reinterpret_cast<uint4*>(base + int64_t(row + r) * row_bytes + col_bytes + byte) =
            *reinterpret_cast<const uint4*>(box + swizzled(static_cast<uint32_t>(r), static_cast<uint32_t>(byte)));
    }
}

// A box of D at (col, row). kEsz: bytes per element of D (col's unit).
template <int kEsz>
__device__ __forceinline__ void store_box(const EpilogueParams& ep, const EpiThread& th, const CUtensorMap* map_d,
                                          const uint8_t* box, int32_t col, int32_t row, int32_t row_lim) {
    store_box_rows(
        th, box, row, row_lim, [&](const uint8_t* part, int32_t r) { tma_store_2d(map_d, part, col, r); },
        static_cast<uint8_t*>(ep.D), ep.d_row_bytes, col * kEsz, ep.d_row_bytes);
}

// kStore / kStoreF32: 256 accumulator columns n0 + [0, 256) -> 256 / kCols boxes. bias_s: (256,) tile bias.
template <typename T, typename Out>
__device__ __forceinline__ void epilogue_store(const EpilogueParams& ep, const CUtensorMap* map_d,
                                               const float (&acc)[128], uint8_t* staging, const T* bias_s,
                                               uint32_t& buf, const EpiThread& th, const TileExtras& x, int32_t row0,
                                               int32_t row_lim, int32_t n_tile) {
    constexpr int kCols = 128 / static_cast<int>(sizeof(Out));  // columns per box
    constexpr int kBlocks = kCols / 8;                          // 8-column accumulator blocks per box
    const int32_t n0 = n_tile * 256;
    const bool has_bias = ep.bias != nullptr;
#pragma unroll
    for (int c = 0; c < 256 / kCols; ++c) {
        if (n0 + c * kCols >= ep.N) break;  // uniform over the warpgroup
        uint8_t* box = staging + buf * kStoreBoxBytes;
        auto value = [&](int b, int hi) {  // block b of this box, row r_lo (hi 0) or r_lo + 8 (hi 1)
            const int j = c * kBlocks + b;
            const int32_t col = 8 * b + 2 * static_cast<int32_t>(th.q);  // inside the box
            const float2 bv = has_bias ? load_pair(bias_s + c * kCols + col) : make_float2(0.f, 0.f);
            const float s = hi ? x.s_hi : x.s_lo;
            return make_float2((acc[4 * j + 2 * hi] + bv.x) * s, (acc[4 * j + 2 * hi + 1] + bv.y) * s);
        };
        if constexpr (sizeof(Out) == 2) {
#pragma unroll
            for (int b = 0; b < kBlocks; b += 2)
                stsm_two_blocks<Out>(box, th, b, value(b, 0), value(b, 1), value(b + 1, 0), value(b + 1, 1));
        } else {
#pragma unroll
            for (int b = 0; b < kBlocks; ++b) {
                const uint32_t byte = (8 * b + 2 * th.q) * sizeof(Out);
                const float2 lo = value(b, 0), hi = value(b, 1);
                store_pair<Out>(box + swizzled(th.r_lo, byte), lo.x, lo.y);
                store_pair<Out>(box + swizzled(th.r_lo + 8, byte), hi.x, hi.y);
            }
        }
        store_box<sizeof(Out)>(ep, th, map_d, box, n0 + c * kCols, row0, row_lim);
        buf ^= 1;
    }
}

template <typename T>
__device__ __forceinline__ float round_to(float v) {
    if constexpr (std::is_same_v<T, __nv_bfloat16>)
        return __bfloat162float(__float2bfloat16_rn(v));
    else
        return __half2float(__float2half_rn(v));
}

// kGateE4m3, once the gate values (rounded to T) of this thread's 32 output columns of rows r_lo and r_lo + 8 sit in
// acc: kPairs (concatenated) value i at acc[4 (i / 2) + i % 2] (+ 2 for row r_lo + 8), output column 8 (i / 2) + 2q +
// i % 2; interleaved at acc[4i] (+ 2), column 4i + q. The tile's 128 output columns are one scale group per row,
// spread over the 4 lanes of a quad. Each row's amax over the quad, its scale amax / 448 and the codes
// e4m3(v * (448 / amax)) are launch_act_quant's f32 operations on the same values (an all-zero group: codes 0, scale
// 0); the codes fill one 64 x 128-byte box, the quad's first lane writes the two rows' scales.
template <bool kPairs>
__device__ __forceinline__ void store_e4m3_group(const EpilogueParams& ep, const CUtensorMap* map_d,
                                                 const float (&acc)[128], uint8_t* staging, uint32_t& buf,
                                                 const EpiThread& th, int32_t row0, int32_t row_lim, int32_t n_tile) {
    constexpr auto idx = [](int i) { return kPairs ? 4 * (i / 2) + i % 2 : 4 * i; };
    float m_lo = 0.f, m_hi = 0.f;
#pragma unroll
    for (int i = 0; i < 32; ++i) {
        m_lo = fmaxf(m_lo, fabsf(acc[idx(i)]));
        m_hi = fmaxf(m_hi, fabsf(acc[idx(i) + 2]));
    }
#pragma unroll
    for (int o = 1; o <= 2; o *= 2) {
        m_lo = fmaxf(m_lo, __shfl_xor_sync(0xffffffffu, m_lo, o));
        m_hi = fmaxf(m_hi, __shfl_xor_sync(0xffffffffu, m_hi, o));
    }
    const float s_lo = m_lo == 0.f ? 0.f : __fdiv_rn(m_lo, 448.f), s_hi = m_hi == 0.f ? 0.f : __fdiv_rn(m_hi, 448.f);
    uint8_t* box = staging + buf * kStoreBoxBytes;
    // Codes v * (448 / amax) (moex/quant.h); kPairs: a pair of adjacent columns converted and stored as one 16-bit
    // word. A zero row (padding) takes a branch, not a select, so no infinite inverse is ever multiplied.
    auto codes = [&](uint32_t row, int off, float m) {
        const float inv = m == 0.f ? 0.f : dynamic_inverse(m);
        if constexpr (kPairs) {
#pragma unroll
            for (int i = 0; i < 32; i += 2) {
                const uint16_t c2 = f32x2_to_e4m3x2(acc[idx(i) + off] * inv, acc[idx(i + 1) + off] * inv);
                *reinterpret_cast<uint16_t*>(box + swizzled(row, 8 * (i / 2) + 2 * th.q)) = c2;
            }
        } else {
#pragma unroll
            for (int i = 0; i < 32; ++i) box[swizzled(row, 4 * i + th.q)] = f32_to_e4m3(acc[idx(i) + off] * inv);
        }
    };
    codes(th.r_lo, 0, m_lo);
    codes(th.r_lo + 8, 2, m_hi);
    if (th.q == 0) {
        const int32_t r = row0 + static_cast<int32_t>(th.r_lo);
        if (r < row_lim) ep.d_scales[int64_t(r) * ep.d_scale_cols + n_tile] = s_lo;
        if (r + 8 < row_lim) ep.d_scales[int64_t(r + 8) * ep.d_scale_cols + n_tile] = s_hi;
    }
    store_box<1>(ep, th, map_d, box, n_tile * 128, row0, row_lim);
    buf ^= 1;
}

// kGateSave: the tile's 256 accumulator columns + bias, rounded to T, into `save` before the gate reads them, four
// boxes of 64 columns through map_s, a (P, halves, width) view of save: concatenated, (P, 2, I) with the gate half's
// 128 columns at (o0 + c, 0) and the up half's at (o0 + c, 1); interleaved, (P, 1, N) with B rows 256 · n_tile + c.
template <typename T>
__device__ __forceinline__ void save_preactivation(const EpilogueParams& ep, const CUtensorMap* map_s,
                                                   const float (&acc)[128], uint8_t* staging, const T* bias_s,
                                                   uint32_t& buf, const EpiThread& th, int32_t row0, int32_t row_lim,
                                                   int32_t n_tile) {
    const bool concat = ep.gate.concatenated;
    const int32_t width = concat ? ep.n_half : ep.N, first = concat ? n_tile * 128 : n_tile * 256;
    const bool has_bias = ep.bias != nullptr;
#pragma unroll
    for (int c = 0; c < 4; ++c) {
        const int32_t half = concat ? c / 2 : 0, col0 = first + 64 * (concat ? c % 2 : c);
        if (col0 >= width) continue;  // uniform over the warpgroup
        uint8_t* box = staging + buf * kStoreBoxBytes;
#pragma unroll
        for (int b = 0; b < 8; ++b) {
            const int j = 8 * c + b;
            const int32_t col = 8 * b + 2 * static_cast<int32_t>(th.q);
            const float2 bv = has_bias ? load_pair(bias_s + 64 * c + col) : make_float2(0.f, 0.f);
            const uint32_t byte = col * sizeof(T);
            store_pair<T>(box + swizzled(th.r_lo, byte), acc[4 * j] + bv.x, acc[4 * j + 1] + bv.y);
            store_pair<T>(box + swizzled(th.r_lo + 8, byte), acc[4 * j + 2] + bv.x, acc[4 * j + 3] + bv.y);
        }
        constexpr int32_t kEsz = sizeof(T);
        store_box_rows(
            th, box, row0, row_lim, [&](const uint8_t* part, int32_t r) { tma_store_3d(map_s, part, col0, half, r); },
            ep.save + int64_t(half) * width * kEsz, ep.save_row_bytes, col0 * kEsz, width * kEsz);
        buf ^= 1;
    }
}

// kGate: 128 output columns o0 + [0, 128) -> two boxes of 64 (kCodes: e4m3 codes in one box, store_e4m3_group).
// Concatenated: the CTA's B tile holds gate rows [o0, o0 + 128) then up rows [I + o0, I + o0 + 128), so output column c
// pairs accumulator columns c and c + 128 (column blocks j and j + 16). Interleaved: accumulator columns 2c, 2c + 1 are
// (gate, up) of output column c.
template <typename T, GateKind kKind, Activation kAct, bool kCodes, bool kSave>
__device__ __forceinline__ void epilogue_gate(const EpilogueParams& ep, const CUtensorMap* map_d,
                                              const CUtensorMap* map_s, float (&acc)[128], uint8_t* staging,
                                              const T* bias_s, uint32_t& buf, const EpiThread& th, const TileExtras& x,
                                              int32_t row0, int32_t row_lim, int32_t n_tile) {
    if constexpr (kSave) save_preactivation<T>(ep, map_s, acc, staging, bias_s, buf, th, row0, row_lim, n_tile);
    const int32_t o0 = n_tile * 128;
    const bool has_bias = ep.bias != nullptr;
    const float al = ep.gate.alpha, li = ep.gate.limit, s_lo = x.s_lo, s_hi = x.s_hi;
    const int32_t q2 = 2 * static_cast<int32_t>(th.q);
    const float2 zero = make_float2(0.f, 0.f);
    if constexpr (kCodes) {  // the gate values in place (each overwrites a register already read), then the codes
        if (ep.gate.concatenated) {
            // Output column 8j + 2q (+1) of block j: gate acc[4j ..], up acc[4(j + 16) ..].
#pragma unroll
            for (int j = 0; j < 16; ++j) {
                const int ju = j + 16;
                const float2 gb = has_bias ? load_pair(bias_s + 8 * j + q2) : zero;
                const float2 ub = has_bias ? load_pair(bias_s + 128 + 8 * j + q2) : zero;
                const float a0 = gate_value<kKind, kAct>(acc[4 * j] + gb.x, acc[4 * ju] + ub.x, al, li) * s_lo;
                const float a1 = gate_value<kKind, kAct>(acc[4 * j + 1] + gb.y, acc[4 * ju + 1] + ub.y, al, li) * s_lo;
                const float a2 = gate_value<kKind, kAct>(acc[4 * j + 2] + gb.x, acc[4 * ju + 2] + ub.x, al, li) * s_hi;
                const float a3 = gate_value<kKind, kAct>(acc[4 * j + 3] + gb.y, acc[4 * ju + 3] + ub.y, al, li) * s_hi;
                acc[4 * j] = round_to<T>(a0), acc[4 * j + 1] = round_to<T>(a1);
                acc[4 * j + 2] = round_to<T>(a2), acc[4 * j + 3] = round_to<T>(a3);
            }
            store_e4m3_group<true>(ep, map_d, acc, staging, buf, th, row0, row_lim, n_tile);
        } else {
            // Output column 4j + q: (gate, up) = acc[4j], acc[4j + 1] (row lo), acc[4j + 2], acc[4j + 3] (row hi).
#pragma unroll
            for (int j = 0; j < 32; ++j) {
                const float2 bv = has_bias ? load_pair(bias_s + 8 * j + q2) : zero;
                const float lo = gate_value<kKind, kAct>(acc[4 * j] + bv.x, acc[4 * j + 1] + bv.y, al, li) * s_lo;
                const float hi = gate_value<kKind, kAct>(acc[4 * j + 2] + bv.x, acc[4 * j + 3] + bv.y, al, li) * s_hi;
                acc[4 * j] = round_to<T>(lo), acc[4 * j + 2] = round_to<T>(hi);
            }
            store_e4m3_group<false>(ep, map_d, acc, staging, buf, th, row0, row_lim, n_tile);
        }
        return;
    }
    if (ep.gate.concatenated) {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            if (o0 + c * 64 >= ep.n_half) break;
            uint8_t* box = staging + buf * kStoreBoxBytes;
            auto value = [&](int b, int hi) {  // output block b of this box, row r_lo (hi 0) or r_lo + 8 (hi 1)
                const int j = 8 * c + b, ju = j + 16, r = 2 * hi;
                const int32_t col = 8 * b + q2;
                const float2 gb = has_bias ? load_pair(bias_s + 64 * c + col) : zero;
                const float2 ub = has_bias ? load_pair(bias_s + 128 + 64 * c + col) : zero;
                const float s = hi ? s_hi : s_lo;
                return make_float2(
                    gate_value<kKind, kAct>(acc[4 * j + r] + gb.x, acc[4 * ju + r] + ub.x, al, li) * s,
                    gate_value<kKind, kAct>(acc[4 * j + r + 1] + gb.y, acc[4 * ju + r + 1] + ub.y, al, li) * s);
            };
#pragma unroll
            for (int b = 0; b < 8; b += 2)
                stsm_two_blocks<T>(box, th, b, value(b, 0), value(b, 1), value(b + 1, 0), value(b + 1, 1));
            store_box<sizeof(T)>(ep, th, map_d, box, o0 + 64 * c, row0, row_lim);
            buf ^= 1;
        }
    } else {
#pragma unroll
        for (int c = 0; c < 2; ++c) {
            if (o0 + c * 64 >= ep.n_half) break;
            uint8_t* box = staging + buf * kStoreBoxBytes;
#pragma unroll
            for (int b = 0; b < 16; ++b) {
                const int j = 16 * c + b;
                const float2 bv = has_bias ? load_pair(bias_s + 8 * j + q2) : zero;
                const uint32_t byte = (4 * b + th.q) * sizeof(T);  // output column 4b + q inside the box
                store_one<T>(box + swizzled(th.r_lo, byte),
                             gate_value<kKind, kAct>(acc[4 * j] + bv.x, acc[4 * j + 1] + bv.y, al, li) * s_lo);
                store_one<T>(box + swizzled(th.r_lo + 8, byte),
                             gate_value<kKind, kAct>(acc[4 * j + 2] + bv.x, acc[4 * j + 3] + bv.y, al, li) * s_hi);
            }
            store_box<sizeof(T)>(ep, th, map_d, box, o0 + 64 * c, row0, row_lim);
            buf ^= 1;
        }
    }
}

// Writes one warpgroup's 64 rows (row0 = first row; those at or past row_lim not) of the tile. `staging`: this
// warpgroup's two boxes; `bias_s`: its 256-entry bias slot, filled here from x.bias2; map_s: kGateSave's view of save.
template <typename T, EpiKind kEpi>
__device__ __forceinline__ void epilogue(const EpilogueParams& ep, const CUtensorMap* map_d, const CUtensorMap* map_s,
                                         float (&acc)[128], uint8_t* staging, T* bias_s, uint32_t& buf,
                                         const EpiThread& th, const TileExtras& x, int32_t row0, int32_t row_lim,
                                         int32_t n_tile) {
    if (ep.bias != nullptr) {  // publish the tile's bias once every warp has read the previous tile's
        named_barrier_sync(th.bar_id, 128);
        reinterpret_cast<uint32_t*>(bias_s)[th.tid] = x.bias2;
        named_barrier_sync(th.bar_id, 128);
    }
    if constexpr (kEpi == EpiKind::kStore) {
        epilogue_store<T, T>(ep, map_d, acc, staging, bias_s, buf, th, x, row0, row_lim, n_tile);
    } else if constexpr (kEpi == EpiKind::kStoreF32) {
        epilogue_store<T, float>(ep, map_d, acc, staging, bias_s, buf, th, x, row0, row_lim, n_tile);
    } else {
        constexpr bool kCodes = kEpi == EpiKind::kGateE4m3, kSave = kEpi == EpiKind::kGateSave;
        auto gate = [&](auto kind, auto act) {
            epilogue_gate<T, decltype(kind)::value, decltype(act)::value, kCodes, kSave>(
                ep, map_d, map_s, acc, staging, bias_s, buf, th, x, row0, row_lim, n_tile);
        };
        using Kind = GateKind;
        using Act = Activation;
        if (ep.gate.kind == Kind::kGptOss)
            return gate(std::integral_constant<Kind, Kind::kGptOss>{}, std::integral_constant<Act, Act::kSilu>{});
        constexpr std::integral_constant<Kind, Kind::kDefault> kDefault{};
        switch (ep.gate.activation) {
            case Act::kSilu: return gate(kDefault, std::integral_constant<Act, Act::kSilu>{});
            case Act::kGelu: return gate(kDefault, std::integral_constant<Act, Act::kGelu>{});
            case Act::kGeluTanh: return gate(kDefault, std::integral_constant<Act, Act::kGeluTanh>{});
            case Act::kRelu: return gate(kDefault, std::integral_constant<Act, Act::kRelu>{});
        }
    }
}

}  // namespace moex::cuda::sm90
