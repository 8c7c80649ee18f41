// One checkpoint tensor on its way into a model weight: the shape config.json implies (each dimension as a product of
// named config fields, so that a mismatch names them), the dtype/shape check, and the exact conversion of
// f32/bf16/f16 bytes into the run dtype at an offset of a destination buffer. Encoded (quantized) tensors: quant.h.
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
// "(moe_intermediate_size=16, hidden_size=32)": every named factor once, in order (for messages).
std::string config_fields(const ExpectedShape& shape);

// kFormat unless the tensor is F32, BF16 or F16 with exactly the expected shape:
//   "PATH: model.layers.3.mlp.experts.7.up_proj.weight has shape (16, 30), expected (16, 32) from config.json
//    (moe_intermediate_size=16, hidden_size=32)"
// F8_E4M3 is refused naming the quantization_config it needs (encoded tensors are checked by quant.h).
void check_source(const SafetensorsFile& file, const SafetensorsInfo& info, const ExpectedShape& expected);

// dst[dst_offset + i] = src[i] for the n elements of `src` (little-endian f32 | bf16 | f16 bytes, any alignment),
// rounded to `dst_dtype` (f32 | bf16 | f16) with the exact conversions of moex/dtype.h.
void convert_into(std::span<const uint8_t> src, DType src_dtype, void* dst, DType dst_dtype, int64_t dst_offset);

}  // namespace moex::model
