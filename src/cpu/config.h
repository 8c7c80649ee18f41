// Tuning of the CPU path as pure functions of the shape: cache blocking of the packed GEMM, the row count where the
// streaming kernel hands over to it, task widths, and the token chunk that bounds the scratch memory.
#pragma once

#include <cstdint>

namespace moex::cpu {

// The three GEMM paths, chosen by the rows m of a task (tokens routed to one expert):
//  kStream: B streamed once from DRAM, widened in registers (stream_avx2.cpp): dot form on rows layouts (one 8-lane
//           accumulator per output), axpy form on transposed ones. Up to the ridge (~11 GB/s DRAM vs ~85 GFLOP/s per
//           core, bf16: m flop per byte) time is the weights' bytes, and packing them would only add work.
//  kDirect: transposed weights only: the 6x16 microkernel reads B in place (16 contiguous columns per k).
//  kPacked: B widened and packed into 16-wide panels, the 6x16 microkernel (~80% of the fma peak measured).
//  kAmx:    the table's whole-task GEMM on bf16 rows: AMX tiles (the amx table), or quantized B on the vdpbf16ps
//           tile (the avx512_bf16 table where vdpbf16ps runs at the FMA's rate; gemm.h gemm_path says when).
enum class GemmPath : uint8_t { kStream, kDirect, kPacked, kAmx };

// Rows layout: the streaming kernel measured ahead of the packed one up to 24 rows, behind from 32 (AVX2 and AVX-512
// f32 tiles). Tables with an AMX GEMM hand bf16 x bf16 tasks over sooner (gemm.h gemm_path).
inline int64_t stream_max_rows(bool transposed) { return transposed ? 4 : 24; }

inline GemmPath choose_path(int64_t m, bool transposed) {
    if (m <= stream_max_rows(transposed)) return GemmPath::kStream;
    if (transposed && m <= 48) return GemmPath::kDirect;
    return GemmPath::kPacked;
}

// batched_mm groups at most this many pairs of one expert: the streaming path, whose outputs are each computed
// exactly as a lone GEMV would (so 1 or 24 rows give the same bits), and which loads the weights once per group.
inline int64_t batched_group_rows(bool transposed) { return stream_max_rows(transposed); }

// Blocking of the packed path for a 32 KiB L1d / 512 KiB L2 core (Zen 3): the B block kc x nc f32 (128 KiB) stays
// in L2, each 6-row tile of A (6 x kc f32) in L1 while it meets all nc/16 panels. B is read in runs of kc (rows
// layout: 512 bytes of bf16) or nc elements (transposed: 1 KiB). The direct path uses kc only (k block of B rows).
// The AVX-512 12-row tile (tile_rows 12) takes kc = 512 in rows layout (a 256 KiB block for its 2 MiB L2): on the
// Xeon of bench/RESULTS.md M its one-thread rate went from 90-100 to 100-124 GFLOP/s (m 128-512, K 2048-4096).
struct PackBlock {
    int64_t nc, kc;
};
inline PackBlock pack_block(bool transposed, int tile_rows = 6) {
    if (transposed) return PackBlock{512, 64};
    return tile_rows >= 12 ? PackBlock{128, 512} : PackBlock{128, 256};
}
// The AMX-BF16 path (gemm_amx.cpp). Measured on the dev Xeon (AMX, one core; bench/RESULTS.md T1), dense tasks of
// 512 columns x K 2048, before -> after: m 1024 518 -> 880-920 GFLOP/s, m 256 711 -> 818.
// Packed tiles (the weights packed as TDPBF16PS's B operand): blocks of kAmxPackCols columns x as much of K as keeps
// the packed block within kAmxPackBytes (all of K up to 2048: no round trip of C through memory, and 4x fewer tile
// pipeline drains than 512-k blocks), the rows in blocks that keep their bf16 k block within kAmxRowBlockBytes, so
// the packed block and the row block stay in L2 (2 MiB) while the tiles run.
inline constexpr int64_t kAmxPackCols = 128, kAmxPackBytes = 512 << 10, kAmxRowBlockBytes = 256 << 10;
// Weight tiles (the weights' rows read in place as the A operand, A's rows packed instead; gemm_amx.cpp) up to this
// many rows: no packing of the weights, whose bytes the tile loads read once. Measured on the dev Xeon, 2 threads
// (T1): grouped_mm qwen3-30b-a3b T = 512 -38%, mixtral-8x7b T = 1024 (256 rows an expert) 662-683 -> 556-564 ms
// against packed tiles; at 512 rows (mixtral T = 2048) packed tiles win (1394-1519 against 1564-1618 ms), 384 beat
// 256 at T = 1024 (581-587 against 634-635 ms).
inline constexpr int64_t kAmxWeightTileMaxRows = 384;
// Weight tiles keep A's packed rows of one k block within this many bytes (L2), the partial Cᵀ through scratch.
inline constexpr int64_t kAmxWeightTileRowBytes = 1 << 20;
// Weight tiles prefetch the next 32 weight rows (T0, one line of each per k step) only when a row is shorter than this:
// longer rows are long sequential streams the core's prefetchers follow, and the software prefetch then cost time
// (bench/RESULTS.md V5-V6: mixtral-8x7b's 8 and 28 KiB rows, T = 64: 148-163 -> 122 ms on the dev Xeon at 2 threads,
// 29-31 -> 24-28 ms on the 16-core host), while qwen3-30b-a3b's 1.5 and 4 KiB rows keep it (T = 512: 5-10% slower
// without it on the host).
inline constexpr int64_t kAmxWeightTilePrefetchMaxRowBytes = 8192;
// From this many rows a bf16 x bf16 task runs on the AMX tiles rather than the streaming GEMV (the amx table's
// gemm_bf16_from_rows). With the packed tiles alone, 16 (one full A tile; bench/RESULTS.md C4: 8 or 4 rows lost to the
// GEMV, +21% at mixtral T = 32, the packing being the cost); since the weight tiles read the weights in place, 8:
// dev Xeon, 2 threads, alternated twice (RESULTS T3): mixtral-8x7b T = 64 168-171 -> 128-130 ms, T = 32 140-147 ->
// 122, qwen3-30b-a3b T = 256 76-88 -> 55, decode (T = 1, 8) unchanged; from 4 within the noise of 8, from 2 mixtral
// T = 8 +10%, from 1 every decode point +15-25%.
inline constexpr int64_t kAmxFromRows = 8;
// The same for the vdpbf16ps tile where vdpbf16ps runs at the FMA's rate (the avx512_bf16 table's
// tile_bf16_from_rows; elsewhere bf16 tasks stay on the GEMV up to stream_max_rows). Zen 4 EPYC, 2 threads, from 4 / 8
// / 16 / 25 (25: the GEMV up to 24 rows) alternated three times (bench/RESULTS.md AQ6), ms: mixtral-8x7b T = 64 (16
// rows an expert) 223-232 / 224-229 / 237-248 / 273-292, T = 32 (8) 174-181 / 146-154 / 150-151 / 147-154;
// qwen3-30b-a3b T = 256 (16) 119-121 / 120-123 / 112-115 / 122-128, T = 128 (8) 95-98 / 76-84 / 69-72 / 67-68. Since
// the tile reads few rows' weights in place (below), 12: Zen 5 EPYC, one thread, weights from DRAM, the tile's time
// over the GEMV's (moex_bf16_tile_micro ... stream, bench/RESULTS.md AR2): m = 8 1.11, 12 0.82-0.92, 16 0.69-0.72.
inline constexpr int64_t kBf16TileFromRows = 12;
// Up to this many rows the vdpbf16ps tile reads the weights in place and packs the task's rows instead (the avx512_bf16
// table's bf16_in_place_max_rows), so that no weight is packed. Zen 5 EPYC, one thread, weights from DRAM, time in
// place over packed (moex_bf16_tile_micro, bench/RESULTS.md AR2): K = 2048 x 1536 weights m = 16 / 32 / 64 / 96 /
// 128 rows 0.47 / 0.57 / 0.67 / 0.79 / 0.91; K = 4096 x 256: m = 64 0.74, 128 1.03, 256 1.02; K = 14336 x 128: m = 64
// 0.76, 96 1.03, 256 1.30 (the rows' panels no longer stay in L2).
inline constexpr int64_t kBf16InPlaceMaxRows = 64;
// Quantized tasks of this many rows leave the FP8 decode GEMV on vdpbf16ps for the vdpbf16ps tile's quantized GEMM
// (the avx512_bf16 table's gemm_quant_from_rows, where vdpbf16ps runs at the FMA's rate): 25, past the GEMV's 24 rows.
// Zen 4 EPYC, 2 threads, FP8 128 x 128, from 16 / 25 alternated three times (bench/RESULTS.md AQ8), ms: mixtral-8x7b
// T = 64 (16 rows an expert) 239-248 / 203-212, qwen3-30b-a3b T = 256 (16) 108-111 / 96-101, T = 128 (8) alike.
inline constexpr int64_t kBf16QuantFromRows = 25;
// The same for quantized weights (the amx table's gemm_quant_from_rows): below it the AVX-512 GEMV decodes the codes
// in registers (stream_fused; FP8 against one row, or up to 24 where vdpbf16ps runs at the FMA's rate: stream_quant).
// Dev Xeon, 2 threads (bench/RESULTS.md U2), ms from 8 / 16 / 25 rows (25: never below the GEMV's 24): FP8
// qwen3-30b-a3b T = 256 (16 rows an expert) 71 / 91 / 134, T = 128 (8) 67 / 72 / 83, mixtral-8x7b T = 32 (8) 144 / 153
// / 169; MXFP4 alike; from 4 rows qwen3 T = 64 and 96 lost 3-17% to 8.
inline constexpr int64_t kAmxQuantFromRows = 8;
// bf16 rows that AMX tiles load (A's rows, decoded weight panels): a multiple of 32 k (whole tiles) and an odd number
// of 64-byte lines apart, so the 16 rows of a tile load fall in 16 different L1 sets (a power-of-two stride, K = 2048
// or 4096, put them all in one 12-way set).
inline int64_t amx_lda(int64_t K) {
    const int64_t k32 = (K + 31) / 32 * 32;
    return (k32 / 32) % 2 == 0 ? k32 + 32 : k32;
}
// Columns of an AMX task: its rows are converted to bf16 once per task (gemm.cpp), so four of the 128-column blocks
// the tiles run share one conversion. With A rows an odd number of cache lines apart (amx_lda above), measured on
// a 16-core AMX Xeon (bench/RESULTS.md Q3): dense bf16 2048³ on one core 473 -> 852 GFLOP/s; grouped_mm mixtral
// T = 512 -12% (16 threads), T = 256 -12% (2 threads), T = 64 and qwen3 T = 64-256 within +-3%.
inline constexpr int64_t kAmxTaskCols = 512;

// Quantized weights on the streaming path that the table's stream_fused does not take (the scalar table, K not a
// multiple of 16) are dequantized in blocks of whole rows of about this many f32 bytes (a multiple of 8 rows, the dot
// kernel's widest tile, and at least 8), then streamed by the f32 kernel from L2.
inline constexpr int64_t kDequantBlockBytes = 64 << 10;

// kMc bounds a packed task's rows (its C tile, 1024 x 128 f32 = 512 KiB) and splits huge experts for balance.
inline constexpr int64_t kMc = 1024;

// Columns of I (up, gated: times 2 weight rows) or of H (down) per task. Rows layout, streaming (decode GEMV): the
// widest of 256, 128 and 64 that still gives every thread 4 tasks over the pass's groups (stream_task_cols): wide tasks
// read their weight rows as longer streams (qwen3-30b-a3b FP8 T = 1 and 8, 2 threads on the dev Xeon: 64 → 256
// columns, 1.16x; bf16 unchanged; bench/RESULTS.md X5), narrow ones keep 16 threads busy at T = 1. Each output's bits
// do not depend on its task's width. Transposed: a (K, N) column slice is read as strided runs, which this DRAM serves
// at ~7 GB/s whatever the thread count, so small-m tasks take full rows (contiguous bytes).
inline int64_t stream_task_cols(int64_t width, int64_t groups, int threads) {
    for (const int64_t cols : {int64_t(256), int64_t(128)})
        if (groups * ((width + cols - 1) / cols) >= 4 * int64_t(threads)) return cols;
    return 64;
}
inline int64_t up_task_cols(GemmPath path, bool transposed, int64_t I, int64_t stream_cols) {
    if (path == GemmPath::kAmx) return kAmxTaskCols;
    if (transposed) return path == GemmPath::kPacked ? 256 : I;
    return path == GemmPath::kStream ? stream_cols : 128;
}
inline int64_t down_task_cols(GemmPath path, bool transposed, int64_t H, int64_t stream_cols) {
    if (path == GemmPath::kAmx) return kAmxTaskCols;
    if (transposed) return path == GemmPath::kPacked ? 256 : H;
    return path == GemmPath::kStream ? stream_cols : 128;
}

// Tokens per pass: the pass keeps x, h (rows, I) and y (rows, H) in f32, up to 512 MiB (4096 tokens of
// Qwen3-30B-A3B in one pass: 96 KiB per token). The caller thread keeps this workspace between calls.
// extra: floats per token of further scratch (quantized activations: x rounded per token, H, or per routed row, k·H).
inline int64_t token_chunk(int64_t T, int64_t k, int64_t H, int64_t I, int64_t extra = 0) {
    const int64_t per_token = (k * (H + I) + H + extra) * 4;
    const int64_t chunk = (int64_t(512) << 20) / (per_token > 0 ? per_token : 1);
    return chunk < 1 ? 1 : chunk < T ? chunk : T;
}

}  // namespace moex::cpu
