// make_rope_table: inv_freq and attention_scaling of a config's rotary embedding, computed step by step in float32 as
// transformers' rope init functions (modeling_rope_utils.py) do, each torch op rounded where torch rounds it. The only
// known difference: torch's vectorised powf is within 1 ulp, ours (double, then rounded) is correctly rounded.
#include <cmath>
#include <string>

#include "moex/error.h"
#include "src/model/ops/ops.h"

namespace moex::model {
namespace {

constexpr double kPi = 3.14159265358979323846;

// base ** (arange(0, dim, 2).float() / dim): the exponent divided in f32, base taken as f32 (torch's type promotion).
std::vector<float> powers(double base, int64_t dim) {
    std::vector<float> p(size_t(dim / 2));
    for (int64_t i = 0; i < dim / 2; ++i) {
        const float e = float(2 * i) / float(dim);
        p[size_t(i)] = float(std::pow(double(float(base)), double(e)));
    }
    return p;
}

std::vector<float> default_inv_freq(double base, int64_t dim) {
    std::vector<float> inv = powers(base, dim);
    for (float& v : inv) v = 1.0f / v;
    return inv;
}

// _compute_yarn_parameters with truncate = True and no mscale / mscale_all_dim (DeepSeek-only keys).
RopeTable yarn(const RopeConfig& r, int64_t dim) {
    MOEX_REQUIRE(r.original_max_position_embeddings > 0, ErrorCode::kInvalidArgument,
                 "rope: yarn needs original_max_position_embeddings > 0");
    const double factor = r.factor;
    const double beta_fast = r.beta_fast != 0.0 ? r.beta_fast : 32.0;  // python `or 32`
    const double beta_slow = r.beta_slow != 0.0 ? r.beta_slow : 1.0;
    const double orig = double(r.original_max_position_embeddings), base = r.theta;
    auto correction_dim = [&](double rotations) {
        return (double(dim) * std::log(orig / (rotations * 2.0 * kPi))) / (2.0 * std::log(base));
    };
    double low = std::floor(correction_dim(beta_fast)), high = std::ceil(correction_dim(beta_slow));
    low = low > 0.0 ? low : 0.0;
    high = high < double(dim - 1) ? high : double(dim - 1);
    if (low == high) high += 0.001;  // transformers' guard against a zero-width ramp
    const std::vector<float> pos = powers(base, dim);
    RopeTable t;
    t.rotary_dim = dim;
    t.inv_freq.resize(pos.size());
    for (size_t i = 0; i < pos.size(); ++i) {
        const float extrapolation = 1.0f / pos[i];
        const float interpolation = 1.0f / (float(factor) * pos[i]);
        float ramp = (float(int64_t(i)) - float(low)) / float(high - low);
        ramp = ramp < 0.0f ? 0.0f : (ramp > 1.0f ? 1.0f : ramp);
        const float extrapolation_factor = 1.0f - ramp;
        t.inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
    }
    const double mscale = factor <= 1.0 ? 1.0 : 0.1 * std::log(factor) + 1.0;
    t.attention_scaling = float(r.attention_factor > 0.0 ? r.attention_factor : mscale);
    return t;
}

// _compute_llama3_parameters. torch evaluates `2 * pi / inv_freq` as reciprocal(inv_freq) * 2pi, and compares with
// (and scales by) python floats cast to f32.
std::vector<float> llama3(const RopeConfig& r, int64_t dim) {
    MOEX_REQUIRE(r.original_max_position_embeddings > 0, ErrorCode::kInvalidArgument,
                 "rope: llama3 needs original_max_position_embeddings > 0");
    MOEX_REQUIRE(r.high_freq_factor != r.low_freq_factor, ErrorCode::kInvalidArgument,
                 "rope: llama3 needs high_freq_factor != low_freq_factor");
    const double old_len = double(r.original_max_position_embeddings);
    const float low_wavelen = float(old_len / r.low_freq_factor), high_wavelen = float(old_len / r.high_freq_factor);
    const float factor = float(r.factor), two_pi = float(2.0 * kPi);
    std::vector<float> inv = default_inv_freq(r.theta, dim);
    for (float& f : inv) {
        const float wavelen = (1.0f / f) * two_pi;
        const float scaled = wavelen > low_wavelen ? f / factor : f;
        const float smooth = ((1.0f / wavelen) * float(old_len) - float(r.low_freq_factor)) /
                             float(r.high_freq_factor - r.low_freq_factor);
        const float smoothed = ((1.0f - smooth) * scaled) / factor + smooth * scaled;
        const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
        f = medium ? smoothed : scaled;
    }
    return inv;
}

}  // namespace

RopeTable make_rope_table(const RopeConfig& rope, int64_t head_dim) {
    MOEX_REQUIRE(head_dim > 0, ErrorCode::kInvalidArgument, "rope: head_dim must be positive");
    MOEX_REQUIRE(rope.theta > 0.0 && std::isfinite(rope.theta), ErrorCode::kInvalidArgument,
                 "rope: rope_theta must be a positive number, got " + std::to_string(rope.theta));
    MOEX_REQUIRE(rope.partial_rotary_factor > 0.0 && rope.partial_rotary_factor <= 1.0, ErrorCode::kInvalidArgument,
                 "rope: partial_rotary_factor must be in (0, 1], got " + std::to_string(rope.partial_rotary_factor));
    // int(head_dim * partial_rotary_factor), as transformers rounds it (towards zero).
    const int64_t dim = int64_t(double(head_dim) * rope.partial_rotary_factor);
    MOEX_REQUIRE(dim >= 2 && dim % 2 == 0, ErrorCode::kInvalidArgument,
                 "rope: the rotary dimension int(head_dim * partial_rotary_factor) = " + std::to_string(dim) +
                     " must be even and at least 2");
    const std::string& type = rope.type;
    const bool scaled = type == "linear" || type == "dynamic" || type == "yarn" || type == "llama3";
    if (scaled)
        MOEX_REQUIRE(rope.factor > 0.0 && std::isfinite(rope.factor), ErrorCode::kInvalidArgument,
                     "rope: " + type + " needs a positive factor, got " + std::to_string(rope.factor));
    if (type == "yarn") return yarn(rope, dim);
    RopeTable t;
    t.rotary_dim = dim;
    if (type == "default") {
        t.inv_freq = default_inv_freq(rope.theta, dim);
    } else if (type == "linear") {
        t.inv_freq = default_inv_freq(rope.theta, dim);
        for (float& f : t.inv_freq) f /= float(rope.factor);
    } else if (type == "dynamic") {
        // transformers' dynamic NTK rope starts from base * (factor * L / L - (factor - 1)) ** (dim / (dim - 2)) = base
        // and only rescales once a sequence grows past max_position_embeddings. The table is fixed, so moex keeps the
        // unscaled frequencies at every length (identical up to max_position_embeddings).
        t.inv_freq = default_inv_freq(rope.theta, dim);
    } else if (type == "llama3") {
        t.inv_freq = llama3(rope, dim);
    } else {
        fail(ErrorCode::kUnsupported,
             "rope: rope_type '" + type + "' is not supported (supported: default, linear, dynamic, yarn, llama3)");
    }
    return t;
}

}  // namespace moex::model
