// The `batched_mm` backend (decode). CPU kernels in src/cpu/, CUDA pipeline cuda/experts/batched.cu.
#include "src/backends/portable_backend.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_batched_mm() {
    return std::make_shared<PortableBackend>(
        "batched_mm",
        "One product per (token, slot), reading each touched expert's weights once (never duplicated); for decode.",
        &cpu::run_batched, cuda::Algo::kBatched, /*cuda_syncs=*/false, /*cuda_quant=*/true, /*cuda_backward=*/true);
}

}  // namespace moex::backends
