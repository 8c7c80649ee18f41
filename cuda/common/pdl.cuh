// Programmatic dependent launch (PDL, sm_90) for chains of small kernels (the decode step, a decode experts call).
//
// A kernel launched by launch_pdl may be scheduled while the kernel before it on the stream is still running. Every
// such kernel starts with pdl_enter(): it waits there until the previous kernel has completed and its writes are
// visible, and only then lets the next kernel's CTAs be scheduled. Two rules follow:
//   - Before pdl_enter a kernel writes nothing to global memory and reads only what is constant during the chain
//     (weights) or what a kernel at least two launches back wrote (the CTAs of kernel n + 1 start only after every CTA
//     of kernel n has passed its own wait, that is after kernel n - 1 completed).
//   - A kernel without pdl_enter must not be launched by launch_pdl (scripts/check_pdl.py checks it in CI).
// What it saves is the launch gap and the CTA start-up between the chain's kernels (the decode step on the 4-layer
// qwen3 bench checkpoint: 1,944 -> 1,984 tokens/s, bench/RESULTS.md H6). Asking L2 for the next kernel's weights
// before the wait (cp.async.bulk.prefetch) was measured and dropped: it took HBM bandwidth from the kernel still
// running (1,984 -> 1,875). MOEX_PDL=0 launches plainly (the waits and triggers are then no-ops) for A/B timing.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "cuda/common/check.h"
#include "cuda/common/device.h"

namespace moex::cuda {

__device__ __forceinline__ void pdl_enter() {
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// Launches kernel<<<grid, block, smem, stream>>>(args...) with programmatic stream serialization (plainly when
// MOEX_PDL=0). The kernel must call pdl_enter() (see above).
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
    if (!pdl_enabled()) {
        kernel<<<grid, block, smem, stream>>>(std::forward<Args>(args)...);
        MOEX_LAUNCH_CHECK();
        return;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid, cfg.blockDim = block, cfg.dynamicSmemBytes = smem, cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr.val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace moex::cuda
