// unpack_problem (ExpertsProblem -> CpuProblem), thread-count resolution and the scalar dtype helpers of the CPU path.
#include "src/cpu/problem.h"

#include <thread>

namespace moex::cpu {

CpuProblem unpack_problem(const ExpertsProblem& p) {
    CpuProblem cp;
    cp.T = p.T(), cp.H = p.H(), cp.I = p.I(), cp.E = p.E(), cp.k = p.k();
    cp.up_width = p.up_width();
    cp.dtype = p.dtype();
    cp.layout = !p.has_gate         ? GateLayout::kUngated
                : p.is_concatenated ? GateLayout::kConcatenated
                                    : GateLayout::kInterleaved;
    cp.act = p.activation;
    cp.gate = p.gate;
    cp.alpha = p.swiglu_alpha, cp.limit = p.swiglu_limit;
    cp.x = p.hidden_states.data;
    cp.ids = p.top_k_index, cp.weights = p.top_k_weights;
    cp.up_bias = p.gate_up_bias.defined() ? p.gate_up_bias.data : nullptr;
    cp.down_bias = p.down_bias.defined() ? p.down_bias.data : nullptr;
    cp.act_quant = p.quant.enabled() ? p.quant.activations : ActivationQuant::kNone;
    cp.p = &p;
    return cp;
}

namespace {

// Expert e of a quantized projection (E, N, K): its codes and the scales of its blocks (validated shapes).
WeightMat quantized_mat(const ExpertsQuant& q, const TensorView& w, const ProjectionQuant& pq, int64_t e, int64_t N,
                        int64_t K) {
    const int64_t row_bytes = K / q.per_byte();
    WeightMat m{static_cast<const char*>(w.data) + e * N * row_bytes, w.dtype, false, row_bytes, K};
    const TensorView& s = pq.scale_inv;
    m.q.format = q.format;
    m.q.scale_dtype = s.dtype;
    m.q.ld = s.shape[2];
    m.q.scale = static_cast<const char*>(s.data) + e * s.shape[1] * s.shape[2] * dtype_size(s.dtype);
    constexpr int64_t kWhole = int64_t(1) << 40;  // one scale for all rows / all of K
    const bool per_tensor = q.format == QuantFormat::kFp8 && q.block_n == 0;
    m.q.bn = per_tensor ? kWhole : q.format == QuantFormat::kFp8 ? q.block_n : 1;
    m.q.bk = per_tensor ? kWhole : q.group_k();
    if (q.format == QuantFormat::kNvfp4) m.q.global = static_cast<const float*>(pq.global_scale.data)[e];
    return m;
}

}  // namespace

WeightMat CpuProblem::up(int64_t e) const {
    if (p->quant.enabled()) return quantized_mat(p->quant, p->gate_up_proj, p->quant.gate_up, e, up_width, H);
    const bool tr = p->is_transposed;  // (E, H, up_width) else (E, up_width, H)
    const int64_t size = up_width * H;
    return {static_cast<const char*>(p->gate_up_proj.data) + e * size * dtype_size(dtype), dtype, tr, tr ? up_width : H,
            H};
}

WeightMat CpuProblem::down(int64_t e) const {
    if (p->quant.enabled()) return quantized_mat(p->quant, p->down_proj, p->quant.down, e, H, I);
    const bool tr = p->is_transposed;  // (E, I, H) else (E, H, I)
    const int64_t size = H * I;
    return {static_cast<const char*>(p->down_proj.data) + e * size * dtype_size(dtype), dtype, tr, tr ? H : I, I};
}

float CpuProblem::up_activation_scale(int64_t e) const {
    return static_cast<const float*>(p->quant.gate_up.activation_scale.data)[e];
}

float CpuProblem::down_activation_scale(int64_t e) const {
    return static_cast<const float*>(p->quant.down.activation_scale.data)[e];
}

float CpuProblem::route_weight(int64_t t, int64_t j) const {
    const int64_t off = t * weights.strides[0] + j * weights.strides[1];
    switch (weights.dtype) {
        case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(weights.data)[off]);
        case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(weights.data)[off]);
        default: return static_cast<const float*>(weights.data)[off];
    }
}

int resolve_threads(int num_threads) {
    if (num_threads > 0) return num_threads;
    const unsigned hw = std::thread::hardware_concurrency();
    return hw == 0 ? 1 : int(hw);
}

void to_f32(const void* src, DType dt, int64_t n, float* dst) {
    if (n <= 0) return;  // an empty rank passes null pointers, which memcpy must not see
    if (dt == DType::kF32) {
        std::memcpy(dst, src, size_t(n) * 4);
    } else if (dt == DType::kBF16) {
        const auto* s = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
    } else {
        const auto* s = static_cast<const uint16_t*>(src);
        for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
    }
}

float round_to(float v, DType dt) {
    if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(v));
    if (dt == DType::kF16) return f16_to_f32(f32_to_f16(v));
    return v;
}

}  // namespace moex::cpu
