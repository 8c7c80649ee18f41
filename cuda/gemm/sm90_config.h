// Configuration of the sm_90a grouped GEMM (grouped_gemm_sm90.cuh) and the pure host function that picks it.
// Host-only C++ (no device code), so host unit tests can include it without nvcc.
#pragma once

#include <cstdint>

#include "cuda/common/align.h"
#include "cuda/gemm/grouped_gemm.h"

namespace moex::cuda {

// Fixed by the kernel (template constants there; repeated here for tests and benchmarks).
inline constexpr int kSm90BlockM = 128;  // = kRowAlign: an M tile is one expert's 128-row block
inline constexpr int kSm90BlockN = 256;  // accumulator columns per CTA; kGate: 128 outputs (gate+up pairs)
inline constexpr int kSm90BlockK = 64;   // one 128-byte swizzled line of 16-bit values
inline constexpr int kSm90Stages = 4;    // 4 x 48 KB ring + 32 KB store staging = 224 KB of the 227 KB limit

struct Sm90GemmConfig {
    const char* why_not = nullptr;  // set: this kernel cannot run the problem (the reason, for logs and tests)
    int32_t cluster_m = 1;          // 2: CTA pairs on adjacent M tiles of one expert share B by TMA multicast
    int32_t group_m = 16;           // M tiles per rasterisation group (tiles run m-fastest inside a group); even
    int32_t max_ctas = 0;           // persistent CTAs; 0: one per SM (cluster 2: as many pairs as can be resident)
    bool expert_groups = false;     // raster groups start at expert boundaries (args.expert_tile_start, when given)
};

// Why the sm_90a kernel cannot run these arguments (nullptr: it can). The shape checks live here and only here.
inline const char* sm90_why_not(const GroupedGemmArgs& a) {
    const bool gate = is_gate(a.epilogue);
    if (a.epilogue == Epilogue::kGateE4m3) {
        if (!a.a_fp8) return "the gate epilogue into e4m3 codes is built for the FP8 kernel only";
        if ((a.N / 2) % 128 != 0) return "the gate epilogue into e4m3 codes needs N / 2 (I) a multiple of 128";
        if (!a.d_scales || !is_aligned(a.d_scales, 4)) return "the gate epilogue into e4m3 codes needs d_scales";
    }
    if (a.epilogue == Epilogue::kGateSave) {
        if (a.a_fp8 || a.b_scales.format != QuantFormat::kNone)
            return "the gate epilogue that keeps the pre-activation is built for the 16-bit kernel only";
        if (!a.save || !is_aligned16(a.save)) return "the gate epilogue that keeps the pre-activation needs save";
        if (a.expert_scale) return "the gate epilogue that keeps the pre-activation takes no expert scale";
    }
    if (a.dtype != DType::kBF16 && a.dtype != DType::kF16) return "sm90 kernel takes bf16/f16 inputs only";
    if (is_fp4(a.b_scales.format)) {  // e2m1 codes converted to bf16 in the kernel (sm90_fp4.cuh)
        const WeightScales& s = a.b_scales;
        const bool nv = a.b_scales.format == QuantFormat::kNvfp4;
        if (a.dtype != DType::kBF16) return "sm90 FP4 kernel takes bf16 activations only";
        if (a.a_fp8 || a.a_scales) return "sm90 FP4 kernel takes unquantized activations only";
        if (a.b_n_major) return "sm90 FP4 kernel takes K-major B only";
        if (!s.data || s.row_shift != 0 || s.col_shift != (nv ? 4 : 5) || s.dtype == DType::kF32 || s.cols_b < 1)
            return "sm90 FP4 kernel needs one scale byte per row and 32 (mxfp4) or 16 (nvfp4) codes";
        if (a.K % 32 != 0) return "sm90 FP4 kernel needs K a multiple of 32 (16-byte TMA row stride of e2m1)";
    } else if (a.b_scales.format != QuantFormat::kNone) {
        const WeightScales& s = a.b_scales;
        if (!a.a_fp8 || s.format != QuantFormat::kFp8 || !a.a_scales || !s.data)
            return "sm90 kernel takes quantized B only as FP8 with e4m3 A and scales of both";
        if (a.b_n_major) return "sm90 FP8 kernel takes K-major B only";
        if (s.row_shift < 7 || s.col_shift < 7) return "sm90 FP8 kernel needs weight blocks of at least 128 x 128";
        if (gate && a.gate.concatenated && (a.N / 2) % 128 != 0)
            return "sm90 FP8 kernel needs the gate and up halves on 128-row block boundaries (I % 128 == 0)";
        if (a.K % 16 != 0) return "K must be a multiple of 16 (16-byte TMA row stride of e4m3)";
    } else if (a.b_dtype != a.dtype || a.a_fp8) {
        return "sm90 kernel takes B in the dtype of A only";
    }
    if (a.K <= 0 || a.N <= 0 || a.E <= 0 || a.P < 0) return "empty or negative dimension";
    if (a.K % 8 != 0) return "K must be a multiple of 8 (16-byte TMA row stride)";
    if (a.N % 8 != 0) return "N must be a multiple of 8 (16-byte TMA row stride)";
    if (gate && a.N % 16 != 0) return "kGate needs N/2 a multiple of 8 (16-byte output row stride)";
    if (gate && a.d_f32) return "kGate writes the input dtype only";
    if (a.K > INT32_MAX || a.N > INT32_MAX / 4 || a.P > INT32_MAX || a.E > INT32_MAX || a.max_m_tiles < 0 ||
        a.max_m_tiles > INT32_MAX / 128 || a.max_m_tiles * ((a.N + 127) / 128) > INT32_MAX)
        return "dimension or tile count past 2^31";
    if (!a.A || !a.B || !a.D || !a.m_tile_expert || !a.num_m_tiles || !a.expert_row_start || !a.expert_row_count)
        return "missing pointer";
    if (!is_aligned16(a.A) || !is_aligned16(a.B) || !is_aligned16(a.D)) return "A, B, D must be 16-byte aligned";
    if (a.a_scales && !is_aligned(a.a_scales, 4)) return "a_scales must be 4-byte aligned";
    if ((a.bias && !is_aligned(a.bias, 4)) || (a.row_scale && !is_aligned(a.row_scale, 4)))
        return "bias and row_scale must be 4-byte aligned";
    return nullptr;
}

// Pure function of the problem and the SM count (why_not set: the kernel cannot run it). Cluster 2 only pays when
// adjacent M tiles usually share an expert: P / 128 tiles over E experts, >= 2 tiles per expert on average (e.g.
// mixtral, qwen3 at T >= 4096), or >= 64 rows per expert on average (deepseek-v3 at T = 4096). group_m: M tiles per
// rasterisation group (below).
inline Sm90GemmConfig choose_grouped_gemm_sm90_config(const GroupedGemmArgs& a, int sm_count) {
    Sm90GemmConfig c;
    c.why_not = sm90_why_not(a);
    if (c.why_not == nullptr && sm_count < 1) c.why_not = "no SM";
    if (c.why_not) return c;
    const int64_t tiles_per_expert = a.max_m_tiles / a.E;
    // Real rows are about P - E·(kRowAlign - 1) (P is the host bound S + E·127; packed: P = S). With >= 64 rows per
    // expert on average, random routing gives most experts a second, partly padded tile (deepseek-v3 T = 4096: 128 rows
    // on average, the pipeline ran 3.4 ms over its two GEMMs' uniform-routing time); a CTA pair on the two tiles of one
    // expert loads its B once through multicast instead of twice. FP4: cluster 1 (each CTA converts its own B).
    const int64_t mean_rows = (a.m_tile_row0 != nullptr ? a.P : a.P - a.E * (kRowAlign - 1)) / a.E;
    c.cluster_m = ((tiles_per_expert >= 2 || mean_rows >= 64) && sm_count >= 2 && !is_fp4(a.b_scales.format)) ? 2 : 1;
    // One M tile per expert (deepseek-v3 at T = 4096: 128 rows each): B is read once whatever the order, but
    // m-fastest groups of 16 re-read each A tile from HBM for every N tile (+50% bytes, measured 4.97 ms for the
    // up GEMM against a 3.5 ms weight stream). Groups of 2 keep a tile's A in L2 across its N tiles. With more tiles
    // per expert, groups of 6 against 16 on the H200 (bench/RESULTS.md AK3, AK6): deepseek-v3 T = 4096 / 16384 -4.8% /
    // -2.8%, mixtral-8x7b -7.0% / +0.9%, qwen1.5-moe-a2.7b -1.4% / -3.4%, qwen3-30b-a3b -1.1% / -0.6%.
    c.group_m = tiles_per_expert >= 2 ? 6 : 2;
    // Groups aligned to experts (sm90_scheduler.cuh) keep the tiles that read one B tile together; with up to 16 M
    // tiles an expert they were faster on one H100 (bench/RESULTS.md AN1: deepseek-v3 T = 4096 -21%, T = 16384 -3%,
    // qwen3-30b-a3b, qwen1.5-moe-a2.7b, mixtral-8x7b T = 4096 -2 to -4%, the rest within noise); mixtral-8x7b T = 16384
    // (33 tiles an expert) ran 3-4% slower with them.
    c.expert_groups = tiles_per_expert <= 16;
    c.max_ctas = 0;
    return c;
}

// Launches with an explicit configuration (tests and benchmarks force cluster_m / group_m through this);
// returns false when config.why_not is set, sm90_why_not(args) refuses the arguments or the device is not sm_90.
// Throws moex::Error(kCuda) on CUDA errors.
bool launch_grouped_gemm_sm90_with(const GroupedGemmArgs& args, const Sm90GemmConfig& config, void* stream);

}  // namespace moex::cuda
