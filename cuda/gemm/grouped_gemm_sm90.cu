// Host side of the sm_90a grouped GEMM: tensor maps, grid size, cluster launch, and the instantiation list.
// launch_grouped_gemm_sm90 = choose_grouped_gemm_sm90_config (sm90_config.cuh) + launch_grouped_gemm_sm90_with.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <mutex>
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/gemm/grouped_gemm.h"
#include "cuda/gemm/grouped_gemm_sm90.cuh"
#include "cuda/gemm/sm90_config.h"
#include "cuda/gemm/tensor_map.h"

namespace moex::cuda {
namespace {

using sm90::BIn;
using sm90::EpiKind;
using sm90::Sm90Params;

// Per kernel instantiation and device: the shared-memory opt-in (once) and how many 2-CTA clusters fit.
template <typename T, bool kBNMajor, EpiKind kEpi, BIn kB>
struct KernelSetup {
    static int max_pairs(int dev) {
        static std::mutex mu;
        static std::array<int, kMaxDevices> pairs{};
        static std::array<bool, kMaxDevices> done{};
        std::lock_guard<std::mutex> lock(mu);
        if (!done[dev]) {
            auto kernel = sm90::grouped_gemm_sm90_kernel<T, kBNMajor, kEpi, kB>;
            constexpr uint32_t kSmem = sm90::SmemLayout<kB>::bytes;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmem));
            cudaLaunchConfig_t cfg{};
            cudaLaunchAttribute attr{};
            attr.id = cudaLaunchAttributeClusterDimension;
            attr.val.clusterDim.x = 2, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
            cfg.gridDim = dim3(2), cfg.blockDim = dim3(sm90::kThreads), cfg.dynamicSmemBytes = kSmem;
            cfg.attrs = &attr, cfg.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, kernel, &cfg) != cudaSuccess) {
                (void)cudaGetLastError();  // clusters unavailable: this instantiation runs with cluster 1
                n = 0;
            }
            pairs[dev] = n;
            done[dev] = true;
        }
        return pairs[dev];
    }
};

template <typename T, bool kBNMajor, EpiKind kEpi, BIn kB>
bool run(const GroupedGemmArgs& a, const Sm90GemmConfig& cfg, int dev, cudaStream_t stream) {
    constexpr bool kFp8 = kB == BIn::kFp8, kFp4 = kB == BIn::kFp4;
    constexpr CUtensorMapDataType kType =
        std::is_same_v<T, __nv_bfloat16> ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16;
    // kFp8: A and B are e4m3 bytes; a box is still 128 bytes (128 values) x rows.
    constexpr CUtensorMapDataType kInType = kFp8 ? CU_TENSOR_MAP_DATA_TYPE_UINT8 : kType;
    constexpr uint64_t kEsz = kFp8 ? 1 : 2;
    constexpr cuuint32_t kBoxK = sm90::kStageK<kFp8>;
    constexpr bool kGate = sm90::is_gate_epi(kEpi);
    constexpr bool kCodes = kEpi == EpiKind::kGateE4m3;
    const uint64_t P = a.P, N = a.N, K = a.K, E = a.E;
    const uint64_t n_out = kGate ? N / 2 : N;
    const uint64_t d_esz = kEpi == EpiKind::kStoreF32 ? 4 : kCodes ? 1 : 2;

    Sm90Params p{};
    {
        const cuuint64_t dims[2] = {K, P}, strides[1] = {K * kEsz};
        const cuuint32_t box[2] = {kBoxK, sm90::kBlockM};
        p.map_a = make_tensor_map_128b(a.A, kInType, 2, dims, strides, box);
    }
    if (kFp4) {  // e2m1 bytes, two codes each; 32 bytes (64 codes) x 128 rows per box, converted in the kernel
        const cuuint64_t dims[3] = {K / 2, N, E}, strides[2] = {K / 2, N * K / 2};
        const cuuint32_t box[3] = {32, sm90::kBlockN / 2, 1};
        p.map_b =
            make_tensor_map(a.B, CU_TENSOR_MAP_DATA_TYPE_UINT8, 3, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_NONE);
    } else if (!kBNMajor) {
        const cuuint64_t dims[3] = {K, N, E}, strides[2] = {K * kEsz, N * K * kEsz};
        const cuuint32_t box[3] = {kBoxK, sm90::kBlockN / 2, 1};
        p.map_b = make_tensor_map_128b(a.B, kInType, 3, dims, strides, box);
    } else {
        const cuuint64_t dims[3] = {N, K, E}, strides[2] = {N * kEsz, K * N * kEsz};
        const cuuint32_t box[3] = {64, sm90::kBlockK, 1};
        p.map_b = make_tensor_map_128b(a.B, kType, 3, dims, strides, box);
    }
    {
        const CUtensorMapDataType d_type = kEpi == EpiKind::kStoreF32 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT32
                                           : kCodes                   ? CU_TENSOR_MAP_DATA_TYPE_UINT8
                                                                      : kType;
        const cuuint64_t dims[2] = {n_out, P}, strides[1] = {n_out * d_esz};
        const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / d_esz), sm90::kStoreBoxRows};  // one warp's rows
        p.map_d = make_tensor_map_128b(a.D, d_type, 2, dims, strides, box);
    }
    if constexpr (kEpi == EpiKind::kGateSave) {  // save as (P, 2, I) for [gate | up] columns, else (P, 1, N)
        const uint64_t width = a.gate.concatenated ? N / 2 : N;
        const cuuint64_t dims[3] = {width, N / width, P}, strides[2] = {width * 2, N * 2};
        const cuuint32_t box[3] = {64, 1, sm90::kStoreBoxRows};
        p.map_s = make_tensor_map_128b(a.save, kType, 3, dims, strides, box);
        p.epi.save = static_cast<uint8_t*>(a.save);
        p.epi.save_row_bytes = static_cast<int32_t>(N * 2);
    }
    p.epi.bias = a.bias;
    p.epi.row_scale = a.row_scale;
    p.epi.expert_scale = a.expert_scale;
    p.epi.P = static_cast<int32_t>(P);
    p.epi.N = static_cast<int32_t>(N);
    p.epi.n_half = static_cast<int32_t>(N / 2);
    p.epi.gate = a.gate;
    p.epi.d_scales = a.d_scales;
    p.epi.d_scale_cols = static_cast<int32_t>(n_out / 128);
    p.epi.D = a.D;
    p.epi.d_row_bytes = static_cast<int32_t>(n_out * d_esz);
    p.m_tile_expert = a.m_tile_expert;
    p.num_m_tiles = a.num_m_tiles;
    p.expert_row_start = a.expert_row_start;
    p.expert_row_count = a.expert_row_count;
    p.m_tile_row0 = a.m_tile_row0;
    p.expert_tile_start = cfg.expert_groups ? a.expert_tile_start : nullptr;
    p.K = static_cast<int32_t>(K);
    p.E = static_cast<int32_t>(E);
    p.num_n_tiles = static_cast<int32_t>(kGate && a.gate.concatenated ? (N / 2 + 127) / 128 : (N + 255) / 256);
    p.max_m_tiles = static_cast<int32_t>(a.max_m_tiles);
    if constexpr (kB != BIn::kDtype) p.b_scales = a.b_scales;
    if constexpr (kFp8) {
        p.a_scales = a.a_scales;
        p.k_slice = static_cast<int32_t>(promotion_group(a.b_scales, a.K));
        p.a_slices = static_cast<int32_t>(a.K / p.k_slice);
    }

    // Persistent grid: one CTA per SM (or per resident 2-CTA cluster slot), never more than the tile bound.
    const DeviceState& info = device_state();
    const int64_t tile_bound = std::max<int64_t>(1, a.max_m_tiles * p.num_n_tiles);
    int cluster = cfg.cluster_m == 2 && !kFp4 ? 2 : 1;  // kFp4: each CTA converts its own B
    int ctas = cfg.max_ctas > 0 ? std::min(cfg.max_ctas, info.sm_count) : info.sm_count;
    const int pairs = KernelSetup<T, kBNMajor, kEpi, kB>::max_pairs(dev);  // also opts in to the shared memory
    if (cluster == 2 && pairs < 1) cluster = 1;
    if (cluster == 2)
        ctas = 2 * static_cast<int>(std::min<int64_t>({pairs, ctas / 2, (tile_bound + 1) / 2}));
    else
        ctas = static_cast<int>(std::min<int64_t>(ctas, tile_bound));
    ctas = std::max(ctas, cluster);
    p.cluster_m = cluster;
    p.group_m = std::max(1, cfg.group_m);
    if (cluster == 2 && p.group_m % 2 != 0) ++p.group_m;  // pairs must not straddle rasterisation groups

    cudaLaunchConfig_t lc{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = cluster, attr.val.clusterDim.y = 1, attr.val.clusterDim.z = 1;
    lc.gridDim = dim3(ctas), lc.blockDim = dim3(sm90::kThreads), lc.dynamicSmemBytes = sm90::SmemLayout<kB>::bytes;
    lc.stream = stream, lc.attrs = &attr, lc.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&lc, sm90::grouped_gemm_sm90_kernel<T, kBNMajor, kEpi, kB>, p));
    return true;
}

template <typename T, bool kBNMajor, BIn kB = BIn::kDtype>
bool dispatch_epilogue(const GroupedGemmArgs& a, const Sm90GemmConfig& c, int dev, cudaStream_t s) {
    if (a.epilogue == Epilogue::kGate) return run<T, kBNMajor, EpiKind::kGate, kB>(a, c, dev, s);
    if (a.epilogue == Epilogue::kGateSave) {  // built for the 16-bit kernels only (sm90_why_not)
        if constexpr (kB == BIn::kDtype) return run<T, kBNMajor, EpiKind::kGateSave, kB>(a, c, dev, s);
        return false;
    }
    if (a.epilogue == Epilogue::kGateE4m3) {  // built for the FP8 kernel only (sm90_why_not)
        if constexpr (kB == BIn::kFp8) return run<T, kBNMajor, EpiKind::kGateE4m3, kB>(a, c, dev, s);
        return false;
    }
    return a.d_f32 ? run<T, kBNMajor, EpiKind::kStoreF32, kB>(a, c, dev, s)
                   : run<T, kBNMajor, EpiKind::kStore, kB>(a, c, dev, s);
}

template <typename T>
bool dispatch_layout(const GroupedGemmArgs& a, const Sm90GemmConfig& c, int dev, cudaStream_t s) {
    if (a.a_fp8) return dispatch_epilogue<T, false, BIn::kFp8>(a, c, dev, s);
    if (is_fp4(a.b_scales.format)) {  // bf16 only (sm90_why_not)
        if constexpr (std::is_same_v<T, __nv_bfloat16>) return dispatch_epilogue<T, false, BIn::kFp4>(a, c, dev, s);
        return false;
    }
    return a.b_n_major ? dispatch_epilogue<T, true>(a, c, dev, s) : dispatch_epilogue<T, false>(a, c, dev, s);
}

// The launch once the arguments and the configuration are known to be good.
bool launch_checked(const GroupedGemmArgs& args, const Sm90GemmConfig& config, const DeviceState& dev, void* stream) {
    if (args.P == 0 || args.max_m_tiles == 0) return true;  // nothing to compute
    const auto s = static_cast<cudaStream_t>(stream);
    return args.dtype == DType::kBF16 ? dispatch_layout<__nv_bfloat16>(args, config, dev.id, s)
                                      : dispatch_layout<__half>(args, config, dev.id, s);
}

}  // namespace

bool launch_grouped_gemm_sm90_with(const GroupedGemmArgs& args, const Sm90GemmConfig& config, void* stream) {
    const DeviceState& dev = device_state();
    if (!dev.sm90 || config.why_not != nullptr || sm90_why_not(args) != nullptr) return false;
    return launch_checked(args, config, dev, stream);
}

const char* sm90_refusal(const GroupedGemmArgs& args) {
    if (!device_state().sm90) return "the device is not an sm_90 (Hopper) GPU";
    return sm90_why_not(args);
}

bool grouped_gemm_takes_fp8(const GroupedGemmArgs& args) {
    const DeviceState& dev = device_state();
    GroupedGemmArgs a = args;
    a.a_fp8 = true;
    return dev.sm90 && !gemm_forced_portable() && sm90_why_not(a) == nullptr;
}

bool launch_grouped_gemm_sm90(const GroupedGemmArgs& args, void* stream) {
    const DeviceState& dev = device_state();
    if (!dev.sm90) return false;
    Sm90GemmConfig config = choose_grouped_gemm_sm90_config(args, dev.sm_count);
    if (config.why_not != nullptr) return false;
    // Tuning sweeps (moex bench, no rebuild): MOEX_SM90_CLUSTER=1|2, MOEX_SM90_GROUP_M=1..4096 and
    // MOEX_SM90_EXPERT_GROUPS=0|1 replace the chooser's cluster, rasterisation group and group alignment.
    config.cluster_m = env_int_in("MOEX_SM90_CLUSTER", 1, 2, config.cluster_m);
    config.group_m = env_int_in("MOEX_SM90_GROUP_M", 1, 4096, config.group_m);
    config.expert_groups = env_int_in("MOEX_SM90_EXPERT_GROUPS", 0, 1, config.expert_groups ? 1 : 0) != 0;
    return launch_checked(args, config, dev, stream);
}

// Instantiations: {bf16, f16} x {B (E, N, K), B (E, K, N), FP8 (E, N, K)} and bf16 x FP4 (E, N, K / 2) x {store
// dtype, store f32, gate}, the 16-bit kernels' gate that keeps the pre-activation, and the FP8 kernel's gate into e4m3
// codes.
#define MOEX_SM90_INSTANTIATE(T, BN, B)                                                    \
    template __global__ void sm90::grouped_gemm_sm90_kernel<T, BN, EpiKind::kStore, B>(    \
        const __grid_constant__ Sm90Params);                                               \
    template __global__ void sm90::grouped_gemm_sm90_kernel<T, BN, EpiKind::kStoreF32, B>( \
        const __grid_constant__ Sm90Params);                                               \
    template __global__ void sm90::grouped_gemm_sm90_kernel<T, BN, EpiKind::kGate, B>(     \
        const __grid_constant__ Sm90Params);
MOEX_SM90_INSTANTIATE(__nv_bfloat16, false, BIn::kDtype)
MOEX_SM90_INSTANTIATE(__nv_bfloat16, true, BIn::kDtype)
MOEX_SM90_INSTANTIATE(__half, false, BIn::kDtype)
MOEX_SM90_INSTANTIATE(__half, true, BIn::kDtype)
MOEX_SM90_INSTANTIATE(__nv_bfloat16, false, BIn::kFp8)
MOEX_SM90_INSTANTIATE(__half, false, BIn::kFp8)
MOEX_SM90_INSTANTIATE(__nv_bfloat16, false, BIn::kFp4)
#undef MOEX_SM90_INSTANTIATE
#define MOEX_SM90_INSTANTIATE_SAVE(T, BN)                                                            \
    template __global__ void sm90::grouped_gemm_sm90_kernel<T, BN, EpiKind::kGateSave, BIn::kDtype>( \
        const __grid_constant__ Sm90Params);
MOEX_SM90_INSTANTIATE_SAVE(__nv_bfloat16, false)
MOEX_SM90_INSTANTIATE_SAVE(__nv_bfloat16, true)
MOEX_SM90_INSTANTIATE_SAVE(__half, false)
MOEX_SM90_INSTANTIATE_SAVE(__half, true)
#undef MOEX_SM90_INSTANTIATE_SAVE
template __global__ void sm90::grouped_gemm_sm90_kernel<__nv_bfloat16, false, EpiKind::kGateE4m3, BIn::kFp8>(
    const __grid_constant__ Sm90Params);
template __global__ void sm90::grouped_gemm_sm90_kernel<__half, false, EpiKind::kGateE4m3, BIn::kFp8>(
    const __grid_constant__ Sm90Params);

}  // namespace moex::cuda
