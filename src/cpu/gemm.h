// The GEMM driver shared by the experts algorithms and the benchmark: C = A·Bᵀ with A rows given by pointers
// (the token gather is free) and B one expert's weights in place (bf16/f16/f32, rows or transposed).
#pragma once

#include <cstdint>

#include "moex/dtype.h"
#include "src/cpu/config.h"
#include "src/cpu/problem.h"

namespace moex::cpu {

struct KernelTable;

// The path gemm_rows takes on table kt: config.h choose_path (m and the layout), except that bf16 x bf16 tasks of
// kt.gemm_bf16_from_rows rows or more, and quantized tasks of kt.gemm_quant_from_rows rows or more whose scale blocks
// fit the tiles (kernels.h promotion_block), take the table's AMX GEMMs (kAmx) where it has them. gemv: stay on
// the streaming kernel up to stream_max_rows (batched_mm, whose every output is its pair's lone GEMV).
GemmPath gemm_path(const KernelTable& kt, int64_t m, const WeightMat& b, bool gemv = false);

// A task's rows as the bf16 kernels read them (the AMX GEMMs, the FP8 decode GEMV stream_quant), prepared once for
// every call that shares them (an expert's rows: each column block of its up and down projections) instead of once
// per call: bf16 rows lda apart (for the tiles readable up to 16 rows past the next multiple of 16: rows past m are
// computed, never stored), and for the weight tiles the same rows packed as their B operand (null: the call packs
// them). Rounded activations (act_quant.h) are held as their e4m3 codes and per-(row, group) scales (for quantized
// weights only: the bf16 GEMM takes no scales). a16 null: not prepared.
struct Bf16Rows {
    const uint16_t* a16 = nullptr;
    int64_t lda = 0;
    const uint32_t* packed = nullptr;
    RowScales scales;
};
// What rows are prepared for: the streaming kernel (m rows), the AMX tiles (padded rows), the weight tiles too, the
// vdpbf16ps tile (m rows).
enum class RowsFor : uint8_t { kStream, kTiles, kPackedTiles, kBf16Tile };
// The preparation a task of m rows on `path` on kt takes for weights b: the tiles on the AMX path (packed for
// rows-layout weights), the streaming row of one row against quantized weights where kt has stream_quant, bf16 rows
// for the vdpbf16ps tile (bf16 weights off the streaming path, where kt has the tile); false: none.
bool rows_for(const KernelTable& kt, GemmPath path, int64_t m, const WeightMat& b, RowsFor& use);
// Floats of 64-byte aligned scratch prepare_bf16_rows needs for m rows of K (groups: scale groups per row of rounded
// activations, 0 for none).
int64_t bf16_rows_floats(int64_t m, int64_t K, RowsFor use, int64_t groups = 0);
// Prepares m rows of K for kt's bf16 kernels in buf (packed for the weight tiles when m is within their rows): bf16
// values, or with `scales` (row r's scales of `group` k values each: act_quant.h ActScales) codes and scales. False
// where kt has no such kernels or some value is neither (the calls then take the f32 kernels).
bool prepare_bf16_rows(const KernelTable& kt, const float* const* a, int64_t m, int64_t K, RowsFor use, float* buf,
                       Bf16Rows& out, const float* const* scales = nullptr, int64_t group = 0);

// C[r*ldc + c] = Σ_k a[r][k]·B(c, k) for r < m, c < n, K = b.K. Single-threaded (a task of the caller).
// The path (gemm_path) depends on m, the weights' dtype and layout, and whether the rows hold bf16 values only:
// streaming kernel, direct or packed microkernel, or AMX tiles.
// prepared: a's rows from prepare_bf16_rows, used where the call takes the AMX path, stream_quant or the vdpbf16ps
// tile.
void gemm_rows(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc,
               bool gemv = false, const Bf16Rows* prepared = nullptr);
// The same on a given kernel table (kernels.h) instead of this CPU's best: the tests compare the tables on one machine.
void gemm_rows(const KernelTable& kt, const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c,
               int64_t ldc, bool gemv = false, const Bf16Rows* prepared = nullptr);

// The kernel table every GEMM here runs (kernels.h): "scalar", "avx2", "avx512", "avx512_bf16" or "amx".
const char* gemm_kernels();

// Dense C (M, N) = A (M, K) row-major · Bᵀ, B (N, K) row-major in b_dtype (f32 | bf16 | f16), on num_threads
// threads (0 = all). The machine's GEMM rate with the same kernels as the experts path.
void dense_gemm(const float* A, const void* B, DType b_dtype, float* C, int64_t M, int64_t N, int64_t K,
                int num_threads);

}  // namespace moex::cpu
