// One checkpoint tensor on its way into a model weight: the shape config.json implies (each dimension as a product of
// named config fields, so that a mismatch names them), the dtype/shape check, and the exact conversion of
// f32/bf16/f16 bytes into the run dtype at an offset of a destination buffer.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "moex/safetensors.h"

namespace moex::model {

struct ConfigFactor {
    std::string field;  // "hidden_size", "text_config.head_dim", or "" for a literal (the 2 of 2*I)
    int64_t value;
};
using ExpectedDim = std::vector<ConfigFactor>;  // the product of its factors
using ExpectedShape = std::vector<ExpectedDim>;

int64_t dim_size(const ExpectedDim& dim);  // checked product
std::vector<int64_t> sizes_of(const ExpectedShape& shape);

// kFormat unless the tensor is F32, BF16 or F16 with exactly the expected shape:
//   "PATH: model.layers.3.mlp.experts.7.up_proj.weight has shape (16, 30), expected (16, 32) from config.json
//    (moe_intermediate_size=16, hidden_size=32)"
// With `fp8` (a quantization_config fp8 checkpoint) F8_E4M3 is accepted too.
void check_source(const SafetensorsFile& file, const SafetensorsInfo& info, const ExpectedShape& expected,
                  bool fp8 = false);

// Checks the `_scale_inv` companion of an F8_E4M3 tensor of `shape` ((N, K), or (E, N, K) for fused experts):
// F32, F8_E8M0 or U8 (ue8m0 bytes), shape (ceil(N / bn), ceil(K / bk)) (fused gate_up: at least 2 rows), or one
// value per tensor (per expert) for 0 x 0 blocks. kFormat naming both tensors otherwise.
void check_scales(const SafetensorsFile& file, const SafetensorsInfo& scales, const std::string& weight,
                  const std::vector<int64_t>& shape, int64_t block_n, int64_t block_k);

// dst[dst_offset + i] = e4m3(q[i]) * scale(i) for the F8_E4M3 tensor q of `shape`, rounded once to dst_dtype.
void dequantize_into(std::span<const uint8_t> q, const std::vector<int64_t>& shape, std::span<const uint8_t> scales,
                     DType scale_dtype, const std::vector<int64_t>& scale_shape, int64_t block_n, int64_t block_k,
                     void* dst, DType dst_dtype, int64_t dst_offset);

// dst[dst_offset + i] = src[i] for the n elements of `src` (little-endian f32 | bf16 | f16 bytes, any alignment),
// rounded to `dst_dtype` (f32 | bf16 | f16) with the exact conversions of moex/dtype.h.
void convert_into(std::span<const uint8_t> src, DType src_dtype, void* dst, DType dst_dtype, int64_t dst_offset);

}  // namespace moex::model
