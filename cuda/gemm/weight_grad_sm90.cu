// Host side of the sm_90a weight-gradient GEMM (weight_grad.h, weight_grad_sm90.cuh): checks, tensor maps, launch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <climits>
#include <mutex>
#include <string>
#include <type_traits>

#include "cuda/common/align.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/gemm/tensor_map.h"
#include "cuda/gemm/weight_grad.h"
#include "cuda/gemm/weight_grad_sm90.cuh"

namespace moex::cuda {
namespace {

namespace wg = sm90::wgrad;

// Per instantiation and device: the shared-memory opt-in (once) and how many 2-CTA clusters can be resident.
template <typename T>
int max_pairs(int dev) {
    static std::mutex mu;
    static std::array<int, kMaxDevices> pairs{};
    static std::array<bool, kMaxDevices> done{};
    std::lock_guard<std::mutex> lock(mu);
    if (!done[size_t(dev)]) {
        CUDA_CHECK(cudaFuncSetAttribute(wg::weight_grad_sm90_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        wg::kSmemBytes));
        cudaLaunchConfig_t cfg{};
        cudaLaunchAttribute attr{};
        attr.id = cudaLaunchAttributeClusterDimension;
        attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
        cfg.gridDim = dim3(2), cfg.blockDim = dim3(wg::kThreads), cfg.dynamicSmemBytes = wg::kSmemBytes;
        cfg.attrs = &attr, cfg.numAttrs = 1;
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, wg::weight_grad_sm90_kernel<T>, &cfg) != cudaSuccess) {
            (void)cudaGetLastError();  // clusters unavailable: pairs are not used
            n = 0;
        }
        pairs[size_t(dev)] = n;
        done[size_t(dev)] = true;
    }
    return pairs[size_t(dev)];
}

template <typename T>
void run(const WeightGradGemmArgs& a, const DeviceState& dev, cudaStream_t stream) {
    const int pairs = max_pairs<T>(dev.id);  // also opts in to the shared memory
    constexpr CUtensorMapDataType kType =
        std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    wg::Params p{};
    const cuuint32_t box[2] = {64, wg::kBlockRows};
    {
        const cuuint64_t dims[2] = {cuuint64_t(a.M), cuuint64_t(a.P)}, strides[1] = {cuuint64_t(a.M) * 2};
        p.map_a = make_tensor_map_128b(a.A, kType, 2, dims, strides, box);
    }
    {
        const cuuint64_t dims[2] = {cuuint64_t(a.N), cuuint64_t(a.P)}, strides[1] = {cuuint64_t(a.N) * 2};
        p.map_b = make_tensor_map_128b(a.B, kType, 2, dims, strides, box);
    }
    {
        const cuuint64_t dims[2] = {cuuint64_t(a.N), cuuint64_t(a.E * a.M)}, strides[1] = {cuuint64_t(a.N) * 2};
        const cuuint32_t store_box[2] = {64, sm90::kStoreBoxRows};  // one warp's rows (sm90_epilogue.cuh)
        p.map_c = make_tensor_map_128b(a.C, kType, 2, dims, strides, store_box);
    }
    p.C = a.C;
    p.expert_row_start = a.expert_row_start;
    p.expert_row_count = a.expert_row_count;
    p.E = static_cast<int32_t>(a.E);
    p.M = static_cast<int32_t>(a.M);
    p.N = static_cast<int32_t>(a.N);
    p.m_tiles = static_cast<int32_t>(ceil_div(a.M, wg::kBlockM));
    p.n_tiles = static_cast<int32_t>(ceil_div(a.N, wg::kBlockN));
    const int64_t tiles = a.E * p.m_tiles * p.n_tiles;
    // Pairs need an even M tile count per expert (a pair's two tiles then always share the expert and the N tile,
    // so the two CTAs wait on the same row blocks) and room for at least one resident pair; MOEX_WGRAD_CLUSTER=1
    // turns them off (A/B).
    const bool off = env_is("MOEX_WGRAD_CLUSTER", "1");
    p.cluster = !off && p.m_tiles % 2 == 0 && pairs >= 1 && dev.sm_count >= 2 ? 2 : 1;
    int ctas = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(dev.sm_count, tiles)));
    if (p.cluster == 2) ctas = 2 * static_cast<int>(std::min<int64_t>({pairs, dev.sm_count / 2, tiles / 2}));
    cudaLaunchConfig_t lc{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = unsigned(p.cluster), attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    lc.gridDim = dim3(unsigned(ctas)), lc.blockDim = dim3(wg::kThreads), lc.dynamicSmemBytes = wg::kSmemBytes;
    lc.stream = stream, lc.attrs = &attr, lc.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&lc, wg::weight_grad_sm90_kernel<T>, p));
}

}  // namespace

const char* weight_grad_sm90_why_not(const WeightGradGemmArgs& a) {
    if (!device_state().sm90) return "the device is not an sm_90 (Hopper) GPU";
    if (a.dtype != DType::kBF16 && a.dtype != DType::kF16) return "the weight-gradient kernel takes bf16/f16 only";
    if (a.M <= 0 || a.N <= 0 || a.E <= 0 || a.P <= 0) return "empty or negative dimension";
    if (a.M % 8 != 0 || a.N % 8 != 0) return "M and N must be multiples of 8 (16-byte TMA row stride)";
    if (a.M > INT32_MAX || a.N > INT32_MAX || a.P > INT32_MAX || a.E > INT32_MAX || a.E * a.M > INT32_MAX ||
        a.E * ceil_div(a.M, wg::kBlockM) * ceil_div(a.N, wg::kBlockN) > INT32_MAX)
        return "dimension or tile count past 2^31";
    if (!a.A || !a.B || !a.C || !a.expert_row_start || !a.expert_row_count) return "missing pointer";
    if (!is_aligned16(a.A) || !is_aligned16(a.B) || !is_aligned16(a.C)) return "A, B and C must be 16-byte aligned";
    return nullptr;
}

void launch_weight_grad_sm90(const WeightGradGemmArgs& a, void* stream) {
    const char* why = weight_grad_sm90_why_not(a);
    MOEX_REQUIRE(why == nullptr, ErrorCode::kUnsupported,
                 std::string("sm90 weight-gradient GEMM: ") + (why ? why : ""));
    const DeviceState& dev = device_state();
    const auto s = as_stream(stream);
    if (a.dtype == DType::kBF16)
        run<__nv_bfloat16>(a, dev, s);
    else
        run<__half>(a, dev, s);
}

}  // namespace moex::cuda
