// The `eager` backend: CPU kernels in src/cpu/, CUDA kernels behind cuda/launch.h.
#include "src/backends/builtin.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_eager() {
    return std::make_shared<PortableBackend>(
        "eager", "Reference loop over the experts that are hit; each runs its tokens through two GEMMs.",
        &cpu::run_eager, CudaAlgo::kEager, /*cuda_syncs=*/true);
}

}  // namespace moex::backends
