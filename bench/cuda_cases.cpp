// CUDA timing of `moex bench`: weights made on the host chunk by chunk and copied, routing sets uploaded once per T,
// cuda::time_us around one call (or one graph replay of kRoutingSets calls), then the checked output of set 0. With
// --backward a call is the backward pass (every gradient; dO random) and the checked output is dx.
#include "bench/cuda_cases.h"

#include <fmt/format.h>

#include <algorithm>

#include "bench/output_check.h"
#include "common/random_data.h"
#include "moex/backward.h"
#include "moex/device.h"
#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#include "cuda/common/timing.h"
#include "cuda/launch.h"
#endif

namespace moex::bench {
namespace {

constexpr int64_t kStagingElements = int64_t(64) << 20;  // 128 MB of bf16 per host fill + copy

// Random weights on the GPU, filled on the host 64 Mi elements at a time: deepseek-v3's 22.5 GB never sits on the host.
DeviceTensor device_weights(DType dtype, std::initializer_list<int64_t> shape, uint64_t seed, int threads) {
#if MOEX_WITH_CUDA
    DeviceTensor t(dtype, shape.begin(), int(shape.size()), Device::kCUDA);
    const int64_t n = t.view().numel(), esize = dtype_size(dtype);
    Tensor host(dtype, {std::min(n, kStagingElements)});
    for (int64_t off = 0, chunk = 0; off < n; off += kStagingElements, ++chunk) {
        const int64_t len = std::min(kStagingElements, n - off);
        const TensorView part = TensorView::contiguous(host.data(), dtype, {len});
        common::fill_random(part, kWeightStd, common::mix_seed(seed, uint64_t(chunk)), common::Distribution::kUniform,
                            threads);
        cuda::copy_to_device(static_cast<char*>(t.view().data) + off * esize, host.data(), size_t(len * esize));
    }
    return t;
#else
    (void)dtype, (void)shape, (void)seed, (void)threads;
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
}

struct CaseInputs {  // of one T, shared by every backend
    int64_t T = -1;
    DeviceTensor x;                            // (T, H)
    DeviceTensor dout;                         // (T, H) --backward: the output's gradient
    std::vector<DeviceTensor> index, weights;  // per routing set: (T, k) i64, (T, k) f32
    std::vector<int64_t> touched;              // per routing set: distinct experts
};

// What cuda::time_us calls: one experts call per invocation, the next routing set each time; or (graph) every
// routing set once with set 0 last, so that `out` ends holding set 0's output.
struct Calls {
    const Backend* backend = nullptr;
    std::vector<ExpertsProblem> problems;  // per routing set
    TensorView out;                        // (T, H)
    TensorView scratch;                    // (T, H): graph mode, for the eager call time_us makes before capturing
    bool graph = false;
    int invocations = 0;
    // --backward: dO and the gradients other than dx (which goes to `out` or `scratch` as the forward's output does).
    bool backward = false;
    TensorView dout;
    ExpertsGrads grads;
    std::vector<ExpertsSaved> saved;  // per routing set: what the forward keeps (--keep) or kept (--backward)

    // One forward, or one backward with dx into `dst`, of routing set `set`.
    void call(int set, const TensorView& dst, RunOptions options) const {
        const ExpertsProblem& p = problems[size_t(set)];
        if (!saved.empty()) options.saved = &saved[size_t(set)];
        if (!backward) return backend->run(p, dst, options);
        ExpertsGrads g = grads;
        g.hidden_states = dst;
        backend->backward(p, dout, g, options);
    }
};

void invoke(void* ctx, void* stream) {
    auto& c = *static_cast<Calls*>(ctx);
    const RunOptions options{.cuda_stream = stream};
    const int n = c.invocations++;
    if (!c.graph) return c.call(n % kRoutingSets, c.out, options);
    const TensorView& out = n == 0 ? c.scratch : c.out;
    for (int j = 1; j <= kRoutingSets; ++j) c.call(j % kRoutingSets, out, options);
}

class CudaShapeBench : public CaseRunner {
   public:
    CudaShapeBench(const ShapePlan& plan, const BenchConfig& config);
    const ShapePlan& plan() const override { return plan_; }
    CaseResult run(const Backend& backend, int64_t T) override;

   private:
    const CaseInputs& inputs(int64_t T);
    double time_per_call(Calls& calls, int warmup, int reps) const;
    std::vector<float> output_of_set0(Calls& calls, DeviceTensor& out) const;
    int64_t workspace_of_one_call(Calls& calls) const;
    void check(CaseResult& res, std::vector<float> got, const std::string& backend);

    ShapePlan plan_;
    BenchConfig config_;
    std::vector<DeviceTensor> gate_up_;  // per weight set: (E, 2I, H)
    std::vector<DeviceTensor> down_;     // per weight set: (E, H, I)
    std::vector<ExpertsQuant> quant_;    // per weight set, quantized configs (scales in scales_)
    std::vector<DeviceTensor> scales_;
    CaseInputs in_;
    std::string ref_backend_;  // the first backend timed at in_.T with a finite output
    std::vector<float> ref_;   // its output for routing set 0, (T, H)
};

CudaShapeBench::CudaShapeBench(const ShapePlan& plan, const BenchConfig& config) : plan_(plan), config_(config) {
    const auto& m = plan.model;
    for (int s = 0; s < plan.sets; ++s) {
        const uint64_t seed = common::mix_seed(config.seed, uint64_t(s) * 2 + 1);
        if (config.quant != QuantFormat::kNone) {
            QuantizedWeightSet set = make_quantized_set(plan, config, seed);
            gate_up_.push_back(std::move(set.gate_up));
            down_.push_back(std::move(set.down));
            for (DeviceTensor& t : set.scales) scales_.push_back(std::move(t));
            quant_.push_back(set.quant);
            continue;
        }
        gate_up_.push_back(device_weights(config.dtype, {plan.E, 2 * m.I, m.H}, seed, config.threads));
        down_.push_back(device_weights(config.dtype, {plan.E, m.H, m.I}, seed + 1, config.threads));
    }
}

const CaseInputs& CudaShapeBench::inputs(int64_t T) {
    if (in_.T == T) return in_;
    in_ = CaseInputs{};
    ref_.clear(), ref_backend_.clear();
    const auto& m = plan_.model;
    const uint64_t seed = case_seed(config_, m, T);
    Tensor x(config_.dtype, {T, m.H});
    common::fill_random(x.view(), 1.0, seed, common::Distribution::kNormal, config_.threads);
    in_.x = DeviceTensor::from_host(x.view(), Device::kCUDA);
    if (config_.backward) {
        common::fill_random(x.view(), 1.0, common::mix_seed(seed, 99), common::Distribution::kNormal, config_.threads);
        in_.dout = DeviceTensor::from_host(x.view(), Device::kCUDA);
    }
    for (int s = 0; s < kRoutingSets; ++s) {
        Tensor index(DType::kI64, {T, m.k}), weights(DType::kF32, {T, m.k});
        common::random_routing(index.view(), weights.view(), plan_.E, common::mix_seed(seed, uint64_t(s) + 7));
        in_.touched.push_back(common::count_touched_experts(index.view(), plan_.E));
        in_.index.push_back(DeviceTensor::from_host(index.view(), Device::kCUDA));
        in_.weights.push_back(DeviceTensor::from_host(weights.view(), Device::kCUDA));
    }
    in_.T = T;
    return in_;
}

// Median µs of one experts call: CUDA events around each call, or around each replay of the graph ÷ its calls.
double CudaShapeBench::time_per_call(Calls& calls, int warmup, int reps) const {
#if MOEX_WITH_CUDA
    calls.invocations = 0;
    const double us = cuda::time_us(&invoke, &calls, nullptr, warmup, reps, config_.graph);
    return config_.graph ? us / kRoutingSets : us;
#else
    (void)calls, (void)warmup, (void)reps;
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
}

// The peak of moex's workspace pool over one plain call of set 0 (into the graph mode's scratch output, so that the
// replays' output stays as they left it).
int64_t CudaShapeBench::workspace_of_one_call(Calls& calls) const {
#if MOEX_WITH_CUDA
    device_synchronize(Device::kCUDA);
    cuda::reset_workspace_peak();
    calls.call(0, calls.graph ? calls.scratch : calls.out, RunOptions{});
    device_synchronize(Device::kCUDA);
    return int64_t(cuda::workspace_peak_bytes());
#else
    (void)calls;
    return -1;
#endif
}

// Graph mode: `out` was poisoned before the timing and only the replays wrote it, so it is checked as it stands.
// Otherwise one more call of set 0 into the poisoned output.
std::vector<float> CudaShapeBench::output_of_set0(Calls& calls, DeviceTensor& out) const {
    if (!calls.graph) {
        out.fill_bytes(0xff);
        device_synchronize(Device::kCUDA);
        calls.call(0, out.view(), RunOptions{});
        device_synchronize(Device::kCUDA);
    }
    Tensor host(config_.dtype, {out.view().shape[0], out.view().shape[1]});
    out.copy_to_host(host.view());
    return to_floats(host.view());
}

void CudaShapeBench::check(CaseResult& res, std::vector<float> got, const std::string& backend) {
    res.output_ok = all_finite(got);
    if (ref_.empty()) {
        if (res.output_ok) ref_ = std::move(got), ref_backend_ = backend, res.check = "(reference)";
        return;
    }
    const bool e4m3 = config_.quant == QuantFormat::kFp8 && config_.act != ActivationQuant::kNone;
    const CrossCheck c = cross_check(ref_, got, config_.dtype, ref_backend_, e4m3);
    res.check_ok = c.ok;
    res.check = c.text;
}

CaseResult CudaShapeBench::run(const Backend& backend, int64_t T) {
    const CaseInputs& in = inputs(T);
    const auto& m = plan_.model;
    const int64_t out_shape[2] = {T, m.H};
    DeviceTensor out(config_.dtype, out_shape, 2, Device::kCUDA);
    DeviceTensor scratch = config_.graph ? DeviceTensor(config_.dtype, out_shape, 2, Device::kCUDA) : DeviceTensor();
    Calls calls{.backend = &backend, .out = out.view(), .scratch = scratch.view(), .graph = config_.graph};
    for (int s = 0; s < kRoutingSets; ++s) {
        ExpertsProblem p;
        p.hidden_states = in.x.view();
        p.top_k_index = in.index[size_t(s)].view();
        p.top_k_weights = in.weights[size_t(s)].view();
        p.gate_up_proj = gate_up_[size_t(s % plan_.sets)].view();
        p.down_proj = down_[size_t(s % plan_.sets)].view();
        if (!quant_.empty()) p.quant = quant_[size_t(s % plan_.sets)];
        calls.problems.push_back(p);
    }

    CaseResult res;
    if (auto why = backend.why_not(calls.problems[0])) {
        res.skip = *why;
        return res;
    }
    if (config_.backward && !backend.has_backward(Device::kCUDA)) {
        res.skip = "it has no backward on cuda";
        return res;
    }
    if (config_.graph && backend.host_synchronizes(Device::kCUDA)) {
        res.skip = "it synchronises the host, so it cannot be captured into a CUDA graph";
        return res;
    }
    // --backward: every gradient but dx (which takes the forward output's place) in buffers of this case,
    // allocated once the backend is known to run it.
    DeviceTensor dw, dwu, dwd;
    if (config_.backward) {
        const int64_t w_shape[2] = {T, m.k};
        dw = DeviceTensor(DType::kF32, w_shape, 2, Device::kCUDA);
        dwu = DeviceTensor(config_.dtype, gate_up_[0].view().shape, 3, Device::kCUDA);
        dwd = DeviceTensor(config_.dtype, down_[0].view().shape, 3, Device::kCUDA);
        calls.backward = true;
        calls.dout = in.dout.view();
        calls.grads.top_k_weights = dw.view(), calls.grads.gate_up_proj = dwu.view();
        calls.grads.down_proj = dwd.view();
    }
    // Training's kept state, per routing set, where the backend keeps it: the forward's (--keep), or for the backward
    // what one untimed forward of each set kept (unless --recompute).
    std::vector<DeviceTensor> kept;
    if ((config_.keep || (config_.backward && !config_.recompute)) && !backend.save_refusal(calls.problems[0])) {
        const int64_t gu_shape[2] = {T * m.k, 2 * m.I}, row_shape[1] = {T * m.k};
        for (int s = 0; s < kRoutingSets; ++s) {
            kept.emplace_back(config_.dtype, gu_shape, 2, Device::kCUDA);
            kept.emplace_back(DType::kI32, row_shape, 1, Device::kCUDA);
            calls.saved.push_back({kept[kept.size() - 2].view(), kept.back().view()});
            if (config_.backward) {
                RunOptions forward;
                forward.saved = &calls.saved.back();
                backend.run(calls.problems[size_t(s)], out.view(), forward);
            }
        }
        res.kept = true;
    }
    // One timed call after one warm-up sizes the repetitions to --case-seconds.
    const int per_invocation = config_.graph ? kRoutingSets : 1;
    out.fill_bytes(0xff);  // NaN in bf16, f16 and f32: a row left unwritten shows
    device_synchronize(Device::kCUDA);
    const double probe_us = time_per_call(calls, 1, 1);
    const double invocation_us = probe_us * per_invocation;
    const double budget_us = config_.case_seconds * 1e6;
    if (invocation_us * (2 + config_.warmup) > budget_us) {  // no room for more: the probe is the one sample
        res.warmup_only = true;
        res.reps = 1;
        res.median_us = probe_us;
    } else {
        const int fit = int(budget_us / invocation_us) - 2 - config_.warmup;
        const int reps = std::min(config_.reps, std::max(3, fit));
        out.fill_bytes(0xff);
        device_synchronize(Device::kCUDA);
        res.median_us = time_per_call(calls, config_.warmup, reps);
        res.reps = reps;
    }
    // Over all sets, which the calls rotate through evenly: the same floor for every backend at this (shape, T).
    for (int64_t t : in.touched) res.e_touched += double(t);
    res.e_touched /= double(kRoutingSets);
    res.workspace_bytes = workspace_of_one_call(calls);
    check(res, output_of_set0(calls, out), std::string(backend.name()));
    return res;
}

}  // namespace

std::unique_ptr<CaseRunner> make_cuda_runner(const ShapePlan& plan, const BenchConfig& config) {
    return std::make_unique<CudaShapeBench>(plan, config);
}

}  // namespace moex::bench
