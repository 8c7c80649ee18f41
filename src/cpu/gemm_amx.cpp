// The AMX-BF16 GEMM of the amx table: C = A·Bᵀ for bf16 A rows and bf16 B on the eight tile registers (32 x 32 f32
// of C per step), and the Linux request for the tile state. Written without AMX hardware (the 2-core Xeon of
// bench/RESULTS.md M has none): it follows the ISA reference, its tests and timing run on an AMX Xeon.
#include <immintrin.h>
#if defined(__linux__)
#include <asm/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "src/cpu/kernels.h"
#include "src/cpu/next_block.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {

void pack_b_bf16_avx512(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst);  // gemm_avx512.cpp

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

// Asks the OS for the AMX tile data; true when granted (idempotent, so each thread may ask for itself).
bool amx_request_tile_state() {
#if defined(__linux__) && defined(ARCH_REQ_XCOMP_PERM)
    constexpr int kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, kXfeatureXtiledata) != 0) return false;
    unsigned long features = 0;
    if (syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &features) != 0) return false;
    return (features >> kXfeatureXtiledata) & 1u;
#else
    return false;
#endif
}

namespace {

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
void begin_tiles() {
    thread_local const bool granted = amx_request_tile_state();
    if (!granted) {
        std::fprintf(stderr, "moex: the OS refused this thread the AMX tile state after granting it to the process\n");
        std::abort();
    }
    TileConfig cfg;
    for (int t = 0; t < 8; ++t) cfg.colsb[t] = kTileBytes, cfg.rows[t] = kTileRows;
    asm volatile("ldtilecfg %0" ::"m"(cfg));  // the whole struct as the operand (the intrinsic names 8 bytes of it)
}

// Where C tile (h, v) of a block lives while the tiles run: in place when it is whole, else in a zero-padded copy.
struct CPlace {
    float* mem;  // c itself or buf
    int64_t stride;
    float* c;  // the tile's corner in C
    int rows, cols;
};

inline CPlace place_tile(float* c, int64_t ldc, int rows, int cols, float* buf, bool acc) {
    rows = rows < kTileRows ? rows : kTileRows, cols = cols < 16 ? cols : 16;
    if (rows == kTileRows && cols == 16) return CPlace{c, ldc * 4, c, rows, cols};
    std::memset(buf, 0, kTileRows * kTileBytes);
    if (acc)
        for (int i = 0; i < rows; ++i) std::memcpy(buf + i * 16, c + i * ldc, size_t(cols) * 4);
    return CPlace{buf, kTileBytes, c, rows, cols};
}

inline void unplace_tile(const CPlace& t, int64_t ldc) {
    if (t.mem == t.c) return;
    for (int i = 0; i < t.rows; ++i) std::memcpy(t.c + i * ldc, t.mem + i * 16, size_t(t.cols) * 4);
}

// One block of C, MT x NT tiles (1 or 2 each; rows <= 32, cols <= 32 of it are C's), over `steps` tiles of k: A
// rows at a (lda bf16 apart, k already offset), B panels at b0 and b0 + panel (kc2 pairs of 16 dwords each).
// C from C (acc) or zero; each element gets the same TDPBF16PS sequence wherever its block lies.
template <int MT, int NT>
void tile_block(const uint16_t* a, int64_t lda, const uint32_t* b0, int64_t panel, int64_t steps, float* c, int64_t ldc,
                int rows, int cols, bool acc) {
    alignas(64) float buf[4][kTileRows * 16];
    CPlace t[4];
    for (int h = 0; h < MT; ++h)
        for (int v = 0; v < NT; ++v)
            t[2 * h + v] =
                place_tile(c + h * 16 * ldc + v * 16, ldc, rows - 16 * h, cols - 16 * v, buf[2 * h + v], acc);
    asm volatile("" ::: "memory");  // the copies and padding above reach memory before the tile loads read it
    const int64_t sa = lda * 2;
    if (acc) {
        _tile_loadd(0, t[0].mem, t[0].stride);
        if constexpr (NT == 2) _tile_loadd(1, t[1].mem, t[1].stride);
        if constexpr (MT == 2) _tile_loadd(2, t[2].mem, t[2].stride);
        if constexpr (MT == 2 && NT == 2) _tile_loadd(3, t[3].mem, t[3].stride);
    } else {
        _tile_zero(0);
        if constexpr (NT == 2) _tile_zero(1);
        if constexpr (MT == 2) _tile_zero(2);
        if constexpr (MT == 2 && NT == 2) _tile_zero(3);
    }
    for (int64_t s = 0; s < steps; ++s) {
        const uint16_t* as = a + s * 2 * kPairsPerTile;
        const uint32_t* bs = b0 + s * kPairsPerTile * 16;
        _tile_loadd(4, as, sa);
        if constexpr (MT == 2) _tile_loadd(5, as + 16 * lda, sa);
        _tile_loadd(6, bs, kTileBytes);
        if constexpr (NT == 2) _tile_loadd(7, bs + panel, kTileBytes);
        _tile_dpbf16ps(0, 4, 6);
        if constexpr (NT == 2) _tile_dpbf16ps(1, 4, 7);
        if constexpr (MT == 2) _tile_dpbf16ps(2, 5, 6);
        if constexpr (MT == 2 && NT == 2) _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, t[0].mem, t[0].stride);
    if constexpr (NT == 2) _tile_stored(1, t[1].mem, t[1].stride);
    if constexpr (MT == 2) _tile_stored(2, t[2].mem, t[2].stride);
    if constexpr (MT == 2 && NT == 2) _tile_stored(3, t[3].mem, t[3].stride);
    for (int h = 0; h < MT; ++h)
        for (int v = 0; v < NT; ++v) unplace_tile(t[2 * h + v], ldc);
}

void run_block(const uint16_t* a, int64_t lda, const uint32_t* b0, int64_t panel, int64_t steps, float* c, int64_t ldc,
               int rows, int cols, bool acc) {
    if (rows > 16 && cols > 16) return tile_block<2, 2>(a, lda, b0, panel, steps, c, ldc, rows, cols, acc);
    if (rows > 16) return tile_block<2, 1>(a, lda, b0, panel, steps, c, ldc, rows, cols, acc);
    if (cols > 16) return tile_block<1, 2>(a, lda, b0, panel, steps, c, ldc, rows, cols, acc);
    tile_block<1, 1>(a, lda, b0, panel, steps, c, ldc, rows, cols, acc);
}

}  // namespace

// k blocks of kcb outermost (B's block packed once as panels of k pairs, padded with zero pairs to whole tiles, the
// next block prefetched meanwhile), then column pairs (their 2 x kcb/2 x 64 bytes stay in L1) over 32-row blocks of A.
void gemm_bf16_amx(const uint16_t* a, int64_t lda, int64_t m, const WeightMat& b, int64_t n, int64_t kcb, float* c,
                   int64_t ldc) {
    const int64_t panels = (n + 15) / 16;
    auto* pack = reinterpret_cast<uint32_t*>(thread_scratch(0, panels * (kcb / 2) * kNr));
    const int64_t calls = ((m + kBlock - 1) / kBlock) * ((n + kBlock - 1) / kBlock);
    begin_tiles();
    for (int64_t k0 = 0; k0 < b.K; k0 += kcb) {
        const int64_t kc = b.K - k0 < kcb ? b.K - k0 : kcb, k1 = k0 + kc;
        const int64_t kp = (kc + 1) / 2, kp16 = (kp + kPairsPerTile - 1) / kPairsPerTile * kPairsPerTile;
        for (int64_t q = 0; q < panels; ++q) {  // (kp16, 16) dwords per panel, zero past kp
            uint32_t* dst = pack + q * kp16 * kNr;
            pack_b_bf16_avx512(b.from_row(q * kNr), n - q * kNr < kNr ? n - q * kNr : kNr, k0, kc, dst);
            std::memset(dst + kp * kNr, 0, size_t((kp16 - kp) * kNr) * 4);
        }
        NextBlock next(b, n, k1, b.K - k1 < kcb ? b.K - k1 : kcb, calls);
        for (int64_t p = 0; p < n; p += kBlock)
            for (int64_t r = 0; r < m; r += kBlock) {
                next.step();
                run_block(a + r * lda + k0, lda, pack + (p / kNr) * kp16 * kNr, kp16 * kNr, kp16 / kPairsPerTile,
                          c + r * ldc + p, ldc, int(m - r < kBlock ? m - r : kBlock),
                          int(n - p < kBlock ? n - p : kBlock), k0 > 0);
            }
    }
    _tile_release();
}

}  // namespace moex::cpu
