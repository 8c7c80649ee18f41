// Encoded (pre-quantized) checkpoint tensors: the stored form a tensor has under its quantization_config, its
// companions found and checked against the shape config.json implies, and its decoding into the run dtype.
//   fp8 e4m3      `W` F8_E4M3 (N, K)            `W_scale_inv` F32 | F8_E8M0 | U8 (ceil(N / bn), ceil(K / bk))
//   fp8 + fp4     `W` I8 | U8 (N, K / 2)        `W_scale_inv` F8_E8M0 | U8 (N, K / 32)        (expert_dtype fp4)
//   mxfp4         `P_blocks` U8 (E, N, K/32, 16) `P_scales` U8 (E, N, K / 32)                  (gpt-oss experts)
//   nvfp4         `W` U8 (N, K / 2)             `W_scale` F8_E4M3 (N, K / 16), `W_scale_2` F32 (1)  (modelopt)
// Fused experts add the leading E. e2m1 pairs: the low nibble is the even k. ue8m0 bytes are 2^(b - 127).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moex/model_config.h"
#include "src/model/weights/files.h"
#include "src/model/weights/tensor.h"

namespace moex::model {

struct PieceQuant {
    QuantFormat format = QuantFormat::kNone;  // kNone: a float tensor
    CheckpointFiles::Found scale{};           // the block / group scales
    CheckpointFiles::Found global{};          // nvfp4's weight_scale_2
    int64_t block_n = 0, block_k = 0;         // fp8 (0 x 0: one scale per tensor)
    DType scale_dtype() const;                // f32 | ue8m0 (F8_E8M0 and U8) | e4m3
};

// Checks tensor `found` against `shape` ((N, K), or (E, N, K) for fused experts) and, when `quant` says it is
// stored encoded, finds and checks its companions. kFormat for a wrong dtype or shape, kNotFound for a missing
// companion, kUnsupported for a K the FP4 groups do not divide; each names the tensors.
PieceQuant check_piece(CheckpointFiles& files, const CheckpointQuant& quant, const CheckpointFiles::Found& found,
                       const ExpectedShape& shape);

// dst[dst_offset + i] = element i of the encoded weight of logical `shape`, code * (scale * global) rounded once to
// f32 (as moex's kernels decode it), then to dst_dtype (f32 | bf16 | f16).
void dequantize_into(const CheckpointFiles::Found& weight, const PieceQuant& q, const std::vector<int64_t>& shape,
                     void* dst, DType dst_dtype, int64_t dst_offset);

}  // namespace moex::model
