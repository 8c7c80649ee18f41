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

namespace {

// The step of a 16-bit format (mantissa_bits stored bits) at |x|: 2^(floor(log2 |x|) - mantissa_bits); 0 for 0.
double format_step(double x, int mantissa_bits) {
    if (!(x > 0) || !std::isfinite(x)) return 0;
    int e = 0;
    std::frexp(x, &e);  // x = f·2^e, f in [0.5, 1)
    return std::ldexp(1.0, e - 1 - mantissa_bits);
}

}  // namespace

CrossCheck cross_check(const std::vector<float>& ref, const std::vector<float>& got, DType dtype,
                       const std::string& ref_name, bool e4m3_activations) {
    CrossCheck c;
    if (ref.size() != got.size()) {
        c.ok = false;
        c.text = fmt::format("MISMATCH: {} values vs {} from {}", got.size(), ref.size(), ref_name);
        return c;
    }
    // Two output steps at |ref| (output_check.h); f32 outputs: 1e-4·|ref|.
    const int mantissa = dtype == DType::kBF16 ? 7 : dtype == DType::kF16 ? 10 : 0;
    const auto steps = [&](double r) { return mantissa ? 2 * format_step(r, mantissa) : 1e-4 * r; };
    double ss = 0;
    for (float r : ref) ss += double(r) * double(r);
    const double rms = std::sqrt(ss / double(std::max<size_t>(ref.size(), 1)));
    const double atol = 1e-2 * rms;
    double max_abs = 0, max_bad = 0;  // the largest |Δ| of all values, and of those beyond the bound
    for (size_t i = 0; i < ref.size(); ++i) {
        const double d = std::fabs(double(got[i]) - double(ref[i]));
        if (!(d <= atol + steps(std::fabs(double(ref[i]))))) {  // NaN counts as bad
            ++c.bad;
            max_bad = std::isnan(d) ? INFINITY : std::max(max_bad, d);
        }
        if (d > max_abs || std::isnan(d)) max_abs = std::isnan(d) ? INFINITY : d;
    }
    c.max_rel = rms > 0 ? max_abs / rms : max_abs;
    const double n = double(ref.size());
    // The tail's values each within 5e-2·rms (values within the bound may differ by more: two steps at 6·rms).
    const bool tail = c.bad > 0 && double(c.bad) <= std::floor(kRoundingTail * n) && max_bad <= 5e-2 * rms;
    const bool flips = e4m3_activations && c.bad > 0 && double(c.bad) <= 0.15 * n && c.max_rel <= 0.25;
    c.ok = c.bad == 0 || tail || flips;
    c.text = !c.ok   ? fmt::format("MISMATCH vs {}: {} of {} beyond 1e-2·rms + two output steps (max {:.1e}·rms)",
                                   ref_name, c.bad, ref.size(), c.max_rel)
             : tail  ? fmt::format("{:.1e} ({} rounding outliers)", c.max_rel, c.bad)
             : flips ? fmt::format("{:.1e} ({} e4m3 flips)", c.max_rel, c.bad)
                     : fmt::format("{:.1e}", c.max_rel);
    return c;
}

}  // namespace moex::bench
