// Weight-set planning and the CPU timing loop of `moex bench` (wall clock, steady_clock, median of repetitions).
#include "bench/cases.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <string_view>

#include "bench/output_check.h"
#include "common/random_data.h"
#include "moex/error.h"

namespace moex::bench {
namespace {

constexpr int64_t kCacheMultiple = 4;  // all sets together >= 4x LLC, so a repetition cannot find its experts cached

uint64_t fnv1a(std::string_view s) {
    uint64_t h = 0xcbf29ce484222325ull;
    for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
    return h;
}

struct Routing {
    DeviceTensor index;    // (T, k) i64, as the Hugging Face routers produce
    DeviceTensor weights;  // (T, k) f32
    int64_t touched = 0;
};

// Random weights on `device`: filled in place on the CPU, through one host staging copy for CUDA.
DeviceTensor random_weights(DType dtype, std::initializer_list<int64_t> shape, uint64_t seed, Device device,
                            int threads) {
    if (device == Device::kCPU) {
        DeviceTensor t(dtype, shape.begin(), int(shape.size()), device);
        common::fill_random(t.view(), kWeightStd, seed, common::Distribution::kUniform, threads);
        return t;
    }
    Tensor host(dtype, shape);
    common::fill_random(host.view(), kWeightStd, seed, common::Distribution::kUniform, threads);
    return DeviceTensor::from_host(host.view(), device);
}

}  // namespace

double weight_bytes_per_element(const BenchConfig& c) {
    switch (c.quant) {
        case QuantFormat::kNone: return double(dtype_size(c.dtype));
        case QuantFormat::kFp8:
            return 1.0 + (c.block.n > 0 ? double(dtype_size(c.scale_dtype)) / double(c.block.n * c.block.k) : 0.0);
        case QuantFormat::kMxfp4: return 0.5 + 1.0 / 32.0;
        case QuantFormat::kNvfp4: return 0.5 + 1.0 / 16.0;
    }
    return 0;
}

std::string quant_label(const BenchConfig& c) {
    if (c.quant == QuantFormat::kNone) return "";
    std::string s(quant_format_name(c.quant));
    if (c.quant == QuantFormat::kFp8)
        s += (c.block.n > 0 ? fmt::format(" {}x{}", c.block.n, c.block.k) : std::string(" per-tensor")) +
             (c.scale_dtype == DType::kUE8M0 ? " ue8m0" : " float");
    return s + ", activations " + std::string(activation_quant_name(c.act));
}

uint64_t case_seed(const BenchConfig& c, const shapes::ExpertsShape& shape, int64_t T) {
    return common::mix_seed(common::mix_seed(c.seed, fnv1a(shape.name)), uint64_t(T));
}

ShapePlan plan_shape(const shapes::ExpertsShape& s, const BenchConfig& c) {
    ShapePlan p;
    p.model = s;
    const auto per_expert = int64_t(std::ceil(3.0 * double(s.H) * double(s.I) * weight_bytes_per_element(c)));
    p.E = s.E;
    if (per_expert * s.E > c.max_weight_bytes) {
        int64_t e = 1;
        while (e * 2 <= s.E && per_expert * e * 2 <= c.max_weight_bytes) e *= 2;
        MOEX_REQUIRE(e >= s.k && per_expert * e <= c.max_weight_bytes, ErrorCode::kInvalidArgument,
                     fmt::format("{}: even k = {} experts ({:.2f} GB in {}) exceed --max-weight-gb {:.1f}", s.name, s.k,
                                 double(per_expert * s.k) * 1e-9, dtype_name(c.dtype),
                                 double(c.max_weight_bytes) / double(1LL << 30)));
        p.E = e;
        p.note = fmt::format(
            "{} E {}→{}: the full weight set ({:.1f} GB {}) exceeds --max-weight-gb {:.1f}; routing is "
            "uniform over the {} experts kept",
            s.name, s.E, e, double(per_expert * s.E) * 1e-9, dtype_name(c.dtype),
            double(c.max_weight_bytes) / double(1LL << 30), e);
    }
    p.set_bytes = per_expert * p.E;
    const int64_t want = kCacheMultiple * c.llc_bytes;
    p.sets = int(std::max<int64_t>(1, (want + p.set_bytes - 1) / p.set_bytes));
    if (p.sets > 1) {
        const int64_t fit = std::max<int64_t>(1, c.max_weight_bytes / p.set_bytes);
        p.sets = int(std::min<int64_t>(p.sets, fit));
        p.note += fmt::format("{}{}: one weight set is {:.1f} MB, under {}x the {} MB cache: {} sets rotated",
                              p.note.empty() ? "" : "; ", s.name, double(p.set_bytes) * 1e-6, kCacheMultiple,
                              c.llc_bytes >> 20, p.sets);
    }
    return p;
}

ShapeBench::ShapeBench(const ShapePlan& plan, const BenchConfig& config) : plan_(plan), config_(config) {
    const auto& m = plan.model;
    for (int s = 0; s < plan.sets; ++s) {
        const uint64_t seed = common::mix_seed(config.seed, uint64_t(s) * 2 + 1);
        if (config.quant == QuantFormat::kNone) {
            gate_up_.push_back(
                random_weights(config.dtype, {plan.E, 2 * m.I, m.H}, seed, config.device, config.threads));
            down_.push_back(random_weights(config.dtype, {plan.E, m.H, m.I}, seed + 1, config.device, config.threads));
            continue;
        }
        QuantizedWeightSet set = make_quantized_set(plan, config, seed);
        gate_up_.push_back(std::move(set.gate_up));
        down_.push_back(std::move(set.down));
        for (DeviceTensor& t : set.scales) scales_.push_back(std::move(t));
        quant_.push_back(set.quant);
    }
}

QuantizedWeightSet make_quantized_set(const ShapePlan& plan, const BenchConfig& config, uint64_t seed) {
    const auto& m = plan.model;
    Tensor up(DType::kBF16, {plan.E, 2 * m.I, m.H}), down(DType::kBF16, {plan.E, m.H, m.I});
    common::fill_random(up.view(), kWeightStd, seed, common::Distribution::kUniform, config.threads);
    common::fill_random(down.view(), kWeightStd, seed + 1, common::Distribution::kUniform, config.threads);
    ExpertsProblem host;
    host.gate_up_proj = up.view(), host.down_proj = down.view();
    const QuantizedExperts owner =  // holds the host copies host's views point into until they are placed
        quantize_experts(host, config.quant, config.block.n, config.block.k, config.scale_dtype);
    QuantizedWeightSet set;
    set.quant = host.quant;
    set.quant.activations = config.act;
    set.gate_up = DeviceTensor::from_host(host.gate_up_proj, config.device);
    set.down = DeviceTensor::from_host(host.down_proj, config.device);
    ExpertsQuant& q = set.quant;
    set.scales.reserve(4);
    for (TensorView* t : {&q.gate_up.scale_inv, &q.gate_up.global_scale, &q.down.scale_inv, &q.down.global_scale}) {
        if (!t->defined()) continue;
        set.scales.push_back(DeviceTensor::from_host(*t, config.device));
        *t = set.scales.back().view();
    }
    return set;
}

CaseResult ShapeBench::run(const Backend& backend, int64_t T) {
    const auto& m = plan_.model;
    const uint64_t seed = case_seed(config_, m, T);
    const Device dev = config_.device;
    Tensor x_host(config_.dtype, {T, m.H});
    common::fill_random(x_host.view(), 1.0, seed, common::Distribution::kNormal, config_.threads);
    const DeviceTensor x = DeviceTensor::from_host(x_host.view(), dev);
    const int64_t out_shape[2] = {T, m.H};
    DeviceTensor out(config_.dtype, out_shape, 2, dev);

    const int runs = config_.warmup + config_.reps;
    std::vector<Routing> routings(static_cast<size_t>(runs));
    for (int r = 0; r < runs; ++r) {  // all made and uploaded before any timing
        Tensor index(DType::kI64, {T, m.k}), weights(DType::kF32, {T, m.k});
        common::random_routing(index.view(), weights.view(), plan_.E, common::mix_seed(seed, uint64_t(r) + 7));
        auto& rt = routings[size_t(r)];
        rt.touched = common::count_touched_experts(index.view(), plan_.E);
        rt.index = DeviceTensor::from_host(index.view(), dev);
        rt.weights = DeviceTensor::from_host(weights.view(), dev);
    }
    auto problem_for = [&](int r) {
        ExpertsProblem p;
        p.hidden_states = x.view();
        p.top_k_index = routings[size_t(r)].index.view();
        p.top_k_weights = routings[size_t(r)].weights.view();
        p.gate_up_proj = gate_up_[size_t(r % plan_.sets)].view();
        p.down_proj = down_[size_t(r % plan_.sets)].view();
        if (!quant_.empty()) p.quant = quant_[size_t(r % plan_.sets)];
        return p;
    };

    CaseResult res;
    if (auto why = backend.why_not(problem_for(0))) {
        res.skip = *why;
        return res;
    }
    if (config_.backward && !backend.has_backward(dev)) {
        res.skip = "it has no backward on cpu";
        return res;
    }
    // --backward: a call is the backward pass (every gradient; dO random), dx written to `out`.
    DeviceTensor dout, dw, dwu, dwd;
    ExpertsGrads grads;
    if (config_.backward) {
        Tensor d_host(config_.dtype, {T, m.H});
        common::fill_random(d_host.view(), 1.0, common::mix_seed(seed, 99), common::Distribution::kNormal,
                            config_.threads);
        dout = DeviceTensor::from_host(d_host.view(), dev);
        const int64_t w_shape[2] = {T, m.k};
        dw = DeviceTensor(DType::kF32, w_shape, 2, dev);
        dwu = DeviceTensor(config_.dtype, gate_up_[0].view().shape, 3, dev);
        dwd = DeviceTensor(config_.dtype, down_[0].view().shape, 3, dev);
        grads.hidden_states = out.view(), grads.top_k_weights = dw.view();
        grads.gate_up_proj = dwu.view(), grads.down_proj = dwd.view();
    }
    const RunOptions options{.num_threads = config_.threads};
    out.fill_bytes(0xff);  // NaN in bf16, f16 and f32: a row left unwritten shows
    auto time_one = [&](int r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (config_.backward)
            backend.backward(problem_for(r), dout.view(), grads, options);
        else
            backend.run(problem_for(r), out.view(), options);
        device_synchronize(dev);
        return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    };
    // Settle: on a VM (the dev Xeon, RESULTS.md AF) the first reads of weight sets just written ran up to 3x slower
    // for about a second of calls, which the first case of each shape then measured; untimed calls first.
    if (!settled_) {
        settled_ = true;
        const auto t0 = std::chrono::steady_clock::now();
        for (int r = 0;
             std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < config_.settle_seconds;
             r = (r + 1) % runs)
            time_one(r);
    }
    double warm_us = 0;
    for (int w = 0; w < config_.warmup; ++w) warm_us = time_one(w);

    std::vector<double> us;
    double touched = 0;
    if (config_.warmup > 0 && warm_us * 1e-6 > config_.case_seconds) {  // one call is already over budget
        res.warmup_only = true;
        us.push_back(warm_us);
        touched = double(routings[size_t(config_.warmup - 1)].touched);
    } else {
        int reps = config_.reps;
        if (warm_us > 0) reps = std::clamp(int(config_.case_seconds * 1e6 / warm_us), 1, config_.reps);
        for (int r = config_.warmup; r < config_.warmup + reps; ++r) {
            us.push_back(time_one(r));
            touched += double(routings[size_t(r)].touched);
        }
        touched /= double(reps);
    }
    res.reps = int(us.size());
    res.e_touched = touched;
    std::sort(us.begin(), us.end());
    const size_t n = us.size();
    res.median_us = n % 2 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
    res.min_us = us.front();
    Tensor out_host(config_.dtype, {T, m.H});
    out.copy_to_host(out_host.view());
    res.output_ok = all_finite(to_floats(out_host.view()));
    return res;
}

}  // namespace moex::bench
