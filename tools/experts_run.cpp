// `moex experts run --problem P.safetensors --backend NAME [--device cpu|cuda] [--threads N] --out O.safetensors`:
// loads a problem file, places it on the device, poisons the output, runs the backend through the registry, copies
// the result back and writes it as tensor `out` (T, H) in the dtype of hidden_states.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>

#include "moex/backend.h"
#include "moex/device.h"
#include "moex/error.h"
#include "moex/problem_file.h"
#include "tools/cli.h"

namespace moex::cli {
namespace {

struct RunArgs {
    std::string problem, backend, device = "cpu", out;
    int threads = 0;
};

// Device copies of every defined tensor of `host`, and the problem that points at them.
struct Placed {
    std::vector<DeviceTensor> owned;
    ExpertsProblem problem;
};

Placed place(const ExpertsProblem& host, Device device) {
    Placed p;
    p.problem = host;
    if (device == Device::kCPU) return p;  // the mapped file is already host memory
    p.owned.reserve(13);                   // reserved up front: views point into the vector's elements
    auto put = [&](TensorView& v) {
        if (!v.defined()) return;
        p.owned.push_back(DeviceTensor::from_host(v, device));
        v = p.owned.back().view();
    };
    for (TensorView* v : {&p.problem.hidden_states, &p.problem.top_k_index, &p.problem.top_k_weights,
                          &p.problem.gate_up_proj, &p.problem.down_proj, &p.problem.gate_up_bias, &p.problem.down_bias})
        put(*v);
    // Quantized experts: their scales go with the weights.
    for (ProjectionQuant* q : {&p.problem.quant.gate_up, &p.problem.quant.down})
        for (TensorView* v : {&q->scale_inv, &q->global_scale, &q->activation_scale}) put(*v);
    return p;
}

double to_double(const TensorView& t, int64_t i) {
    switch (t.dtype) {
        case DType::kBF16: return bf16_to_f32(t.ptr<uint16_t>()[i]);
        case DType::kF16: return f16_to_f32(t.ptr<uint16_t>()[i]);
        case DType::kF32: return t.ptr<float>()[i];
        default: return std::nan("");
    }
}

// "max |out - expected| = ..." when the problem file carries a stored result.
std::string compare(const TensorView& out, const TensorView& expected) {
    if (!expected.defined()) return "";
    if (expected.numel() != out.numel() || expected.dtype != out.dtype)
        return fmt::format("; the stored `out` {} {} does not match the result's shape/dtype", expected.shape_string(),
                           dtype_name(expected.dtype));
    double max_abs = 0;
    int64_t non_finite = 0;
    for (int64_t i = 0; i < out.numel(); ++i) {
        const double a = to_double(out, i), b = to_double(expected, i);
        if (!std::isfinite(a) || !std::isfinite(b))
            ++non_finite;
        else
            max_abs = std::max(max_abs, std::fabs(a - b));
    }
    return fmt::format("; vs the stored `out`: max |diff| = {:.3g}{}", max_abs,
                       non_finite ? fmt::format(", {} non-finite", non_finite) : "");
}

void run(const RunArgs& a) {
    // The output replaces its path: naming the problem file (or a link to it) would replace the input by the result.
    std::error_code ec;
    if (std::filesystem::equivalent(a.problem, a.out, ec))
        fail(ErrorCode::kInvalidArgument,
             "--out " + a.out + " is the problem file itself; write the result to another path");
    const Device device = parse_device(a.device);
    const Backend& backend = ExpertsInterface::global().get(a.backend);  // unknown name: lists the valid ones
    if (auto why = backend.unavailable(device)) fail(ErrorCode::kUnsupported, *why);
    const int threads = resolve_threads(a.threads);

    ProblemFile file = load_problem_file(a.problem);
    Placed placed = place(file.problem, device);
    const ExpertsProblem& p = placed.problem;
    const int64_t shape[2] = {p.T(), p.H()};
    DeviceTensor out(p.dtype(), shape, 2, device);
    out.fill_bytes(0xff);  // NaN in every float dtype: a row the backend forgets to write shows up

    const auto t0 = std::chrono::steady_clock::now();
    ExpertsInterface::global().run(a.backend, p, out.view(), RunOptions{.num_threads = threads});
    device_synchronize(device);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    Tensor host(p.dtype(), {p.T(), p.H()});
    out.copy_to_host(host.view());
    save_output_file(a.out, host.view(), {{"backend", a.backend}, {"device", a.device}, {"problem", a.problem}});
    fmt::print("{}: {} on {} wrote `out` {} {} to {} in {:.3f} ms{}\n", a.problem, a.backend, a.device,
               host.view().shape_string(), dtype_name(p.dtype()), a.out, ms, compare(host.view(), file.expected));
}

}  // namespace

void add_experts_run_command(CLI::App& experts) {
    auto a = std::make_shared<RunArgs>();
    CLI::App* cmd = experts.add_subcommand("run", "Run one experts call from a problem file and write `out`");
    cmd->add_option("--problem", a->problem, "Problem file (safetensors; see `moex experts make-problem`)")->required();
    cmd->add_option("--backend", a->backend, "Backend name (see `moex backends`)")->required();
    cmd->add_option("--device", a->device, "cpu or cuda")->capture_default_str();
    cmd->add_option("--threads", a->threads, "CPU threads (0 = all hardware threads)")->capture_default_str();
    cmd->add_option("--out", a->out, "Output file: tensor `out` (T, H) in the dtype of hidden_states")->required();
    cmd->callback([a] { run(*a); });
}

}  // namespace moex::cli
