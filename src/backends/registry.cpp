// ExpertsInterface: the registry. The built-in backends are listed here, one line each, and nowhere else; plus the
// Backend defaults and the run-time check every backend makes first.
#include <algorithm>

#include "moex/backend.h"
#include "moex/error.h"

namespace moex {
namespace backends {  // the built-in backends, each made in its own file of src/backends/

std::shared_ptr<const Backend> make_eager();
std::shared_ptr<const Backend> make_batched_mm();
std::shared_ptr<const Backend> make_grouped_mm();
std::shared_ptr<const Backend> make_deepgemm();
std::shared_ptr<const Backend> make_deepgemm_megamoe();
std::shared_ptr<const Backend> make_sonicmoe();

}  // namespace backends

namespace {

// A run() with RunOptions::saved: the backend must keep the activations for this problem, into valid views.
void check_saved(const Backend& b, const ExpertsProblem& problem, const ExpertsSaved& saved) {
    if (auto why = b.save_refusal(problem))
        fail(ErrorCode::kUnsupported,
             "experts backend `" + std::string(b.name()) + "` cannot keep the forward's activations here: " + *why);
    validate_saved(problem, saved);
}

}  // namespace

ExpertsInterface& ExpertsInterface::global() {
    static ExpertsInterface* registry = [] {
        auto* r = new ExpertsInterface();
        r->register_backend(backends::make_eager());
        r->register_backend(backends::make_batched_mm());
        r->register_backend(backends::make_grouped_mm());
        r->register_backend(backends::make_deepgemm());
        r->register_backend(backends::make_deepgemm_megamoe());
        r->register_backend(backends::make_sonicmoe());
        return r;
    }();
    return *registry;
}

void ExpertsInterface::register_backend(std::shared_ptr<const Backend> backend) {
    MOEX_REQUIRE(backend != nullptr, ErrorCode::kInvalidArgument, "register_backend: null backend");
    MOEX_REQUIRE(!backend->name().empty(), ErrorCode::kInvalidArgument, "register_backend: empty backend name");
    for (auto& b : backends_) {
        if (b->name() == backend->name()) {
            b = std::move(backend);
            return;
        }
    }
    backends_.push_back(std::move(backend));
}

const Backend* ExpertsInterface::find(std::string_view name) const {
    for (const auto& b : backends_)
        if (b->name() == name) return b.get();
    return nullptr;
}

const Backend& ExpertsInterface::get(std::string_view name) const {
    const Backend* b = find(name);
    if (b == nullptr)
        fail(ErrorCode::kNotFound,
             "`" + std::string(name) + "` is not a valid experts implementation; valid names: " + valid_names_text());
    return *b;
}

std::vector<std::string> ExpertsInterface::names() const {
    std::vector<std::string> out;
    for (const auto& b : backends_) out.emplace_back(b->name());
    return out;
}

std::string ExpertsInterface::valid_names_text() const {
    std::string s;
    for (const auto& b : backends_) s += (s.empty() ? "" : ", ") + std::string(b->name());
    return s;
}

void ExpertsInterface::run(std::string_view name, const ExpertsProblem& problem, const TensorView& out,
                           const RunOptions& options) const {
    const Backend& b = get(name);
    if (options.saved) check_saved(b, problem, *options.saved);  // a backend's own run() may not look at saved
    b.run(problem, out, options);
}

void ExpertsInterface::backward(std::string_view name, const ExpertsProblem& problem, const TensorView& grad_out,
                                const ExpertsGrads& grads, const RunOptions& options) const {
    get(name).backward(problem, grad_out, grads, options);
}

std::string ExpertsInterface::backward_names_text(Device device) const {
    std::string s;
    for (const auto& b : backends_)
        if (b->has_backward(device)) s += (s.empty() ? "" : ", ") + std::string(b->name());
    return s.empty() ? "none yet" : s;
}

void Backend::backward(const ExpertsProblem& problem, const TensorView&, const ExpertsGrads&, const RunOptions&) const {
    const Device d = problem.device();
    fail(ErrorCode::kUnsupported,
         "experts backend `" + std::string(name()) + "` has no backward on " + std::string(device_name(d)) +
             "; backends with one there: " + ExpertsInterface::global().backward_names_text(d));
}

void Backend::check_runnable(const ExpertsProblem& problem, const TensorView& out, const RunOptions& options) const {
    problem.validate();
    problem.validate_output(out);
    if (auto why = why_not(problem)) fail(ErrorCode::kUnsupported, *why);
    if (options.saved) check_saved(*this, problem, *options.saved);
}

std::optional<std::string> Backend::save_refusal(const ExpertsProblem& problem) const {
    return std::string(name()) + " keeps nothing for its backward on " + std::string(device_name(problem.device())) +
           " (the backward recomputes)";
}

std::optional<std::string> Backend::unavailable(Device device) const {
    const auto devs = devices();
    if (std::find(devs.begin(), devs.end(), device) == devs.end())
        return std::string(name()) + " runs on " + (device == Device::kCPU ? "CUDA only" : "CPU only");
    return std::nullopt;
}

std::optional<std::string> Backend::why_not(const ExpertsProblem& problem) const {
    if (auto why = unavailable(problem.device())) return why;
    const auto types = dtypes();
    if (std::find(types.begin(), types.end(), problem.dtype()) == types.end())
        return std::string(name()) + " does not support " + std::string(dtype_name(problem.dtype())) + " activations";
    if (problem.quant.enabled()) {
        const auto formats = quant_formats(problem.device());
        if (std::find(formats.begin(), formats.end(), problem.quant.format) == formats.end())
            return std::string(name()) + " does not take quantized (" +
                   std::string(quant_format_name(problem.quant.format)) + ") experts on " +
                   std::string(device_name(problem.device())) + "; dequantize them or pick a backend that does";
    }
    return std::nullopt;
}

}  // namespace moex
