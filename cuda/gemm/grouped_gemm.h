// The grouped GEMM contract between the experts pipeline (cuda/experts/) and the GEMM kernels (cuda/gemm/).
// Layout: rows of A are grouped by expert, each group either starting at a multiple of kRowAlign ("padded
// contiguous": every M tile is one expert's, its padding rows zero) or right after the previous one ("packed": an M
// tile starts at its own row, m_tile_row0, and its rows past the expert's end belong to the next expert; they are
// computed with this expert's weights and never stored).
#pragma once

#include <cstdint>

#include "cuda/common/params.h"
#include "moex/dtype.h"

namespace moex::cuda {

inline constexpr int kRowAlign = 128;  // every expert's row block starts at a multiple of this (one M tile)

enum class Epilogue : int32_t {
    kStore = 0,  // D = A·Bᵀ + bias
    kGate = 1,   // D[:, c] = gate(acc + bias) over column pairs: N outputs of A·Bᵀ -> N/2 columns of D
    // kGate rounded to the dtype, then quantized as the FP8 down projection takes it: D holds e4m3 bytes and
    // d_scales one dynamic scale (amax / 448) per row and 128 columns (what launch_act_quant writes from kGate's
    // output, bit for bit). The sm_90a FP8 kernel only, with N / 2 a multiple of 128.
    kGateE4m3 = 2,
    // kGate, and before the gate every accumulator column's pre-activation (acc + bias, rounded to the dtype) into
    // `save` (P, N) row-major in B's column order: the gate/up projection a training forward keeps for its backward
    // (ExpertsSaved). The sm_90a 16-bit kernel only.
    kGateSave = 3,
};
inline bool is_gate(Epilogue e) { return e == Epilogue::kGate || e == Epilogue::kGateE4m3 || e == Epilogue::kGateSave; }

// D[r, :] = epilogue(A[r, :] · B_e[:, :]ᵀ + bias_e) * (row_scale ? row_scale[r] : 1) for every row r of expert e.
// All routing arrays live in device memory and are written by the routing kernels, so the launch needs no host sync
// and can be captured in a CUDA graph. Element offsets are 64-bit (row * K can pass 2^31).
struct GroupedGemmArgs {
    const void* A;                    // (P, K) row-major, dtype; padding rows are zero
    const void* B;                    // (E, N, K) K-major; b_n_major: (E, K, N); b_dtype
    void* D;                          // (P, N_out) row-major; N_out = N/2 for kGate, else N; d_f32: float32 else dtype
    const void* bias;                 // (E, N) dtype, or nullptr
    const float* row_scale;           // (P,) or nullptr: multiplies each output row (the routing weight)
    const int32_t* m_tile_expert;     // (max_m_tiles,) expert of each 128-row M tile, tiles in order
    const int32_t* num_m_tiles;       // (1,) how many entries of m_tile_expert are used
    const int32_t* expert_row_start;  // (E + 1,) row start of each expert's block (padded: a multiple of kRowAlign)
    const int32_t* expert_row_count;  // (E,) real rows of each expert (rows past it up to the next block: padding)
    int64_t P, N, K, E;
    int64_t max_m_tiles;  // host upper bound: P / kRowAlign (packed: ceil(S / kRowAlign) + min(E, S))
    DType dtype;          // A, bias and (unless d_f32) D
    bool b_n_major;       // B stored (E, K, N) (the "is_transposed" weight layout)
    bool d_f32;
    Epilogue epilogue;
    GateParams gate;  // kGate: the gate, and the column order of B's rows ([gate | up] or interleaved)
    // B as stored: b_dtype == dtype (b_scales.format kNone), or quantized K-major codes with their scales. 16-bit
    // kernels take the codes exactly and promote the scales onto the f32 partial sums of each K slice (quant.cuh);
    // A then holds e4m3 codes too when a_scales is set: (P, K / slice) f32 scales of each row's slices.
    DType b_dtype;
    WeightScales b_scales;
    const float* a_scales;
    bool a_fp8;  // A holds (P, K) e4m3 bytes (with a_scales): only the sm_90a FP8 kernel takes it
    // (E,) or nullptr: multiplies expert e's f32 accumulators before the bias (sm_90a kernel only).
    const float* expert_scale = nullptr;
    float* d_scales = nullptr;  // kGateE4m3: (P, N / 2 / 128) f32 scales of D's e4m3 codes
    // Packed layout: (max_m_tiles,) first row of each M tile (nullptr: padded, tile m starts at m · kRowAlign). Rows
    // of a tile at or past its expert's end are not written (D, d_scales), except after the last expert's end
    // (expert_row_start[E]), where the last tile's rows below P are; A rows past P read as zeros. A's kRowAlign - 1
    // rows from expert_row_start[E] (below P) must be written like padding rows (the gather clears them).
    const int32_t* m_tile_row0 = nullptr;
    void* save = nullptr;  // kGateSave: (P, N) dtype, the rows' pre-activations (written where D's rows are)
    // (E + 1,) first M tile of each expert, [E] = M tiles, or nullptr: the sm_90a kernel's raster groups start at
    // expert boundaries (sm90_scheduler.cuh); without it they start every group_m M tiles.
    const int32_t* expert_tile_start = nullptr;
};

// MOEX_GEMM=portable: the portable kernel for everything it can run (the GPU check runs every test through both).
bool gemm_forced_portable();
// Picks the kernel: the sm_90a WGMMA kernel for bf16/f16 when K and N meet its alignment, else the portable one.
void launch_grouped_gemm(const GroupedGemmArgs& args, void* stream);
// Whether the sm_90a FP8 kernel (e4m3 A and B, promotion per 128-deep K block) runs these arguments with A as e4m3
// bytes (args.a_fp8 is ignored): the pipelines ask before they quantize A into bytes or into codes of the dtype.
bool grouped_gemm_takes_fp8(const GroupedGemmArgs& args);
// The Hopper kernel alone (bf16/f16; K % 8 == 0, N % 8 == 0); returns false when the shape is not supported.
bool launch_grouped_gemm_sm90(const GroupedGemmArgs& args, void* stream);
// Why the sm_90a kernel cannot run these arguments on the current device (nullptr: it can), whatever MOEX_GEMM says.
const char* sm90_refusal(const GroupedGemmArgs& args);
// The portable kernel (any dtype, any K/N; slower): correctness fallback and f32 path.
void launch_grouped_gemm_portable(const GroupedGemmArgs& args, void* stream);

}  // namespace moex::cuda
