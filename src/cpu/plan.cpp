// make_plan (ExpertsProblem -> Plan), thread-count resolution and the scalar dtype helpers of the CPU path.
#include "src/cpu/plan.h"

#include <thread>

namespace moex::cpu {

Plan make_plan(const ExpertsProblem& p) {
    Plan q;
    q.T = p.T(), q.H = p.H(), q.I = p.I(), q.E = p.E(), q.k = p.k();
    q.up_width = p.up_width();
    q.dtype = p.dtype();
    q.layout = !p.has_gate ? GateLayout::kUngated
               : p.is_concatenated ? GateLayout::kConcatenated
                                   : GateLayout::kInterleaved;
    q.act = p.activation;
    q.gate = p.gate;
    q.alpha = p.swiglu_alpha, q.limit = p.swiglu_limit;
    q.x = p.hidden_states.data;
    q.ids = p.top_k_index, q.weights = p.top_k_weights;
    q.up_bias = p.gate_up_bias.defined() ? p.gate_up_bias.data : nullptr;
    q.down_bias = p.down_bias.defined() ? p.down_bias.data : nullptr;
    q.p = &p;
    return q;
}

WeightMat Plan::up(int64_t e) const {
    const bool tr = p->is_transposed;  // (E, H, up_width) else (E, up_width, H)
    const int64_t size = up_width * H;
    return {static_cast<const char*>(p->gate_up_proj.data) + e * size * dtype_size(dtype), dtype, tr,
            tr ? up_width : H, H};
}

WeightMat Plan::down(int64_t e) const {
    const bool tr = p->is_transposed;  // (E, I, H) else (E, H, I)
    const int64_t size = H * I;
    return {static_cast<const char*>(p->down_proj.data) + e * size * dtype_size(dtype), dtype, tr, tr ? H : I, I};
}

float Plan::route_weight(int64_t t, int64_t j) const {
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
