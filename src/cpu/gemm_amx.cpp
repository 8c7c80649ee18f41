// The AMX-BF16 GEMM of the amx table: C = A·Bᵀ for bf16 A rows and bf16 B on the eight tile registers (32 x 32 f32
// of C per step), and the Linux request for the tile state. Written without AMX hardware (the 2-core Xeon of
// bench/RESULTS.md M has none): it follows the ISA reference, its tests and timing run on an AMX Xeon.
#include <immintrin.h>
#if defined(__linux__)
#include <asm/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "src/cpu/amx_tiles.h"
#include "src/cpu/config.h"
#include "src/cpu/kernels.h"
#include "src/cpu/next_block.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {

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

using namespace amx;

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
    const int64_t sa = lda * 2;
    if (acc) {
        MOEX_TILE_LOADD(0, t[0].mem, t[0].stride);
        if constexpr (NT == 2) MOEX_TILE_LOADD(1, t[1].mem, t[1].stride);
        if constexpr (MT == 2) MOEX_TILE_LOADD(2, t[2].mem, t[2].stride);
        if constexpr (MT == 2 && NT == 2) MOEX_TILE_LOADD(3, t[3].mem, t[3].stride);
    } else {
        zero_tiles<MT, NT>();
    }
    for (int64_t s = 0; s < steps; ++s) {
        const uint16_t* as = a + s * 2 * kPairsPerTile;
        const uint32_t* bs = b0 + s * kPairsPerTile * 16;
        tile_step<MT, NT>(as, as + 16 * lda, sa, bs, bs + panel);
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

// C (m, n) = A·Bᵀ on weight tiles: A's m bf16 rows (lda apart, readable to a multiple of 16 rows, zero to lda) packed
// as [m16 / 16][K32 / 2][16] dwords, B's rows (not transposed) read in place. k blocks of kc keep the packed rows in L2
// (the partial Cᵀ of a block goes through scratch between them); the next 32 weight rows are prefetched meanwhile where
// rows are short.
void gemm_weight_tiles(const uint16_t* a, int64_t lda, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc,
                       const uint32_t* packed) {
    const int64_t K = b.K, K32 = (K + 31) / 32 * 32, m16 = (m + 15) / 16 * 16, group = K32 / 2 * 16;
    const uint32_t* x = weight_tile_rows(a, lda, m16, K32, packed);
    const int64_t kmax = weight_tile_k(m16);
    const int64_t kblocks = (K32 + kmax - 1) / kmax, kc = (K32 / 32 + kblocks - 1) / kblocks * 32;
    const int64_t nb32 = (n + 31) / 32, mb32 = (m16 + 31) / 32;
    float* acc = kblocks > 1 ? thread_scratch(4, nb32 * mb32 * 1024) : nullptr;
    alignas(64) float out[1024];
    alignas(64) uint16_t tail[32 * 32];
    std::vector<uint16_t> rows_buf;  // weight rows of a partial 16-row tile, zero-padded
    const auto* wbase = static_cast<const uint16_t*>(b.data);
    begin_tiles();
    for (int64_t k0 = 0; k0 < K32; k0 += kc) {
        const int64_t kcc = K32 - k0 < kc ? K32 - k0 : kc, steps = kcc / 32;
        const bool last_k = k0 + kcc >= K32, past_k = k0 + kcc > K;
        for (int64_t nr = 0; nr < n; nr += 32) {
            const int wrows = int(n - nr < 32 ? n - nr : 32);
            const uint16_t* w = wbase + nr * b.ld + k0;
            int64_t ldw = b.ld;
            if (wrows % 16 != 0) {  // a partial tile: its rows copied, the rest zero
                const int64_t rows16 = (wrows + 15) / 16 * 16;
                rows_buf.assign(size_t(rows16 * kcc), 0);
                for (int i = 0; i < wrows; ++i)
                    std::memcpy(rows_buf.data() + i * kcc, w + i * b.ld, size_t(std::min(kcc, K - k0)) * 2);
                w = rows_buf.data(), ldw = kcc;
            }
            const uint16_t* tl = nullptr;
            if (past_k && w != rows_buf.data()) {  // the last step's 32 k reach past K: copy them, zero past K
                std::memset(tail, 0, sizeof(tail));
                const int64_t kl = (steps - 1) * 32, valid = K - k0 - kl;
                for (int i = 0; i < wrows; ++i) std::memcpy(tail + i * 32, w + i * ldw + kl, size_t(valid) * 2);
                tl = tail;
            }
            // the next block's weight rows (next 32 rows, or the next k block's first), prefetched by the first pass
            // where the rows are short (config.h kAmxWeightTilePrefetchMaxRowBytes)
            const bool more = (nr + 32 < n || !last_k) && b.ld * 2 < kAmxWeightTilePrefetchMaxRowBytes;
            const char* pf = nullptr;
            if (more) {
                const int64_t pn = nr + 32 < n ? nr + 32 : 0, pk = nr + 32 < n ? k0 : k0 + kcc;
                const int64_t prow = std::min<int64_t>(32, n - pn);
                pf = prow == 32 ? reinterpret_cast<const char*>(wbase + pn * b.ld + pk) : nullptr;
            }
            for (int64_t tr = 0; tr < m16; tr += 32) {
                const int arows = int(m16 - tr < 32 ? m16 - tr : 32);
                float* blk = acc ? acc + ((nr / 32) * mb32 + tr / 32) * 1024 : nullptr;
                run_weight_block(w, ldw, x + (tr / 16) * group + k0 / 2 * 16, group, steps, tl, k0 > 0 ? blk : nullptr,
                                 last_k ? out : blk, tr == 0 ? pf : nullptr, b.ld * 2, wrows, arows);
                if (last_k) store_transposed(out, c + tr * ldc + nr, ldc, int(std::min<int64_t>(m - tr, 32)), wrows);
            }
        }
    }
    _tile_release();
}

}  // namespace

// Packed tiles above kAmxWeightTileMaxRows rows or for transposed weights (config.h): column blocks of kAmxPackCols
// outermost, each k block of it packed once (the next block prefetched into L2 meanwhile), then row blocks of mc rows,
// column pairs (their packed panels in L1/L2) over the 32-row blocks of A; C from memory past the first k block.
void gemm_bf16_amx(const uint16_t* a, int64_t lda, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc,
                   const uint32_t* packed) {
    if (!b.transposed && m <= kAmxWeightTileMaxRows) return gemm_weight_tiles(a, lda, m, b, n, c, ldc, packed);
    const int64_t K32 = (b.K + 31) / 32 * 32;
    const int64_t nc = n < kAmxPackCols ? n : kAmxPackCols;
    // kc: all of K when the packed block fits, else K in equal parts of whole tiles
    const int64_t kmax = std::max<int64_t>(32, kAmxPackBytes / (nc * 2) / 32 * 32);
    const int64_t kblocks = (K32 + kmax - 1) / kmax;
    const int64_t kc = (K32 / 32 + kblocks - 1) / kblocks * 32;
    const int64_t mc = std::max<int64_t>(32, kAmxRowBlockBytes / (kc * 2) / 32 * 32);
    const int64_t panels = (nc + 15) / 16, kp16 = kc / 2;
    auto* pack = reinterpret_cast<uint32_t*>(thread_scratch(0, panels * kp16 * kNr));
    begin_tiles();
    for (int64_t n0 = 0; n0 < n; n0 += nc) {
        const int64_t nb = n - n0 < nc ? n - n0 : nc;
        for (int64_t k0 = 0; k0 < b.K; k0 += kc) {
            const int64_t kcc = b.K - k0 < kc ? b.K - k0 : kc, kp = (kcc + 1) / 2;
            const int64_t kpt = (kp + kPairsPerTile - 1) / kPairsPerTile * kPairsPerTile;
            for (int64_t q = 0; q * kNr < nb; ++q) {
                uint32_t* dst = pack + q * kpt * kNr;
                pack_b_bf16_avx512(b.from_row(n0 + q * kNr), nb - q * kNr < kNr ? nb - q * kNr : kNr, k0, kcc, dst);
                std::memset(dst + kp * kNr, 0, size_t((kpt - kp) * kNr) * 4);
            }
            // the next B block: this block's columns at the next k, or the next columns from k = 0
            const bool last_k = k0 + kc >= b.K;
            const int64_t n1 = last_k ? n0 + nc : n0, k1 = last_k ? 0 : k0 + kc;
            const int64_t calls = ((m + kBlock - 1) / kBlock) * ((nb + kBlock - 1) / kBlock);
            NextBlock next(b.from_row(n1 < n ? n1 : n0), n1 < n ? std::min(nc, n - n1) : 0, k1,
                           b.K - k1 < kc ? b.K - k1 : kc, calls);
            for (int64_t r0 = 0; r0 < m; r0 += mc) {
                const int64_t r1 = m - r0 < mc ? m : r0 + mc;
                for (int64_t p = 0; p < nb; p += kBlock)
                    for (int64_t r = r0; r < r1; r += kBlock) {
                        next.step();
                        run_block(a + r * lda + k0, lda, pack + (p / kNr) * kpt * kNr, kpt * kNr, kpt / kPairsPerTile,
                                  c + r * ldc + n0 + p, ldc, int(m - r < kBlock ? m - r : kBlock),
                                  int(nb - p < kBlock ? nb - p : kBlock), k0 > 0);
                    }
            }
        }
    }
    _tile_release();
}

}  // namespace moex::cpu
