// The GEMM driver: kernel choice by row count, cache blocking of the packed path, and dense_gemm for the benchmark.
#include "src/cpu/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <vector>

#include "src/cpu/config.h"
#include "src/cpu/kernels.h"
#include "src/cpu/next_block.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {
namespace {

// The tiles of one packed B block, tile(r, mr, p, nr). The 6-row AVX2 tile: row tiles outer (6 x kc f32 of A stays
// in L1 while the 16-wide panels stream from L2). The 12x32 AVX-512 tile: panels outer (a 2 x kc x 16 panel pair stays
// in L1 while the row tiles of A stream from L2): grouped_mm at T = 512 on the Xeon of bench/RESULTS.md M went from
// 1.65-1.95 s to 1.56-1.57 (mixtral bf16) and 2.02 to 1.87 (f32), qwen3 within noise. The order of the tiles never
// changes an element's sum.
template <class Tile>
inline void for_tiles(const KernelTable& kt, int64_t m, int64_t n, Tile tile) {
    const bool panels_outer = kt.mr >= 12;
    for (int64_t i = 0; i < (panels_outer ? n : m); i += panels_outer ? kt.nr : kt.mr)
        for (int64_t j = 0; j < (panels_outer ? m : n); j += panels_outer ? kt.mr : kt.nr) {
            const int64_t r = panels_outer ? j : i, p = panels_outer ? i : j;
            tile(r, int(m - r < kt.mr ? m - r : kt.mr), p, int(n - p < kt.nr ? n - p : kt.nr));
        }
}

// C = A·Bᵀ through packed panels; n <= nc. Loop order: k block (the B block, kc x n f32, packed once and kept in L2)
// -> the tiles (for_tiles). The rows of A are read once per k block per panel order, so any m works without
// re-packing B. Each element is one fma chain in increasing k.
void gemm_packed(const KernelTable& kt, const float* const* a, int64_t m, const WeightMat& b, int64_t n, int64_t kcb,
                 float* c, int64_t ldc) {
    float* pack = thread_scratch(0, kcb * ((n + kt.nr - 1) / kt.nr) * kt.nr);
    float* rows = b.quantized() ? thread_scratch(5, n * kcb) : nullptr;  // quantized: (n, kc) f32 before packing
    const int64_t calls = ((m + kt.mr - 1) / kt.mr) * ((n + kt.nr - 1) / kt.nr);
    for (int64_t k0 = 0; k0 < b.K; k0 += kcb) {
        const int64_t kc = b.K - k0 < kcb ? b.K - k0 : kcb;
        if (rows) {
            kt.dequant(b, n, k0, kc, rows, kc);
            kt.pack_b(WeightMat{rows, DType::kF32, false, kc, kc}, n, 0, kc, pack);
        } else {
            kt.pack_b(b, n, k0, kc, pack);
        }
        const int64_t k1 = k0 + kc;
        NextBlock next(b, n, k1, b.K - k1 < kcb ? b.K - k1 : kcb, calls);
        for_tiles(kt, m, n, [&](int64_t r, int mr, int64_t p, int nr) {
            next.step();
            kt.micro(a + r, mr, k0, pack + (p / kNr) * kc * kNr, kc, c + r * ldc + p, ldc, nr, k0 > 0);
        });
    }
}

// Transposed B at medium m: the microkernel reads B in place (16 contiguous columns per k row), so nothing is packed.
// k blocks outermost: a block is kc whole rows of B's storage (contiguous when n spans them), prefetched into L2 one
// block ahead as in gemm_packed.
void gemm_direct(const KernelTable& kt, const float* const* a, int64_t m, const WeightMat& b, int64_t n, int64_t kcb,
                 float* c, int64_t ldc) {
    const int64_t calls = ((m + kt.mr - 1) / kt.mr) * ((n + kt.nr - 1) / kt.nr);
    NextBlock first(b, n, 0, b.K < kcb ? b.K : kcb, 1);
    first.step();
    for (int64_t k0 = 0; k0 < b.K; k0 += kcb) {
        const int64_t kc = b.K - k0 < kcb ? b.K - k0 : kcb, k1 = k0 + kc;
        NextBlock next(b, n, k1, b.K - k1 < kcb ? b.K - k1 : kcb, calls);
        for (int64_t r = 0; r < m; r += kt.mr) {
            const int mr = int(m - r < kt.mr ? m - r : kt.mr);
            for (int64_t p = 0; p < n; p += kt.nr) {
                const int nr = int(n - p < kt.nr ? n - p : kt.nr);
                next.step();
                kt.micro_direct(a + r, mr, k0, b.from_row(p), kc, c + r * ldc + p, ldc, nr, k0 > 0);
            }
        }
    }
}

// bf16 B against A rows that are all bf16 values (a16: m rows of lda), through the table's vdpbf16ps tile:
// gemm_packed's loop order with B blocks packed as k pairs (half the bytes of f32 panels). n <= nc; kcb even.
void gemm_bf16(const KernelTable& kt, const uint16_t* a16, int64_t lda, int64_t m, const WeightMat& b, int64_t n,
               int64_t kcb, float* c, int64_t ldc) {
    const int64_t panels = (n + kt.nr - 1) / kt.nr * (kt.nr / kNr);
    auto* pack = reinterpret_cast<uint32_t*>(thread_scratch(0, (kcb + 1) / 2 * panels * kNr));
    const int64_t calls = ((m + kt.mr - 1) / kt.mr) * ((n + kt.nr - 1) / kt.nr);
    for (int64_t k0 = 0; k0 < b.K; k0 += kcb) {
        const int64_t kc = b.K - k0 < kcb ? b.K - k0 : kcb, kp = (kc + 1) / 2, k1 = k0 + kc;
        kt.pack_b_bf16(b, n, k0, kc, pack);
        NextBlock next(b, n, k1, b.K - k1 < kcb ? b.K - k1 : kcb, calls);
        for_tiles(kt, m, n, [&](int64_t r, int mr, int64_t p, int nr) {
            next.step();
            kt.micro_bf16(a16 + r * lda, lda, mr, k0, pack + (p / kNr) * kp * kNr, kc, c + r * ldc + p, ldc, nr,
                          k0 > 0);
        });
    }
}

constexpr int kTileRows = 12;  // the most rows of a tile (the AVX-512 tiles' mr)

// Few rows (m <= kt.bf16_in_place_max_rows) on the vdpbf16ps tile the other way round: B's rows are its broadcast
// operand, read in place, and the m bf16 rows of A its panels, packed once per call; nothing of B is packed. Each kt.mr
// x 32 block of Cᵀ is stored transposed into C. The tile sums the same pair products in the same k order from zero as
// gemm_bf16 (vdpbf16ps multiplies its two operands' pairs alike), so every element keeps gemm_bf16's bits.
void gemm_bf16_in_place(const KernelTable& kt, const uint16_t* a16, int64_t lda, int64_t m, const WeightMat& b,
                        int64_t n, float* c, int64_t ldc) {
    const int64_t K = b.K, kp = K / 2;  // K even: a pair never reads past a row of B
    auto* panels = reinterpret_cast<uint32_t*>(thread_scratch(0, (m + 15) / 16 * kp * kNr));
    kt.pack_b_bf16(WeightMat{a16, DType::kBF16, false, lda, K}, m, 0, K, panels);
    const auto* w = static_cast<const uint16_t*>(b.data);
    alignas(64) float blk[kTileRows * 2 * kNr];
    for (int64_t n0 = 0; n0 < n; n0 += kt.mr) {
        const int wrows = int(std::min<int64_t>(n - n0, kt.mr));
        for (int64_t a0 = 0; a0 < m; a0 += 2 * kNr) {
            const int arows = int(std::min<int64_t>(m - a0, 2 * kNr));
            kt.micro_bf16(w + n0 * b.ld, b.ld, wrows, 0, panels + (a0 / kNr) * kp * kNr, K, blk, 2 * kNr, arows, false);
            for (int r = 0; r < arows; ++r)
                for (int i = 0; i < wrows; ++i) c[(a0 + r) * ldc + n0 + i] = blk[i * 2 * kNr + r];
        }
    }
}

// bf16 x bf16 on the vdpbf16ps tile, A's rows converted once (prepare_bf16_rows, RowsFor::kBf16Tile), B in blocks of
// the packed path's width, or read in place for few rows.
void gemm_bf16_tile(const KernelTable& kt, const uint16_t* a16, int64_t lda, int64_t m, const WeightMat& b, int64_t n,
                    float* c, int64_t ldc) {
    if (m <= kt.bf16_in_place_max_rows && !b.transposed && b.K % 2 == 0 && kt.mr <= kTileRows)
        return gemm_bf16_in_place(kt, a16, lda, m, b, n, c, ldc);
    const PackBlock blk = pack_block(b.transposed, kt.mr);
    for (int64_t n0 = 0; n0 < n; n0 += blk.nc)
        gemm_bf16(kt, a16, lda, m, b.from_row(n0), n - n0 < blk.nc ? n - n0 : blk.nc, blk.kc, c + n0, ldc);
}

// Quantized B at small m: decoded in registers by the table's stream_fused, else (tables without one, shapes it does
// not take) blocks of whole rows dequantized into an f32 buffer that stays in L2, then streamed by the f32 kernel.
// Either way each output's order is fixed by (K, scale block, layout), whatever the rows or the block.
void stream_quantized(const KernelTable& kt, const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c,
                      int64_t ldc) {
    if (kt.stream_fused && kt.stream_fused(a, m, b, n, c, ldc)) return;
    int64_t rows = kDequantBlockBytes / (b.K * 4);
    rows = rows > 8 ? rows / 8 * 8 : 8;  // whole tiles of the dot kernel's 8 rows (fewer leave 1-row tiles)
    rows = rows < n ? rows : n;
    float* buf = thread_scratch(4, rows * b.K);
    for (int64_t j = 0; j < n; j += rows) {
        const int64_t nb = n - j < rows ? n - j : rows;
        kt.dequant(b.from_row(j), nb, 0, b.K, buf, b.K);
        kt.stream(a, m, WeightMat{buf, DType::kF32, false, b.K, b.K}, nb, c + j, ldc);
    }
}

// AMX rows of A held for m rows: whole 16-row tiles, and 16 more, so that a row block of a group starting off a
// multiple of 16 still reads its last tile inside the buffer (gemm.h Bf16Rows).
int64_t amx_padded_rows(int64_t m) { return (m + 15) / 16 * 16 + 16; }

}  // namespace

GemmPath gemm_path(const KernelTable& kt, int64_t m, const WeightMat& b, bool gemv) {
    const GemmPath path = choose_path(m, b.transposed);
    int64_t from_rows;
    if (b.quantized()) {
        if (kt.gemm_quant == nullptr || promotion_block(b, 0) == 0) return path;
        from_rows = kt.gemm_quant_from_rows;
    } else if (kt.gemm_bf16 == nullptr || b.dtype != DType::kBF16) {
        const bool tile = kt.micro_bf16 != nullptr && kt.tile_bf16_from_rows > 0 && b.dtype == DType::kBF16 &&
                          !b.transposed && !gemv && m >= kt.tile_bf16_from_rows;
        return path == GemmPath::kStream && tile ? GemmPath::kPacked : path;
    } else {
        from_rows = kt.gemm_bf16_from_rows;
    }
    if (path == GemmPath::kStream) return !gemv && m >= from_rows ? GemmPath::kAmx : path;
    return GemmPath::kAmx;
}

bool rows_for(const KernelTable& kt, GemmPath path, int64_t m, const WeightMat& b, RowsFor& use) {
    if (path == GemmPath::kAmx) {  // packed rows: the AMX weight tiles' operand (the amx table's, gemm_bf16)
        use = b.transposed || kt.gemm_bf16 == nullptr ? RowsFor::kTiles : RowsFor::kPackedTiles;
        return true;
    }
    if (path != GemmPath::kStream && kt.micro_bf16 != nullptr && b.dtype == DType::kBF16 && !b.quantized()) {
        use = RowsFor::kBf16Tile;
        return true;
    }
    use = RowsFor::kStream;
    return path == GemmPath::kStream && m <= kt.stream_quant_rows && b.quantized() && kt.stream_quant != nullptr;
}

// The AMX tiles read whole 16-row tiles past m (amx_padded_rows); the streaming kernel and the vdpbf16ps tile m rows.
int64_t prepared_rows(int64_t m, RowsFor use) {
    return use == RowsFor::kStream || use == RowsFor::kBf16Tile ? m : amx_padded_rows(m);
}

int64_t bf16_rows_floats(int64_t m, int64_t K, RowsFor use, int64_t groups) {
    const int64_t rows = prepared_rows(m, use), K32 = (K + 31) / 32 * 32;
    const bool pack = use == RowsFor::kPackedTiles;
    return (rows * amx_lda(K) / 2 + 15) / 16 * 16 + (pack ? rows * K32 / 2 : 0) + (groups * rows + 15) / 16 * 16;
}

bool prepare_bf16_rows(const KernelTable& kt, const float* const* a, int64_t m, int64_t K, RowsFor use, float* buf,
                       Bf16Rows& out, const float* const* scales, int64_t group) {
    const bool pack = use == RowsFor::kPackedTiles;
    if (kt.rows_bf16 == nullptr || (scales != nullptr && (kt.rows_codes == nullptr || use == RowsFor::kBf16Tile)) ||
        (pack && kt.pack_b_bf16 == nullptr))
        return false;
    const int64_t lda = amx_lda(K), rows = prepared_rows(m, use), K32 = (K + 31) / 32 * 32;
    const int64_t packed_at = (rows * lda / 2 + 15) / 16 * 16, scales_at = packed_at + (pack ? rows * K32 / 2 : 0);
    auto* a16 = reinterpret_cast<uint16_t*>(buf);
    out = Bf16Rows{a16, lda, nullptr, {}};
    if (scales != nullptr) {  // rounded activations: codes, and the scales as [group][row] (zero past m)
        const int64_t groups = (K + group - 1) / group;
        float* st = buf + scales_at;
        std::fill(st, st + groups * rows, 0.0f);
        if (!kt.rows_codes(a, scales, m, K, group, a16, lda, st, rows)) return false;
        out.scales = RowScales{st, rows, group};
    } else if (!kt.rows_bf16(a, m, K, a16, lda)) {
        return false;
    }
    std::memset(a16 + m * lda, 0, size_t((rows - m) * lda) * 2);
    if (pack && m <= kAmxWeightTileMaxRows) {  // the weight tiles' operand (gemm_amx.cpp): 16-row groups of k pairs
        auto* packed = reinterpret_cast<uint32_t*>(buf + packed_at);
        kt.pack_b_bf16(WeightMat{a16, DType::kBF16, false, lda, K32}, (m + 15) / 16 * 16, 0, K32, packed);
        out.packed = packed;
    }
    return true;
}

void gemm_rows(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc, bool gemv,
               const Bf16Rows* prepared) {
    gemm_rows(kernels(), a, m, b, n, c, ldc, gemv, prepared);
}

void gemm_rows(const KernelTable& kt, const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c,
               int64_t ldc, bool gemv, const Bf16Rows* prepared) {
    const GemmPath path = gemm_path(kt, m, b, gemv);
    RowsFor use;
    if (rows_for(kt, path, m, b, use)) {
        // bf16-valued or coded rows: prepared by the caller, or here (slot 6, bf16 values only)
        if (use == RowsFor::kPackedTiles) use = RowsFor::kTiles;
        Bf16Rows own;
        const Bf16Rows* r = prepared != nullptr && prepared->a16 != nullptr ? prepared : nullptr;
        if (r == nullptr &&
            prepare_bf16_rows(kt, a, m, b.K, use, thread_scratch(6, bf16_rows_floats(m, b.K, use)), own))
            r = &own;
        if (r != nullptr && use == RowsFor::kBf16Tile && r->scales.s == nullptr)
            return gemm_bf16_tile(kt, r->a16, r->lda, m, b, n, c, ldc);
        if (r != nullptr && path == GemmPath::kStream && kt.stream_quant(r->a16, r->lda, m, r->scales, b, n, c, ldc))
            return;
        if (r != nullptr && path == GemmPath::kAmx && b.quantized() && promotion_block(b, r->scales.group) > 0)
            return kt.gemm_quant(r->a16, r->lda, m, r->scales, b, n, c, ldc, r->packed);
        if (r != nullptr && path == GemmPath::kAmx && !b.quantized() && r->scales.s == nullptr)
            return kt.gemm_bf16(r->a16, r->lda, m, b, n, c, ldc, b.transposed ? nullptr : r->packed);
    }
    const auto stream = [&] {
        return b.quantized() ? stream_quantized(kt, a, m, b, n, c, ldc) : kt.stream(a, m, b, n, c, ldc);
    };
    if (path == GemmPath::kStream) return stream();
    const PackBlock blk = pack_block(b.transposed, kt.mr);
    // Rows that are not all bf16 values: the f32 kernels, the streaming one where config.h would have chosen it.
    const GemmPath f32_path = choose_path(m, b.transposed);
    if (f32_path == GemmPath::kStream) return stream();
    if (f32_path == GemmPath::kDirect) return gemm_direct(kt, a, m, b, n, blk.kc, c, ldc);
    for (int64_t n0 = 0; n0 < n; n0 += blk.nc)
        gemm_packed(kt, a, m, b.from_row(n0), n - n0 < blk.nc ? n - n0 : blk.nc, blk.kc, c + n0, ldc);
}

const char* gemm_kernels() { return kernels().name; }

void dense_gemm(const float* A, const void* B, DType b_dtype, float* C, int64_t M, int64_t N, int64_t K,
                int num_threads) {
    if (M <= 0 || N <= 0) return;
    if (K <= 0) {
        for (int64_t i = 0; i < M * N; ++i) C[i] = 0.0f;
        return;
    }
    const WeightMat b{B, b_dtype, false, K, K};
    std::vector<const float*> rows(static_cast<size_t>(M));
    for (int64_t r = 0; r < M; ++r) rows[size_t(r)] = A + r * K;
    // Tasks as in the experts path: balanced row blocks of <= kMc (one path for all), columns in B-block widths.
    const GemmPath path = gemm_path(kernels(), M, b);
    const bool stream = path == GemmPath::kStream;
    const int64_t tm = stream ? 1 : (M + kMc - 1) / kMc;
    // AMX: kAmxTaskCols-wide tasks while they still give every thread one (2048³ at 16 threads: 8 tasks of 512
    // columns ran at 0.7x of 32 tasks of 128), else the B block's width.
    const int threads = resolve_threads(num_threads);
    const bool wide = path == GemmPath::kAmx && tm * ((N + kAmxTaskCols - 1) / kAmxTaskCols) >= threads;
    const int64_t nb = stream ? 64 : wide ? kAmxTaskCols : pack_block(false).nc;
    const int64_t tn = (N + nb - 1) / nb;
    // AMX and the vdpbf16ps tile: each row block converted once for all its column tasks (as the experts path prepares
    // each expert's rows), in chunks of 64 rows so that every thread converts.
    std::vector<Bf16Rows> prepared;
    thread_local FloatBuffer buf;
    RowsFor use = RowsFor::kStream;
    if (path == GemmPath::kAmx || (rows_for(kernels(), path, M, b, use) && use == RowsFor::kBf16Tile)) {
        const int64_t lda = amx_lda(K), block_floats = amx_padded_rows(kMc) * lda / 2, chunk = 64;
        auto* a16 = reinterpret_cast<uint16_t*>(buf.get(tm * block_floats));
        const int64_t chunks = (M + chunk - 1) / chunk;
        std::atomic<bool> bf16_values{true};
        parallel_for(chunks, threads, [&](int64_t j) {
            const int64_t c0 = j * chunk, c1 = std::min(M, c0 + chunk);
            for (int64_t i = c0 * tm / M; i < tm; ++i) {  // the row blocks [r0, r1) this chunk overlaps
                const int64_t r0 = M * i / tm, r1 = M * (i + 1) / tm;
                if (r0 >= c1) break;
                if (r1 <= c0) continue;
                const int64_t s0 = std::max(c0, r0), s1 = std::min(c1, r1);
                uint16_t* dst = a16 + i * block_floats * 2 + (s0 - r0) * lda;
                if (!kernels().rows_bf16(rows.data() + s0, s1 - s0, K, dst, lda)) bf16_values = false;
                if (s1 == r1)
                    std::memset(dst + (s1 - s0) * lda, 0, size_t((amx_padded_rows(r1 - r0) - (r1 - r0)) * lda) * 2);
            }
        });
        if (bf16_values)
            for (int64_t i = 0; i < tm; ++i) prepared.push_back(Bf16Rows{a16 + i * block_floats * 2, lda, nullptr});
    }
    parallel_for(tm * tn, threads, [&](int64_t task) {
        const int64_t i = task / tn, r0 = M * i / tm, r1 = M * (i + 1) / tm;
        const int64_t n0 = (task % tn) * nb, n = N - n0 < nb ? N - n0 : nb;
        gemm_rows(rows.data() + r0, r1 - r0, b.from_row(n0), n, C + r0 * N + n0, N, false,
                  prepared.empty() ? nullptr : &prepared[size_t(i)]);
    });
}

}  // namespace moex::cpu
