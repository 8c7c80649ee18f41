// NaN check and backend-vs-backend cross-check of `moex bench` outputs (see output_check.h for the bound).
#include "bench/output_check.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "moex/dtype.h"

namespace moex::bench {

std::vector<float> to_floats(const TensorView& t) {
    const int64_t n = t.numel();
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
        v[size_t(i)] = t.dtype == DType::kF32    ? t.ptr<float>()[i]
                       : t.dtype == DType::kBF16 ? bf16_to_f32(t.ptr<uint16_t>()[i])
                                                 : f16_to_f32(t.ptr<uint16_t>()[i]);
    return v;
}

bool all_finite(const std::vector<float>& v) {
    for (float x : v)
        if (!std::isfinite(x)) return false;
    return true;
}

CrossCheck cross_check(const std::vector<float>& ref, const std::vector<float>& got, DType dtype,
                       const std::string& ref_name, bool e4m3_activations) {
    CrossCheck c;
    if (ref.size() != got.size()) {
        c.ok = false;
        c.text = fmt::format("MISMATCH: {} values vs {} from {}", got.size(), ref.size(), ref_name);
        return c;
    }
    const double rtol = dtype == DType::kBF16 ? 0x1p-7 : dtype == DType::kF16 ? 0x1p-10 : 1e-4;
    double ss = 0;
    for (float r : ref) ss += double(r) * double(r);
    const double rms = std::sqrt(ss / double(std::max<size_t>(ref.size(), 1)));
    const double atol = 1e-2 * rms;
    double max_abs = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(ref[i]));
        if (!(d <= atol + rtol * std::fabs(double(ref[i])))) ++c.bad;  // NaN counts as bad
        if (d > max_abs || std::isnan(d)) max_abs = std::isnan(d) ? INFINITY : d;
    }
    c.max_rel = rms > 0 ? max_abs / rms : max_abs;
    const bool flips = e4m3_activations && c.bad > 0 && double(c.bad) <= 0.15 * double(ref.size()) && c.max_rel <= 0.25;
    c.ok = c.bad == 0 || flips;
    c.text = flips  ? fmt::format("{:.1e} ({} e4m3 flips)", c.max_rel, c.bad)
             : c.ok ? fmt::format("{:.1e}", c.max_rel)
                    : fmt::format("MISMATCH vs {}: {} of {} beyond 1e-2·rms + {:.0e}·|ref| (max {:.1e}·rms)", ref_name,
                                  c.bad, ref.size(), rtol, c.max_rel);
    return c;
}

}  // namespace moex::bench
