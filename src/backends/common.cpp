// Checks shared by the built-in backends, and the CUDA availability probe.
#include "moex/error.h"
#include "src/backends/builtin.h"
#if MOEX_WITH_CUDA
#include "cuda/launch.h"
#endif

namespace moex::backends {

void check_runnable(const Backend& backend, const ExpertsProblem& problem, const TensorView& out) {
    problem.validate();
    problem.validate_output(out);
    if (auto why = backend.why_not(problem)) fail(ErrorCode::kUnsupported, *why);
}

std::optional<std::string> cuda_unavailable() {
#if MOEX_WITH_CUDA
    std::string why;
    if (!cuda::device_ready(&why)) return why;
    return std::nullopt;
#else
    return std::string("this build of moex has no CUDA support (configure with MOEX_CUDA=ON and nvcc)");
#endif
}

}  // namespace moex::backends
