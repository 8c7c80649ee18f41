// The AMX tile primitives shared by the bf16 GEMM (gemm_amx.cpp) and the quantized one (gemm_quant_amx.cpp): the
// tile configuration, the k step of a 2 x 2 block of C, and the weight tiles' block, operand, k block and transposed
// store. Included by *_amx.cpp files only (their compile options enable AMX-TILE, AMX-BF16 and AVX-512).
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "src/cpu/config.h"
#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/cpu/transpose_avx512.h"

namespace moex::cpu {

bool amx_request_tile_state();                                                                  // gemm_amx.cpp
void pack_b_bf16_avx512(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst);  // gemm_avx512.cpp

namespace amx {

// TUTORIAL: AMX. Eight tile registers tmm0-7 of up to 16 rows x 64 bytes, shaped by LDTILECFG from a 64-byte
// configuration (palette 1: the rows and bytes per row of each tile). TILELOADD / TILESTORED move a tile from / to 16
// rows of memory at a byte stride. TDPBF16PS c, a, b adds to each f32 c[i][j] the products a[i][2p]·b[p][2j] and
// a[i][2p + 1]·b[p][2j + 1] for the k pairs p < 16, in order (bf16 inputs exact, f32 sums rounded to nearest even,
// subnormals read and written as zero, MXCSR ignored): A is 16 rows of 32 bf16 k values, B 16 rows of k pairs, each
// 16 columns x 2 bf16 (the "VNNI" layout, which is pack_b_bf16's panel [k pair][16 columns] of dwords exactly), C is
// 16 x 16 f32. Here tmm0-3 hold a 32 x 32 block of C (tmm 2h + v: row half h, column half v), tmm4-5 the A tiles of
// its row halves, tmm6-7 the B tiles of its column halves: 4 TDPBF16PS per 4 tile loads. The tile data is 8 KiB of
// thread state, so Linux hands it out on request (arch_prctl ARCH_REQ_XCOMP_PERM, granted per process); a thread that
// runs AMX without the grant dies of SIGILL.

// Tile loads the compiler orders against this thread's stores. GCC's _tile_loadd (amxtileintrin.h, GCC 12) passes
// the address as a plain register and declares no memory access, so the stores that write a tile's bytes (packed rows,
// decoded panels) could be moved after the load, and later stores into the same buffer before it; the "memory"
// clobber forbids both. (TDPBF16PS touches no memory; _tile_stored already clobbers it.)
#define MOEX_TILE_LOADD(dst, base, stride)                                        \
    __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #dst "|tileloadd\t%%tmm" #dst \
                     ", [%0+%1*1]}" ::"r"(static_cast<const void*>(base)),        \
                     "r"(static_cast<long>(stride))                               \
                     : "memory")

constexpr int kTileRows = 16, kTileBytes = 64;  // every tile here: 16 rows x 64 bytes
constexpr int kBlock = 32;                      // rows and columns of C per step: 2 x 2 tiles
constexpr int kPairsPerTile = 16;               // k pairs per A / B tile: 32 k values

struct alignas(64) TileConfig {
    uint8_t palette = 1;
    uint8_t start_row = 0;
    uint8_t reserved[14] = {};
    uint16_t colsb[16] = {};  // bytes per row of tmm i
    uint8_t rows[16] = {};    // rows of tmm i
};
static_assert(sizeof(TileConfig) == 64, "LDTILECFG reads 64 bytes");

// The thread's tile state: granted (once per thread: the grant is per process, so after amx_kernels() saw it this
// cannot fail, and running on would be SIGILL) and configured (LDTILECFG is per thread; once per GEMM call).
inline void begin_tiles() {
    thread_local const bool granted = amx_request_tile_state();
    if (!granted) {
        std::fprintf(stderr, "moex: the OS refused this thread the AMX tile state after granting it to the process\n");
        std::abort();
    }
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = kTileBytes, cfg.rows[t] = kTileRows;
    asm volatile("ldtilecfg %0" ::"m"(cfg));  // the whole struct as the operand (the intrinsic names 8 bytes of it)
}

// The tiles of one MT x NT block of C (tmm 2h + v) zeroed, and one k step into them: A tiles (16 rows of 32 k, sa
// bytes apart) at a0 and a1, B tiles (16 k pairs of 64 bytes) at b0 and b1, 4 TDPBF16PS.
template <int MT, int NT>
inline void zero_tiles() {
    _tile_zero(0);
    if constexpr (NT == 2) _tile_zero(1);
    if constexpr (MT == 2) _tile_zero(2);
    if constexpr (MT == 2 && NT == 2) _tile_zero(3);
}

template <int MT, int NT>
inline void tile_step(const void* a0, const void* a1, int64_t sa, const void* b0, const void* b1) {
    MOEX_TILE_LOADD(4, a0, sa);
    if constexpr (MT == 2) MOEX_TILE_LOADD(5, a1, sa);
    MOEX_TILE_LOADD(6, b0, kTileBytes);
    if constexpr (NT == 2) MOEX_TILE_LOADD(7, b1, kTileBytes);
    _tile_dpbf16ps(0, 4, 6);
    if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
    if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
    if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
}

// ---- Weight tiles: the weights' rows as the A operand ----
// TDPBF16PS's A operand is 16 rows of 32 k at any stride: exactly 16 rows of the weights (rows layout) in place. So
// Cᵀ = B·Aᵀ runs with the weights loaded straight into tmm4-5 (no packing: their bytes are read once, by the tile
// loads) and A's rows packed as the B operand (pack_b_bf16 of the bf16 rows: [k pair][16 rows] dwords), 32 weight
// rows x 32 A rows of Cᵀ per block. Each element's products and their order are the packed kernel's (the products
// are exact, the pairs summed in the same order), so the two kernels agree bit for bit.

// The 2 x 2 tiles of one Cᵀ block: tile 2h + v holds weight rows 16h.., A rows 16v..
template <int MT, int NT>
void weight_block(const uint16_t* w, int64_t ldw, const uint32_t* x, int64_t group, int64_t steps, const uint16_t* tail,
                  const float* acc_in, float* acc_out, const char* prefetch, int64_t pf_stride) {
    if (acc_in) {
        MOEX_TILE_LOADD(0, acc_in, kTileBytes);
        if constexpr (NT == 2) MOEX_TILE_LOADD(1, acc_in + 256, kTileBytes);
        if constexpr (MT == 2) MOEX_TILE_LOADD(2, acc_in + 512, kTileBytes);
        if constexpr (MT == 2 && NT == 2) MOEX_TILE_LOADD(3, acc_in + 768, kTileBytes);
    } else {
        zero_tiles<MT, NT>();
    }
    const int64_t sw = ldw * 2;
    for (int64_t s = 0; s < steps; ++s) {
        // the last step of a k block past K reads its 32 rows x 32 k from `tail` (zero past K)
        const bool from_tail = tail != nullptr && s == steps - 1;
        const uint16_t* ws = from_tail ? tail : w + s * 32;
        const int64_t st = from_tail ? kTileBytes : sw;
        if (prefetch)
            for (int i = 0; i < 16 * MT; ++i) _mm_prefetch(prefetch + i * pf_stride + s * 64, _MM_HINT_T0);
        const uint32_t* xs = x + s * kPairsPerTile * 16;
        tile_step<MT, NT>(ws, ws + 16 * (from_tail ? 32 : ldw), st, xs, xs + group);
    }
    _tile_stored(0, acc_out, kTileBytes);
    if constexpr (NT == 2) _tile_stored(1, acc_out + 256, kTileBytes);
    if constexpr (MT == 2) _tile_stored(2, acc_out + 512, kTileBytes);
    if constexpr (MT == 2 && NT == 2) _tile_stored(3, acc_out + 768, kTileBytes);
}

// Cᵀ tiles (4 x 16 x 16 f32 at t, tile 2h + v) into C: rows (A) r < rows, columns (weights) j < cols.
inline void store_transposed(const float* t, float* c, int64_t ldc, int rows, int cols) {
    for (int h = 0; h < 2 && 16 * h < cols; ++h)
        for (int v = 0; v < 2 && 16 * v < rows; ++v) {
            __m512i r[16];
            for (int i = 0; i < 16; ++i) r[i] = _mm512_load_si512(t + (2 * h + v) * 256 + i * 16);
            transpose16(r);  // r[j]: A row 16v + j, weight rows 16h..16h + 15
            const int nr = rows - 16 * v < 16 ? rows - 16 * v : 16, nc = cols - 16 * h < 16 ? cols - 16 * h : 16;
            const __mmask16 mk = __mmask16((1u << nc) - 1);
            for (int j = 0; j < nr; ++j) _mm512_mask_storeu_epi32(c + (16 * v + j) * ldc + 16 * h, mk, r[j]);
        }
}

inline void run_weight_block(const uint16_t* w, int64_t ldw, const uint32_t* x, int64_t group, int64_t steps,
                             const uint16_t* tail, const float* acc_in, float* acc_out, const char* pf,
                             int64_t pf_stride, int wrows, int arows) {
    if (wrows > 16 && arows > 16)
        return weight_block<2, 2>(w, ldw, x, group, steps, tail, acc_in, acc_out, pf, pf_stride);
    if (wrows > 16) return weight_block<2, 1>(w, ldw, x, group, steps, tail, acc_in, acc_out, pf, pf_stride);
    if (arows > 16) return weight_block<1, 2>(w, ldw, x, group, steps, tail, acc_in, acc_out, pf, pf_stride);
    weight_block<1, 1>(w, ldw, x, group, steps, tail, acc_in, acc_out, pf, pf_stride);
}

// The weight tiles' B operand: A's rows packed as [m16 / 16][K32 / 2][16] dwords, `packed` where the caller prepared
// them (gemm.h Bf16Rows), else packed here into the thread's scratch slot 0.
inline const uint32_t* weight_tile_rows(const uint16_t* a, int64_t lda, int64_t m16, int64_t K32,
                                        const uint32_t* packed) {
    if (packed != nullptr) return packed;
    auto* own = reinterpret_cast<uint32_t*>(thread_scratch(0, m16 * K32 / 2));
    pack_b_bf16_avx512(WeightMat{a, DType::kBF16, false, lda, K32}, m16, 0, K32, own);
    return own;
}

// The longest k block of the weight tiles for m16 packed rows: their k block within kAmxWeightTileRowBytes (L2), at
// least 512 k; a multiple of 32.
inline int64_t weight_tile_k(int64_t m16) {
    const int64_t k = kAmxWeightTileRowBytes / (m16 * 2) / 32 * 32;
    return k > 512 ? k : 512;
}

}  // namespace amx
}  // namespace moex::cpu
