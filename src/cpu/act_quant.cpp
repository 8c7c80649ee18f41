// Activation quantization of the CPU path: rows rounded to e4m3 and back, in parallel over rows.
#include "src/cpu/act_quant.h"

#include <algorithm>
#include <cmath>

#include "moex/quant.h"
#include "src/cpu/kernels.h"

namespace moex::cpu {
namespace {

// One row of K in groups of `group`; s[g] gets each group's scale. Vectorized where the kernel table has it (the
// same bits).
void round_dynamic(const KernelTable& kt, const float* src, float* dst, int64_t K, int64_t group, float* s) {
    for (int64_t k0 = 0, g = 0; k0 < K; k0 += group, ++g) {
        const int64_t k1 = K - k0 < group ? K : k0 + group;
        float amax = 0.0f;
        if (kt.abs_max != nullptr)
            amax = kt.abs_max(src + k0, k1 - k0);
        else
            for (int64_t k = k0; k < k1; ++k) amax = std::fmax(amax, std::fabs(src[k]));
        const float scale = amax / 448.0f, inv = dynamic_inverse(amax);
        s[g] = scale;
        if (amax == 0.0f) {
            if (dst != src) std::copy(src + k0, src + k1, dst + k0);
        } else if (kt.round_e4m3 != nullptr) {
            kt.round_e4m3(src + k0, dst + k0, k1 - k0, inv, false, scale);
        } else {
            for (int64_t k = k0; k < k1; ++k) dst[k] = fp8e4m3_to_f32(f32_to_fp8e4m3(src[k] * inv)) * scale;
        }
    }
}

void round_static(const KernelTable& kt, const float* src, float* dst, int64_t K, float s) {
    if (kt.round_e4m3 != nullptr) return kt.round_e4m3(src, dst, K, s, true, s);
    for (int64_t k = 0; k < K; ++k) dst[k] = fp8e4m3_to_f32(f32_to_fp8e4m3(src[k] / s)) * s;
}

// Room in buf for the scales of rows of K in groups of `group`: sc describes them, the result is where they go.
float* scales_of(int64_t K, int64_t group, int64_t rows, FloatBuffer& buf, ActScales& sc) {
    const int64_t groups = (K + group - 1) / group;
    float* s = buf.get(rows * groups);
    sc = ActScales{s, group, groups};
    return s;
}

}  // namespace

int64_t activation_group(const CpuProblem& cp, int64_t K) {
    const ExpertsQuant& q = cp.p->quant;
    return q.block_k > 0 ? q.block_k : K;
}

ActRows quantize_tokens(const CpuProblem& cp, const float* x, int64_t rows, FloatBuffer& buf, FloatBuffer& scales,
                        int threads) {
    float* out = buf.get(rows * cp.H);
    ActScales sc;
    float* s = scales_of(cp.H, activation_group(cp, cp.H), rows, scales, sc);
    parallel_for(rows, rows * cp.H >= (1 << 16) ? threads : 1, [&](int64_t t) {
        round_dynamic(kernels(), x + t * cp.H, out + t * cp.H, cp.H, sc.group, s + t * sc.groups);
    });
    return {out, sc};
}

ActRows quantize_routed_rows(const CpuProblem& cp, const Routing& r, const float* x, FloatBuffer& buf,
                             FloatBuffer& scales, int threads) {
    float* out = buf.get(r.rows() * cp.H);
    ActScales sc;
    float* s = scales_of(cp.H, cp.H, r.rows(), scales, sc);
    parallel_for(r.groups(), threads, [&](int64_t g) {
        const float scale = cp.up_activation_scale(r.expert[size_t(g)]);
        for (int64_t row = r.begin[size_t(g)]; row < r.begin[size_t(g) + 1]; ++row) {
            round_static(kernels(), x + int64_t(r.token[size_t(row)]) * cp.H, out + row * cp.H, cp.H, scale);
            s[row] = scale;
        }
    });
    return {out, sc};
}

ActScales quantize_hidden(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, float* h, FloatBuffer& scales,
                          int threads) {
    const bool dynamic = cp.act_quant == ActivationQuant::kDynamic;
    ActScales sc;
    float* s = scales_of(cp.I, dynamic ? activation_group(cp, cp.I) : cp.I, r.rows(), scales, sc);
    parallel_for(g1 - g0, threads, [&](int64_t i) {
        const int64_t g = g0 + i;
        const float scale = dynamic ? 0.0f : cp.down_activation_scale(r.expert[size_t(g)]);
        for (int64_t row = r.begin[size_t(g)]; row < r.begin[size_t(g) + 1]; ++row) {
            float* hr = h + row * cp.I;
            if (dynamic) {
                round_dynamic(kernels(), hr, hr, cp.I, sc.group, s + row * sc.groups);
            } else {
                round_static(kernels(), hr, hr, cp.I, scale);
                s[row] = scale;
            }
        }
    });
    return sc;
}

}  // namespace moex::cpu
