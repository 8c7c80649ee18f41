// The experts problem unpacked for the CPU kernels: sizes, raw pointers, and one expert's projection as the B
// operand of C = A·Bᵀ (WeightMat), whatever its storage layout.
#pragma once

#include <cstdint>

#include "moex/experts.h"

namespace moex::cpu {

// The scales of a quantized WeightMat (rows layout only): element (n, k) = code(n, k) * s(n, k) * global, with
// s(n, k) = scale[((row0 + n) / bn) * ld + k / bk] in scale_dtype (f32 | ue8m0 | e4m3). Per-tensor: bn = bk = huge.
struct WeightQuant {
    QuantFormat format = QuantFormat::kNone;  // kFp8: one e4m3 byte per element; FP4: two e2m1 codes per byte
    const void* scale = nullptr;
    DType scale_dtype = DType::kF32;
    int64_t ld = 0, bn = 1, bk = 1;
    int64_t row0 = 0;  // logical row of the matrix's first row within the expert (from_row)
    float global = 1.0f;
};

// B of C = A·Bᵀ, logically (N, K). Stored as rows (N, K) with K contiguous (nn.Linear, "dot form") or transposed
// (K, N) with N contiguous ("axpy form"). Elements are bf16, f16 or f32 and are widened to f32 by the kernels, or
// quantized (rows layout; `q`), dequantized into f32 panels by the kernel table's `dequant`.
struct WeightMat {
    const void* data = nullptr;  // element (n, k): rows: data[n*ld + k]; transposed: data[k*ld + n]; FP4: byte k/2
    DType dtype = DType::kF32;
    bool transposed = false;
    int64_t ld = 0;  // storage row length in elements of dtype: K (rows) or N (transposed); FP4: K / 2 bytes
    int64_t K = 0;
    WeightQuant q;

    bool quantized() const { return q.format != QuantFormat::kNone; }
    // The same matrix starting at logical row n0 (a column offset when transposed).
    WeightMat from_row(int64_t n0) const {
        WeightMat w = *this;
        const int64_t off = transposed ? n0 : n0 * ld;
        w.data = static_cast<const char*>(data) + off * dtype_size(dtype);
        w.q.row0 += n0;
        return w;
    }
};

// Per-row scales of A's rows along k, for a GEMM on their codes (the AMX GEMM of quantized weights: kernels.h):
// row r's values in k group g (k in [g * group, (g + 1) * group)) are code * s[g * ld + r]. s null: no scales.
struct RowScales {
    const float* s = nullptr;
    int64_t ld = 0, group = 0;
};

// How gate_up's output columns map to (gate, up) pairs; see gate.h.
enum class GateLayout : uint8_t { kConcatenated, kInterleaved, kUngated };

// The gate as the kernels see it: h = round(f(g, u)) per element; see gate.h.
struct GateOp {
    bool gated = true;
    GateKind kind = GateKind::kDefault;
    Activation act = Activation::kSilu;
    float alpha = 1.702f, limit = 7.0f;
    DType round = DType::kF32;  // the activation dtype h is rounded to
};

struct CpuProblem {
    int64_t T = 0, H = 0, I = 0, E = 0, k = 0;
    int64_t up_width = 0;  // 2I gated, I ungated
    DType dtype = DType::kF32;
    GateLayout layout = GateLayout::kConcatenated;
    Activation act = Activation::kSilu;
    GateKind gate = GateKind::kDefault;
    float alpha = 1.702f, limit = 7.0f;
    const void* x = nullptr;                             // (T, H)
    TensorView ids, weights;                             // (T, k)
    const void* up_bias = nullptr;                       // (E, up_width) or null
    const void* down_bias = nullptr;                     // (E, H) or null
    ActivationQuant act_quant = ActivationQuant::kNone;  // of quantized problems: how GEMM inputs are rounded
    const ExpertsProblem* p = nullptr;

    GateOp gate_op() const { return {layout != GateLayout::kUngated, gate, act, alpha, limit, dtype}; }

    WeightMat up(int64_t e) const;    // (up_width, H)
    WeightMat down(int64_t e) const;  // (H, I)
    // Expert e's static activation scale of the up (down) projection; kStatic only.
    float up_activation_scale(int64_t e) const;
    float down_activation_scale(int64_t e) const;
    float route_weight(int64_t t, int64_t j) const;  // top_k_weights[t, j] as f32
};

CpuProblem unpack_problem(const ExpertsProblem& p);

// 0 = all hardware threads.
int resolve_threads(int num_threads);

// Reads n elements of dtype `dt` (bf16 | f16 | f32) at src as f32.
void to_f32(const void* src, DType dt, int64_t n, float* dst);
// Rounds v to the nearest value of dtype `dt` (bf16 | f16; f32 is unchanged), round-to-nearest-even.
float round_to(float v, DType dt);

}  // namespace moex::cpu
