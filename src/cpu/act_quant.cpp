// Activation quantization of the CPU path: rows rounded to e4m3 and back, in parallel over rows.
#include "src/cpu/act_quant.h"

#include <cmath>

#include "moex/quant.h"

namespace moex::cpu {
namespace {

void round_dynamic(const float* src, float* dst, int64_t K, int64_t group) {
    for (int64_t k0 = 0; k0 < K; k0 += group) {
        const int64_t k1 = K - k0 < group ? K : k0 + group;
        float amax = 0.0f;
        for (int64_t k = k0; k < k1; ++k) amax = std::fmax(amax, std::fabs(src[k]));
        const float s = amax / 448.0f, inv = dynamic_inverse(amax);
        for (int64_t k = k0; k < k1; ++k)
            dst[k] = amax == 0.0f ? src[k] : fp8e4m3_to_f32(f32_to_fp8e4m3(src[k] * inv)) * s;
    }
}

void round_static(const float* src, float* dst, int64_t K, float s) {
    for (int64_t k = 0; k < K; ++k) dst[k] = fp8e4m3_to_f32(f32_to_fp8e4m3(src[k] / s)) * s;
}

}  // namespace

int64_t activation_group(const CpuProblem& cp, int64_t K) {
    const ExpertsQuant& q = cp.p->quant;
    return q.block_k > 0 ? q.block_k : K;
}

const float* quantize_tokens(const CpuProblem& cp, const float* x, int64_t rows, FloatBuffer& buf, int threads) {
    float* out = buf.get(rows * cp.H);
    const int64_t group = activation_group(cp, cp.H);
    parallel_for(rows, rows * cp.H >= (1 << 16) ? threads : 1,
                 [&](int64_t t) { round_dynamic(x + t * cp.H, out + t * cp.H, cp.H, group); });
    return out;
}

const float* quantize_routed_rows(const CpuProblem& cp, const Routing& r, const float* x, FloatBuffer& buf,
                                  int threads) {
    float* out = buf.get(r.rows() * cp.H);
    parallel_for(r.groups(), threads, [&](int64_t g) {
        const float s = cp.up_activation_scale(r.expert[size_t(g)]);
        for (int64_t row = r.begin[size_t(g)]; row < r.begin[size_t(g) + 1]; ++row)
            round_static(x + int64_t(r.token[size_t(row)]) * cp.H, out + row * cp.H, cp.H, s);
    });
    return out;
}

void quantize_hidden(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, float* h, int threads) {
    const int64_t group = activation_group(cp, cp.I);
    const bool dynamic = cp.act_quant == ActivationQuant::kDynamic;
    parallel_for(g1 - g0, threads, [&](int64_t i) {
        const int64_t g = g0 + i;
        const float s = dynamic ? 0.0f : cp.down_activation_scale(r.expert[size_t(g)]);
        for (int64_t row = r.begin[size_t(g)]; row < r.begin[size_t(g) + 1]; ++row) {
            float* hr = h + row * cp.I;
            if (dynamic)
                round_dynamic(hr, hr, cp.I, group);
            else
                round_static(hr, hr, cp.I, s);
        }
    });
}

}  // namespace moex::cpu
