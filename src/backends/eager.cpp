// The `eager` backend: Hugging Face's reference loop. CPU kernels in src/cpu/, CUDA pipeline cuda/experts/eager.cu.
#include "src/backends/portable_backend.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_eager() {
    return std::make_shared<PortableBackend>(
        "eager", "Reference loop over the experts that are hit; each runs its tokens through two GEMMs.",
        &cpu::run_eager, cuda::Algo::kEager, /*cuda_syncs=*/true, /*cuda_quant=*/false, /*cuda_backward=*/true);
}

}  // namespace moex::backends
