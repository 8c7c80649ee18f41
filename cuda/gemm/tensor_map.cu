// cuTensorMapEncodeTiled through the runtime's driver entry point (tensor_map.h).
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.h"
#include "cuda/gemm/tensor_map.h"

namespace moex::cuda {
namespace {

PFN_cuTensorMapEncodeTiled_v12000 encode_fn() {
    static PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* p = nullptr;
        cudaDriverEntryPointQueryResult q{};
        CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
        MOEX_REQUIRE(q == cudaDriverEntryPointSuccess && p, ErrorCode::kCuda,
                     "sm90 GEMM: cuTensorMapEncodeTiled not found in the driver");
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
    }();
    return fn;
}

}  // namespace

CUtensorMap make_tensor_map_128b(const void* base, CUtensorMapDataType type, uint32_t rank, const cuuint64_t* dims,
                                 const cuuint64_t* strides_bytes, const cuuint32_t* box) {
    return make_tensor_map(base, type, rank, dims, strides_bytes, box, CU_TENSOR_MAP_SWIZZLE_128B);
}

CUtensorMap make_tensor_map(const void* base, CUtensorMapDataType type, uint32_t rank, const cuuint64_t* dims,
                            const cuuint64_t* strides_bytes, const cuuint32_t* box, CUtensorMapSwizzle swizzle) {
    CUtensorMap map;
    const cuuint32_t unit[3] = {1, 1, 1};
    const CUresult r = encode_fn()(&map, type, rank, const_cast<void*>(base), dims, strides_bytes, box, unit,
                                   CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                   CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    MOEX_REQUIRE(r == CUDA_SUCCESS, ErrorCode::kCuda,
                 "sm90 GEMM: cuTensorMapEncodeTiled failed (" + std::to_string(static_cast<int>(r)) + ")");
    return map;
}

}  // namespace moex::cuda
