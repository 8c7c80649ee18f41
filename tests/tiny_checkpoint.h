// Tiny random checkpoints for tests, written the way the hub ships them: config.json (+ generation_config.json) and
// model.safetensors or model-0000i-of-0000n.safetensors shards with model.safetensors.index.json. Weights are drawn
// once per (options without format fields, seed), so per-expert / fused, sharded / single and composite / plain
// checkpoints of the same seed hold the same model (bf16 ones rounded).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moex/device.h"
#include "moex/dtype.h"
#include "moex/model_config.h"
#include "moex/tensor.h"

namespace moex::test {

struct TinyCheckpointOptions {
    Architecture arch = Architecture::kQwen3Moe;
    DType dtype = DType::kF32;  // stored dtype: f32 | bf16 | f16
    bool per_expert = true;    // hub format experts.N.gate_proj/up_proj/down_proj (Mixtral: block_sparse_moe w1/w3/w2);
                               // false: transformers 5's fused mlp.experts.gate_up_proj (E, 2I, H), down_proj (E, H, I)
    int shards = 1;            // > 1: sharded with an index
    bool composite = false;    // model_type "tiny_vlm" with text_config + vision_config; model.language_model.*
    bool tied = false;         // tie_word_embeddings, no lm_head.weight
    bool dense_layer = false;  // qwen*: mlp_only_layers = [1], a dense-MLP layer 1
    uint64_t seed = 0;
    // Pre-quantized checkpoints, every linear its quantizer converts stored encoded (attention, MLPs, experts; not
    // embeddings, norms, the router, shared_expert_gate or lm_head, which keep `dtype`):
    //   fp8_block > 0         quantization_config fp8 (weight_block_size fp8_block x fp8_block): F8_E4M3 with
    //                         `_scale_inv` (F32, or F8_E8M0 with fp8_ue8m0);
    //   + fp4 = kMxfp4        expert_dtype fp4: the experts as I8 e2m1 pairs with F8_E8M0 `_scale_inv` per 32;
    //   fp4 = kMxfp4 alone    gpt-oss's quant_method mxfp4: fused experts as `_blocks` + `_scales` (per_expert
    //                         false), every other linear float;
    //   fp4 = kNvfp4          modelopt NVFP4: U8 `weight`, F8_E4M3 `weight_scale` per 16, F32 `weight_scale_2`.
    // fp8_dequantized writes the decoded values as f32 instead (no quantization_config): the model the encoded one
    // holds. FP4 needs K (hidden, moe_intermediate, ...) to be a multiple of 32 (mxfp4) or 16 (nvfp4).
    int64_t fp8_block = 0;
    bool fp8_ue8m0 = false;
    QuantFormat fp4 = QuantFormat::kNone;
    bool fp8_dequantized = false;
    bool quantized() const { return fp8_block > 0 || fp4 != QuantFormat::kNone; }

    int64_t vocab = 64, hidden = 32, layers = 2, heads = 4, kv_heads = 2, head_dim = 8;
    int64_t experts = 4, top_k = 2, moe_intermediate = 16;
    int64_t shared_intermediate = 24;  // qwen2_moe's shared expert
    int64_t intermediate = 48;         // qwen dense-MLP layers
};

// The config.json text the writer writes.
std::string tiny_config_json(const TinyCheckpointOptions& options);

// Creates `dir` (and parents) and writes the checkpoint into it.
void write_tiny_checkpoint(const std::string& dir, const TinyCheckpointOptions& options);

// "qwen3_moe_bf16_fused_3shards_composite_tied_dense": for test names.
std::string tiny_checkpoint_name(const TinyCheckpointOptions& options);

// The checkpoint's tensors in the hub's per-expert form, f32, before the stored dtype's rounding, in write order.
struct TinyTensor {
    std::string name;  // the plain-model name ("model.layers.0.mlp.experts.1.up_proj.weight", "lm_head.weight")
    Tensor values;     // f32
};
std::vector<TinyTensor> tiny_checkpoint_tensors(const TinyCheckpointOptions& options);

// A tensor of the checkpoint in `dir` (looked up in every *.safetensors there) as f32; kNotFound when none has it.
std::vector<float> checkpoint_tensor_f32(const std::string& dir, const std::string& name);
// A float tensor (f32 | bf16 | f16, on any device) copied to the host as f32.
std::vector<float> host_f32(const DeviceTensor& tensor);

// Rewrites one safetensors file in place through `edit` (rename, reshape, retype, drop or add entries), for tests
// of malformed checkpoints.
struct RawTensor {
    std::string name;
    std::string dtype;  // safetensors name, e.g. "F32", "I32"
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
};
void edit_safetensors(const std::string& path, const std::function<void(std::vector<RawTensor>&)>& edit);

// tests/tiny_checkpoint_quant.cpp: the format the options store tensor `name` in (kNone: float), the
// quantization_config they write, and one linear's stored entries (weight and companions, or its decoded twin).
QuantFormat quantized_format(const TinyCheckpointOptions& options, const std::string& name);
nlohmann::ordered_json quantization_config_json(const TinyCheckpointOptions& options);
std::vector<RawTensor> encode_linear(const TinyCheckpointOptions& options, const std::string& name, const Tensor& w,
                                     QuantFormat format);

}  // namespace moex::test
