// How many 2-CTA clusters of an sm_90a GEMM kernel can be resident (cluster_pairs.h).
#include "cuda/common/check.h"
#include "cuda/gemm/cluster_pairs.h"

namespace moex::cuda {

int query_resident_pairs(const void* kernel, unsigned threads, size_t smem) {
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    cfg.gridDim = dim3(2), cfg.blockDim = dim3(threads), cfg.dynamicSmemBytes = smem;
    cfg.attrs = &attr, cfg.numAttrs = 1;
    int n = 0;
    if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();  // clusters unavailable
        n = 0;
    }
    return n;
}

}  // namespace moex::cuda
