// TMA tensor maps for the sm_90a GEMM kernels (grouped_gemm_sm90.cu, weight_grad_sm90.cu): the driver's
// cuTensorMapEncodeTiled reached through cudaGetDriverEntryPoint, so nothing links libcuda.
#pragma once

#include <cuda.h>

#include <cstdint>

namespace moex::cuda {

// A row-major tensor of `rank` dims (innermost first; strides_bytes has rank - 1 entries), read or written in boxes of
// `box` elements with the 128-byte swizzle (the box's inner extent is at most 128 bytes); out-of-bounds elements load
// as zero and are not stored. Throws moex::Error(kCuda) when the driver refuses the description.
CUtensorMap make_tensor_map_128b(const void* base, CUtensorMapDataType type, uint32_t rank, const cuuint64_t* dims,
                                 const cuuint64_t* strides_bytes, const cuuint32_t* box);
// The same with another swizzle (CU_TENSOR_MAP_SWIZZLE_NONE: the box lands row after row, unpermuted).
CUtensorMap make_tensor_map(const void* base, CUtensorMapDataType type, uint32_t rank, const cuuint64_t* dims,
                            const cuuint64_t* strides_bytes, const cuuint32_t* box, CUtensorMapSwizzle swizzle);

}  // namespace moex::cuda
