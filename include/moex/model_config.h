// ModelConfig: what moex reads from a checkpoint's config.json (and generation_config.json) for the decoder-only MoE
// families it runs: qwen2_moe, qwen3_moe, mixtral, olmoe. A composite config (one with text_config, vision_config,
// ...) yields the text model's config plus the names of every sub-config, so that experts_implementation maps can
// address them. Both rope spellings are read: `rope_theta` + `rope_scaling` (transformers 4.x) and
// `rope_parameters` (5.x).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "moex/experts.h"

namespace moex {

enum class Architecture : uint8_t { kQwen2Moe, kQwen3Moe, kMixtral, kOlmoe };
std::string_view architecture_name(Architecture a);  // "qwen2_moe", "qwen3_moe", "mixtral", "olmoe"

struct RopeConfig {
    std::string type = "default";  // default | linear | dynamic | yarn | llama3
    double theta = 10000.0;
    double factor = 1.0;                                   // linear, dynamic, yarn, llama3
    double attention_factor = 0.0;                         // yarn: 0 = derived from factor
    double beta_fast = 32.0, beta_slow = 1.0;              // yarn
    double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3
    int64_t original_max_position_embeddings = 0;          // yarn, llama3, dynamic
    double partial_rotary_factor = 1.0;
};

// The quantization_config of a pre-quantized checkpoint, as the hub writes it (the tensors each method stores are
// read by src/model/weights/quant.h):
//   fp8      FineGrainedFP8Config: F8_E4M3 linears with `<name>_scale_inv` over blocks of block_n x block_k (0 x 0:
//            one per tensor) in F32 or ue8m0; with expert_dtype fp4 the experts hold e2m1 pairs instead (MXFP4).
//   mxfp4    gpt-oss's Mxfp4Config: the experts as `<proj>_blocks` and `<proj>_scales`; other linears are float.
//   modelopt quant_algo NVFP4: linears as packed e2m1 `weight` with `weight_scale` (e4m3) and `weight_scale_2`.
// The routed experts stay in `format` in memory unless the model is loaded with dequantize; every other quantized
// linear (attention, dense MLPs, shared experts) is dequantized into the run dtype on load.
struct CheckpointQuant {
    std::string method;                                    // quant_method as written; empty: not pre-quantized
    QuantFormat format = QuantFormat::kNone;               // the routed experts' format: fp8 | mxfp4 | nvfp4
    int64_t block_n = 0, block_k = 0;                      // fp8's weight_block_size
    ActivationQuant activations = ActivationQuant::kNone;  // fp8's activation_scheme; none (weight-only) for FP4
    bool enabled() const { return !method.empty(); }
};

// One line for load messages: "fp8 128x128 (activation_scheme dynamic): routed experts stay fp8, the other FP8
// linears are dequantized to bfloat16 on load"; "" for a checkpoint that is not pre-quantized.
std::string quantization_summary(const CheckpointQuant& quant, bool dequantize, DType run_dtype);

struct ModelConfig {
    Architecture arch = Architecture::kQwen3Moe;
    std::string model_type;            // the text model's model_type as written
    DType torch_dtype = DType::kBF16;  // the checkpoint's dtype ("torch_dtype" or "dtype"); f32 | bf16 | f16
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;
    int64_t num_hidden_layers = 0;
    int64_t num_attention_heads = 0;
    int64_t num_key_value_heads = 0;
    int64_t head_dim = 0;                         // explicit, or hidden_size / num_attention_heads
    int64_t intermediate_size = 0;                // dense MLP layers (qwen*: mlp_only_layers / decoder_sparse_step)
    int64_t moe_intermediate_size = 0;            // per expert (mixtral, olmoe: intermediate_size)
    int64_t shared_expert_intermediate_size = 0;  // qwen2_moe; 0 = no shared expert
    int64_t num_experts = 0;                      // num_experts | num_local_experts
    int64_t num_experts_per_tok = 0;
    bool norm_topk_prob = false;      // mixtral: always true
    int64_t decoder_sparse_step = 1;  // qwen*: layer l is MoE when (l+1) % step == 0 and l not in mlp_only_layers
    std::vector<int64_t> mlp_only_layers;
    Activation hidden_act = Activation::kSilu;
    double rms_norm_eps = 1e-6;
    RopeConfig rope;
    int64_t max_position_embeddings = 0;
    bool attention_bias = false;     // q/k/v biases (qwen2_moe: true)
    bool qk_norm = false;            // qwen3_moe: per-head RMSNorm on q and k; olmoe: over the whole q / k row
    bool qk_norm_per_head = true;    // false for olmoe (norm over num_heads*head_dim)
    std::optional<double> clip_qkv;  // olmoe
    int64_t sliding_window = 0;      // 0 = full attention (use_sliding_window false or sliding_window null)
    bool tie_word_embeddings = false;
    CheckpointQuant quant;               // quantization_config, when the checkpoint is pre-quantized
    std::vector<int32_t> eos_token_ids;  // config.json, overridden by generation_config.json when it has them
    std::optional<int32_t> bos_token_id;
    std::optional<int32_t> pad_token_id;

    // Composite checkpoints: the key of the sub-config that holds this text model ("" for a plain model, e.g.
    // "text_config") and the keys of every non-null sub-config of the top-level config, in file order.
    std::string text_config_key;
    std::vector<std::string> sub_config_keys;
    // The experts_implementation written in config.json, if any (it is not serialized by transformers, but a user may
    // write it); a per-key map, "" = top level.
    std::vector<std::pair<std::string, std::string>> experts_implementation_in_file;

    // Generation defaults from generation_config.json (absent fields keep these).
    double temperature = 1.0;
    int64_t top_k = 50;
    double top_p = 1.0;
    bool do_sample = false;

    bool is_moe_layer(int64_t layer) const;
    int64_t num_experts_in_layer(int64_t layer) const { return is_moe_layer(layer) ? num_experts : 0; }
};

// Reads DIR/config.json and, when present, DIR/generation_config.json. Errors (moex::Error) name the file and the
// field: kNotFound for a missing config.json, kUnsupported for an architecture moex does not run (naming it and
// listing the supported ones), kFormat for bad JSON or a missing / mistyped / out-of-range field.
ModelConfig load_model_config(const std::string& dir);
ModelConfig parse_model_config(const std::string& config_json, const std::string& generation_config_json = "",
                               const std::string& label = "config.json");

}  // namespace moex
