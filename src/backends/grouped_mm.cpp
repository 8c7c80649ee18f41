// The `grouped_mm` backend (prefill). CPU kernels in src/cpu/, CUDA pipeline cuda/experts/grouped.cu.
#include "src/backends/portable_backend.h"
#include "src/cpu/experts_cpu.h"

namespace moex::backends {

std::shared_ptr<const Backend> make_grouped_mm() {
    return std::make_shared<PortableBackend>(
        "grouped_mm",
        "Sorts rows by expert and runs grouped GEMMs over per-expert offsets, then a deterministic combine; for "
        "prefill.",
        &cpu::run_grouped, cuda::Algo::kGrouped, /*cuda_syncs=*/false, /*cuda_quant=*/true, /*cuda_backward=*/true);
}

}  // namespace moex::backends
