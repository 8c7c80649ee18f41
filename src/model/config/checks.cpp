// Range checks of a parsed config.json, and generation_config.json's token ids and sampling defaults.
#include <cmath>
#include <limits>
#include <vector>

#include "moex/error.h"
#include "src/model/config/internal.h"

namespace moex::model {

namespace {

// Sizes above 2^31 - 1 are refused so that every product of two of them fits in 64 bits.
constexpr int64_t kMaxSize = std::numeric_limits<int32_t>::max();

void require_size(const JsonFields& f, const std::string& key, int64_t value) {
    MOEX_REQUIRE(
        value > 0 && value <= kMaxSize, ErrorCode::kFormat,
        f.where(key) + " must be between 1 and " + std::to_string(kMaxSize) + ", got " + std::to_string(value));
}

std::string named(const JsonFields& f, const std::string& key, int64_t value) {
    return f.field(key) + "=" + std::to_string(value);
}

// Layers are capped far above any published model (the deepest have about 130) so that the per-layer work before
// the first tensor is checked stays small: a 7 KB config.json claiming 2^31 layers kept a scan over them busy for
// minutes. Real layer counts are then confirmed by the checkpoint's tensors (every one must be used).
constexpr int64_t kMaxLayers = 4096;

// In O(|mlp_only_layers|), not one is_moe_layer per layer: with decoder_sparse_step > 1 layer 0 is dense, else the
// dense layers are exactly mlp_only_layers (checked to lie in range and be distinct).
bool has_dense_layer(const ModelConfig& c) {
    if (c.num_experts <= 0 || c.decoder_sparse_step != 1) return true;
    return !c.mlp_only_layers.empty();
}

void check_mlp_only_layers(const ModelConfig& c, const JsonFields& f) {
    std::vector<bool> seen(size_t(c.num_hidden_layers), false);
    for (int64_t l : c.mlp_only_layers) {
        MOEX_REQUIRE(l >= 0 && l < c.num_hidden_layers, ErrorCode::kFormat,
                     f.where("mlp_only_layers") + " names layer " + std::to_string(l) + ", outside the " +
                         named(f, "num_hidden_layers", c.num_hidden_layers) + " layers");
        MOEX_REQUIRE(!seen[size_t(l)], ErrorCode::kFormat,
                     f.where("mlp_only_layers") + " names layer " + std::to_string(l) + " twice");
        seen[size_t(l)] = true;
    }
}

}  // namespace

ExpertFieldNames expert_field_names(Architecture arch) {
    switch (arch) {
        case Architecture::kMixtral: return {"num_local_experts", "intermediate_size"};
        case Architecture::kOlmoe: return {"num_experts", "intermediate_size"};
        case Architecture::kQwen2Moe:
        case Architecture::kQwen3Moe: break;
    }
    return {"num_experts", "moe_intermediate_size"};
}

void check_model_config(const ModelConfig& c, const JsonFields& f) {
    const ExpertFieldNames names = expert_field_names(c.arch);
    require_size(f, "vocab_size", c.vocab_size);
    require_size(f, "hidden_size", c.hidden_size);
    require_size(f, "num_hidden_layers", c.num_hidden_layers);
    MOEX_REQUIRE(c.num_hidden_layers <= kMaxLayers, ErrorCode::kFormat,
                 f.where("num_hidden_layers") + " is " + std::to_string(c.num_hidden_layers) + "; moex loads at most " +
                     std::to_string(kMaxLayers) + " layers (the deepest published models have about 130)");
    require_size(f, "num_attention_heads", c.num_attention_heads);
    require_size(f, "num_key_value_heads", c.num_key_value_heads);
    require_size(f, "head_dim", c.head_dim);
    require_size(f, names.num_experts, c.num_experts);
    require_size(f, names.expert_intermediate, c.moe_intermediate_size);
    require_size(f, "num_experts_per_tok", c.num_experts_per_tok);
    require_size(f, "max_position_embeddings", c.max_position_embeddings);
    require_size(f, "decoder_sparse_step", c.decoder_sparse_step);
    check_mlp_only_layers(c, f);
    if (has_dense_layer(c)) require_size(f, "intermediate_size", c.intermediate_size);
    if (c.shared_expert_intermediate_size != 0)
        require_size(f, "shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    MOEX_REQUIRE(c.num_attention_heads % c.num_key_value_heads == 0, ErrorCode::kFormat,
                 f.label() + ": " + named(f, "num_attention_heads", c.num_attention_heads) + " is not a multiple of " +
                     named(f, "num_key_value_heads", c.num_key_value_heads));
    MOEX_REQUIRE(c.num_experts_per_tok <= c.num_experts, ErrorCode::kFormat,
                 f.label() + ": " + named(f, "num_experts_per_tok", c.num_experts_per_tok) + " exceeds " +
                     named(f, names.num_experts, c.num_experts));
    MOEX_REQUIRE(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, ErrorCode::kFormat,
                 f.where("rms_norm_eps") + " must be a positive number, got " + std::to_string(c.rms_norm_eps));
    MOEX_REQUIRE(c.sliding_window >= 0, ErrorCode::kFormat,
                 f.where("sliding_window") + " must be >= 0, got " + std::to_string(c.sliding_window));
    if (c.clip_qkv)
        MOEX_REQUIRE(std::isfinite(*c.clip_qkv) && *c.clip_qkv > 0, ErrorCode::kFormat,
                     f.where("clip_qkv") + " must be a positive number, got " + std::to_string(*c.clip_qkv));
    // OLMoE's q_norm weight has hidden_size elements and its k_norm (hidden_size / heads) * kv heads.
    if (c.arch == Architecture::kOlmoe)
        MOEX_REQUIRE(c.head_dim * c.num_attention_heads == c.hidden_size, ErrorCode::kFormat,
                     f.label() + ": olmoe needs num_attention_heads * head_dim == hidden_size, got " +
                         named(f, "num_attention_heads", c.num_attention_heads) + ", " +
                         named(f, "head_dim", c.head_dim) + ", " + named(f, "hidden_size", c.hidden_size));
}

int32_t token_id(const JsonFields& f, const std::string& key, int64_t value) {
    MOEX_REQUIRE(value >= std::numeric_limits<int32_t>::min() && value <= std::numeric_limits<int32_t>::max(),
                 ErrorCode::kFormat, f.where(key) + " " + std::to_string(value) + " does not fit a 32-bit token id");
    return int32_t(value);
}

void apply_generation_config(const JsonFields& f, ModelConfig& c) {
    if (auto eos = f.integer_or_list("eos_token_id")) {
        c.eos_token_ids.clear();
        for (int64_t id : *eos) c.eos_token_ids.push_back(token_id(f, "eos_token_id", id));
    }
    if (auto bos = f.integer("bos_token_id")) c.bos_token_id = token_id(f, "bos_token_id", *bos);
    if (auto pad = f.integer("pad_token_id")) c.pad_token_id = token_id(f, "pad_token_id", *pad);
    c.temperature = f.number_or("temperature", c.temperature);
    MOEX_REQUIRE(std::isfinite(c.temperature) && c.temperature >= 0, ErrorCode::kFormat,
                 f.where("temperature") + " must be >= 0, got " + std::to_string(c.temperature));
    c.top_k = f.integer_or("top_k", c.top_k);
    MOEX_REQUIRE(c.top_k >= 0, ErrorCode::kFormat, f.where("top_k") + " must be >= 0, got " + std::to_string(c.top_k));
    c.top_p = f.number_or("top_p", c.top_p);
    MOEX_REQUIRE(c.top_p > 0 && c.top_p <= 1, ErrorCode::kFormat,
                 f.where("top_p") + " must be in (0, 1], got " + std::to_string(c.top_p));
    c.do_sample = f.boolean_or("do_sample", c.do_sample);
}

}  // namespace moex::model
