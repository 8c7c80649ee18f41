// config.json parsing: each family's fields and transformers defaults, composite configs, both rope spellings,
// generation_config.json, and one test per error class (its code and the field it names).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "moex/error.h"
#include "moex/model_config.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

using test::expect_error;

namespace fs = std::filesystem;

ModelConfig parse(const std::string& json, const std::string& gen = "") { return parse_model_config(json, gen); }

TEST(ModelConfig, ArchitectureNames) {
    EXPECT_EQ(architecture_name(Architecture::kQwen2Moe), "qwen2_moe");
    EXPECT_EQ(architecture_name(Architecture::kQwen3Moe), "qwen3_moe");
    EXPECT_EQ(architecture_name(Architecture::kMixtral), "mixtral");
    EXPECT_EQ(architecture_name(Architecture::kOlmoe), "olmoe");
}

TEST(ModelConfig, TinyConfigOfEachFamily) {
    for (Architecture arch :
         {Architecture::kQwen2Moe, Architecture::kQwen3Moe, Architecture::kMixtral, Architecture::kOlmoe}) {
        test::TinyCheckpointOptions o;
        o.arch = arch;
        o.dtype = DType::kBF16;
        const ModelConfig c = parse(test::tiny_config_json(o));
        SCOPED_TRACE(std::string(architecture_name(arch)));
        EXPECT_EQ(c.arch, arch);
        EXPECT_EQ(c.model_type, architecture_name(arch));
        EXPECT_EQ(c.torch_dtype, DType::kBF16);
        EXPECT_EQ(c.vocab_size, 64);
        EXPECT_EQ(c.hidden_size, 32);
        EXPECT_EQ(c.num_hidden_layers, 2);
        EXPECT_EQ(c.num_attention_heads, 4);
        EXPECT_EQ(c.num_key_value_heads, 2);
        EXPECT_EQ(c.head_dim, 8);
        EXPECT_EQ(c.num_experts, 4);
        EXPECT_EQ(c.num_experts_per_tok, 2);
        EXPECT_EQ(c.moe_intermediate_size, 16);
        EXPECT_EQ(c.shared_expert_intermediate_size, arch == Architecture::kQwen2Moe ? 24 : 0);
        EXPECT_EQ(c.attention_bias, arch == Architecture::kQwen2Moe);
        EXPECT_EQ(c.qk_norm, arch == Architecture::kQwen3Moe || arch == Architecture::kOlmoe);
        EXPECT_EQ(c.qk_norm_per_head, arch != Architecture::kOlmoe);
        EXPECT_EQ(c.norm_topk_prob, arch == Architecture::kQwen3Moe || arch == Architecture::kMixtral);
        EXPECT_EQ(c.rope.type, "default");
        EXPECT_EQ(c.rope.theta, 1e6);
        EXPECT_EQ(c.sliding_window, 0);
        EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{63});
        EXPECT_EQ(c.bos_token_id, 1);
        EXPECT_TRUE(c.text_config_key.empty());
        EXPECT_TRUE(c.sub_config_keys.empty());
        for (int64_t l = 0; l < 2; ++l) EXPECT_TRUE(c.is_moe_layer(l));
    }
}

TEST(ModelConfig, Qwen2MoeDefaults) {
    const ModelConfig c = parse(R"({"model_type": "qwen2_moe"})");
    EXPECT_EQ(c.vocab_size, 151936);
    EXPECT_EQ(c.hidden_size, 2048);
    EXPECT_EQ(c.intermediate_size, 5632);
    EXPECT_EQ(c.num_hidden_layers, 24);
    EXPECT_EQ(c.num_attention_heads, 16);
    EXPECT_EQ(c.num_key_value_heads, 16);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.moe_intermediate_size, 1408);
    EXPECT_EQ(c.shared_expert_intermediate_size, 5632);
    EXPECT_EQ(c.num_experts, 60);
    EXPECT_EQ(c.num_experts_per_tok, 4);
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_TRUE(c.attention_bias);  // 4.x configs have no qkv_bias and always had q/k/v biases
    EXPECT_FALSE(c.qk_norm);
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.max_position_embeddings, 32768);
    EXPECT_EQ(c.rope.theta, 10000.0);
    EXPECT_EQ(c.decoder_sparse_step, 1);
    EXPECT_EQ(c.hidden_act, Activation::kSilu);
    EXPECT_TRUE(c.eos_token_ids.empty());
    EXPECT_FALSE(c.bos_token_id.has_value());
    EXPECT_FALSE(parse(R"({"model_type": "qwen2_moe", "qkv_bias": false})").attention_bias);
}

TEST(ModelConfig, Qwen3MoeDefaults) {
    const ModelConfig c = parse(R"({"model_type": "qwen3_moe"})");
    EXPECT_EQ(c.intermediate_size, 6144);
    EXPECT_EQ(c.num_attention_heads, 32);
    EXPECT_EQ(c.num_key_value_heads, 4);
    EXPECT_EQ(c.head_dim, 64);
    EXPECT_EQ(c.moe_intermediate_size, 768);
    EXPECT_EQ(c.num_experts, 128);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_EQ(c.shared_expert_intermediate_size, 0);
    EXPECT_FALSE(c.norm_topk_prob);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_TRUE(c.qk_norm && c.qk_norm_per_head);
    EXPECT_EQ(c.rms_norm_eps, 1e-6);
    EXPECT_EQ(c.rope.theta, 10000.0);
}

TEST(ModelConfig, MixtralDefaults) {
    const ModelConfig c = parse(R"({"model_type": "mixtral", "num_key_value_heads": null})");
    EXPECT_EQ(c.vocab_size, 32000);
    EXPECT_EQ(c.hidden_size, 4096);
    EXPECT_EQ(c.moe_intermediate_size, 14336);
    EXPECT_EQ(c.num_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_TRUE(c.norm_topk_prob);
    EXPECT_FALSE(c.attention_bias);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.rope.theta, 1e6);
    EXPECT_EQ(c.max_position_embeddings, 131072);
    EXPECT_EQ(c.bos_token_id, 1);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{2});
    EXPECT_EQ(c.sliding_window, 0);
    EXPECT_EQ(parse(R"({"model_type": "mixtral", "sliding_window": 4096})").sliding_window, 4096);
    EXPECT_EQ(parse(R"({"model_type": "mixtral", "num_local_experts": 5})").num_experts, 5);
}

TEST(ModelConfig, OlmoeDefaults) {
    const ModelConfig c = parse(R"({"model_type": "olmoe", "num_attention_heads": 8, "clip_qkv": 8.0})");
    EXPECT_EQ(c.vocab_size, 50304);
    EXPECT_EQ(c.num_key_value_heads, 8);  // None -> num_attention_heads
    EXPECT_EQ(c.moe_intermediate_size, 2048);
    EXPECT_EQ(c.num_experts, 64);
    EXPECT_EQ(c.num_experts_per_tok, 8);
    EXPECT_TRUE(c.qk_norm);
    EXPECT_FALSE(c.qk_norm_per_head);
    EXPECT_EQ(c.clip_qkv, 8.0);
    EXPECT_EQ(c.rms_norm_eps, 1e-5);
    EXPECT_EQ(c.max_position_embeddings, 4096);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{50279});
    EXPECT_EQ(c.pad_token_id, 1);
    EXPECT_FALSE(parse(R"({"model_type": "olmoe"})").clip_qkv.has_value());
    EXPECT_FALSE(parse(R"({"model_type": "olmoe", "pad_token_id": null})").pad_token_id.has_value());
    EXPECT_TRUE(parse(R"({"model_type": "olmoe", "eos_token_id": null})").eos_token_ids.empty());
}

TEST(ModelConfig, SlidingWindowOnlyWhenUsed) {
    EXPECT_EQ(parse(R"({"model_type": "qwen3_moe", "sliding_window": 4096})").sliding_window, 0);
    EXPECT_EQ(parse(R"({"model_type": "qwen3_moe", "use_sliding_window": true, "sliding_window": 128})").sliding_window,
              128);
    EXPECT_EQ(
        parse(R"({"model_type": "qwen2_moe", "use_sliding_window": true, "sliding_window": null})").sliding_window, 0);
}

TEST(ModelConfig, DenseLayers) {
    const ModelConfig c = parse(R"({"model_type": "qwen3_moe", "num_hidden_layers": 6, "mlp_only_layers": [0],
                                    "decoder_sparse_step": 2})");
    const std::vector<bool> moe = {false, true, false, true, false, true};
    for (int64_t l = 0; l < 6; ++l) EXPECT_EQ(c.is_moe_layer(l), moe[size_t(l)]) << l;
    EXPECT_EQ(c.num_experts_in_layer(1), 128);
    EXPECT_EQ(c.num_experts_in_layer(2), 0);
}

TEST(ModelConfig, HeadDimExplicitOrDerived) {
    EXPECT_EQ(parse(R"({"model_type": "qwen3_moe", "head_dim": 96})").head_dim, 96);
    EXPECT_EQ(
        parse(R"({"model_type": "mixtral", "head_dim": null, "hidden_size": 512, "num_attention_heads": 8})").head_dim,
        64);
}

TEST(ModelConfig, DtypeSpellings) {
    EXPECT_EQ(parse(R"({"model_type": "olmoe", "torch_dtype": "float32"})").torch_dtype, DType::kF32);
    EXPECT_EQ(parse(R"({"model_type": "olmoe", "dtype": "float16"})").torch_dtype, DType::kF16);
    EXPECT_EQ(parse(R"({"model_type": "olmoe", "dtype": "bfloat16", "torch_dtype": "float32"})").torch_dtype,
              DType::kBF16);
    expect_error([] { parse(R"({"model_type": "olmoe", "torch_dtype": "int8"})"); }, ErrorCode::kFormat,
                 "config.json: torch_dtype `int8` is not supported");
}

TEST(ModelConfig, RopeTransformers4Spelling) {
    const ModelConfig c = parse(R"({"model_type": "qwen3_moe", "rope_theta": 500000.0, "max_position_embeddings": 8192,
        "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048, "beta_fast": 16}})");
    EXPECT_EQ(c.rope.type, "yarn");
    EXPECT_EQ(c.rope.theta, 500000.0);
    EXPECT_EQ(c.rope.factor, 4.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 2048);
    EXPECT_EQ(c.rope.beta_fast, 16.0);
    EXPECT_EQ(c.rope.beta_slow, 1.0);
    EXPECT_EQ(c.rope.attention_factor, 0.0);  // derived from factor by the rope table
}

TEST(ModelConfig, RopeTransformers5Spelling) {
    const ModelConfig c = parse(R"({"model_type": "mixtral", "max_position_embeddings": 8192, "rope_parameters":
        {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
         "high_freq_factor": 4.0, "original_max_position_embeddings": 8192, "partial_rotary_factor": 0.5}})");
    EXPECT_EQ(c.rope.type, "llama3");
    EXPECT_EQ(c.rope.theta, 500000.0);
    EXPECT_EQ(c.rope.factor, 8.0);
    EXPECT_EQ(c.rope.high_freq_factor, 4.0);
    EXPECT_EQ(c.rope.original_max_position_embeddings, 8192);
    EXPECT_EQ(c.rope.partial_rotary_factor, 0.5);
    const ModelConfig linear = parse(
        R"({"model_type": "olmoe", "max_position_embeddings": 4096, "rope_parameters": {"rope_type": "linear",
            "factor": 2.0}})");
    EXPECT_EQ(linear.rope.theta, 10000.0);
    EXPECT_EQ(linear.rope.original_max_position_embeddings, 4096);
    expect_error([] { parse(R"({"model_type": "olmoe", "rope_parameters": {"rope_type": "longrope"}})"); },
                 ErrorCode::kUnsupported, "rope_parameters.rope_type `longrope` is not supported");
    expect_error([] { parse(R"({"model_type": "olmoe", "rope_scaling": {"type": "linear"}})"); }, ErrorCode::kFormat,
                 "rope_scaling.factor is required");
}

TEST(ModelConfig, TokenIdsAndGenerationConfig) {
    const std::string config = R"({"model_type": "qwen3_moe", "eos_token_id": [5, 6], "bos_token_id": 3})";
    EXPECT_EQ(parse(config).eos_token_ids, (std::vector<int32_t>{5, 6}));
    const ModelConfig c = parse(config, R"({"eos_token_id": 7, "pad_token_id": 0, "temperature": 0.6, "top_k": 20,
                                           "top_p": 0.95, "do_sample": true})");
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{7});
    EXPECT_EQ(c.bos_token_id, 3);
    EXPECT_EQ(c.pad_token_id, 0);
    EXPECT_EQ(c.temperature, 0.6);
    EXPECT_EQ(c.top_k, 20);
    EXPECT_EQ(c.top_p, 0.95);
    EXPECT_TRUE(c.do_sample);
    const ModelConfig plain = parse(config, R"({"bos_token_id": 3})");
    EXPECT_EQ(plain.eos_token_ids, (std::vector<int32_t>{5, 6}));
    EXPECT_EQ(plain.temperature, 1.0);
    EXPECT_EQ(plain.top_k, 50);
    EXPECT_FALSE(plain.do_sample);
    expect_error([&] { parse(config, R"({"top_p": 0})"); }, ErrorCode::kFormat, "generation_config.json: top_p");
}

TEST(ModelConfig, CompositeConfig) {
    const ModelConfig c = parse(R"({"model_type": "tiny_vlm", "vision_config": {"model_type": "tiny_vision"},
        "quantization_config": {"quant_method": "fp8"}, "text_config": {"model_type": "qwen3_moe", "hidden_size": 64,
        "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16}, "audio_config": null,
        "projector": {"model_type": "mlp"}, "speech_config": {}, "dtype": "float32", "tie_word_embeddings": true,
        "eos_token_id": 9})");
    EXPECT_EQ(c.arch, Architecture::kQwen3Moe);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.text_config_key, "text_config");
    EXPECT_EQ(c.sub_config_keys,
              (std::vector<std::string>{"vision_config", "text_config", "projector", "speech_config"}));
    EXPECT_EQ(c.torch_dtype, DType::kF32);
    EXPECT_TRUE(c.tie_word_embeddings);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{9});
    expect_error([] { parse(R"({"model_type": "x", "text_config": {"model_type": "llama"}})"); },
                 ErrorCode::kUnsupported, "architecture `llama` is not supported");
    expect_error([] { parse(R"({"model_type": "x", "text_config": {"model_type": "qwen3_moe", "hidden_size": 0}})"); },
                 ErrorCode::kFormat, "config.json: text_config.hidden_size must be between 1 and");
}

TEST(ModelConfig, ExpertsImplementationInFile) {
    using Pairs = std::vector<std::pair<std::string, std::string>>;
    EXPECT_EQ(parse(R"({"model_type": "olmoe", "experts_implementation": "eager"})").experts_implementation_in_file,
              (Pairs{{"", "eager"}}));
    EXPECT_EQ(parse(R"({"model_type": "olmoe", "experts_implementation": {"text_config": "batched_mm", "": "eager"}})")
                  .experts_implementation_in_file,
              (Pairs{{"text_config", "batched_mm"}, {"", "eager"}}));
    EXPECT_TRUE(parse(R"({"model_type": "olmoe"})").experts_implementation_in_file.empty());
    expect_error([] { parse(R"({"model_type": "olmoe", "experts_implementation": 3})"); }, ErrorCode::kFormat,
                 "experts_implementation must be a string or an object");
}

TEST(ModelConfig, UnsupportedArchitecture) {
    expect_error([] { parse(R"({"model_type": "llama"})"); }, ErrorCode::kUnsupported,
                 "config.json: architecture `llama` is not supported; moex runs qwen2_moe, qwen3_moe, mixtral, olmoe");
    expect_error([] { parse(R"({"hidden_size": 4})"); }, ErrorCode::kFormat, "config.json: model_type is missing");
    expect_error([] { parse(R"({"model_type": "qwen3_moe", "attention_bias": true})"); }, ErrorCode::kUnsupported,
                 "attention_bias");
}

TEST(ModelConfig, BadFieldsNameTheFieldAndValue) {
    const std::string base = R"({"model_type": "qwen3_moe", )";
    expect_error([&] { parse(base + R"("hidden_size": "32"})"); }, ErrorCode::kFormat,
                 "config.json: hidden_size must be an integer, got \"32\"");
    expect_error([&] { parse(base + R"("hidden_size": 0})"); }, ErrorCode::kFormat,
                 "config.json: hidden_size must be between 1 and 2147483647, got 0");
    expect_error([&] { parse(base + R"("num_experts": -4})"); }, ErrorCode::kFormat, "num_experts must be between");
    expect_error([&] { parse(base + R"("num_attention_heads": 6, "num_key_value_heads": 4})"); }, ErrorCode::kFormat,
                 "num_attention_heads=6 is not a multiple of num_key_value_heads=4");
    expect_error([&] { parse(base + R"("num_experts": 4, "num_experts_per_tok": 5})"); }, ErrorCode::kFormat,
                 "num_experts_per_tok=5 exceeds num_experts=4");
    expect_error([&] { parse(base + R"("hidden_act": "tanh"})"); }, ErrorCode::kFormat,
                 "config.json: hidden_act `tanh` is not supported; moex runs silu, gelu, gelu_pytorch_tanh, relu");
    expect_error([&] { parse(base + R"("rms_norm_eps": -1})"); }, ErrorCode::kFormat, "rms_norm_eps");
    expect_error([&] { parse(base + R"("norm_topk_prob": "yes"})"); }, ErrorCode::kFormat,
                 "norm_topk_prob must be true or false");
    expect_error([&] { parse(base + R"("mlp_only_layers": [0], "intermediate_size": 0})"); }, ErrorCode::kFormat,
                 "intermediate_size must be between");
    expect_error([&] { parse(base + R"("eos_token_id": 4294967296})"); }, ErrorCode::kFormat,
                 "eos_token_id 4294967296 does not fit");
    expect_error([] { parse(R"({"model_type": "mixtral", "num_local_experts": 0})"); }, ErrorCode::kFormat,
                 "num_local_experts must be between 1");
    expect_error([] { parse(R"({"model_type": "olmoe", "head_dim": 7})"); }, ErrorCode::kFormat,
                 "olmoe needs num_attention_heads * head_dim == hidden_size");
    expect_error([] { parse("{\"model_type\": "); }, ErrorCode::kFormat, "config.json: not valid JSON");
    expect_error([] { parse("[1, 2]"); }, ErrorCode::kFormat, "config.json: expected a JSON object");
}

TEST(ModelConfig, LoadFromDirectory) {
    const fs::path dir = fs::temp_directory_path() / ("moex_config_test_" + std::to_string(::getpid()));
    fs::remove_all(dir);
    expect_error([&] { load_model_config(dir.string()); }, ErrorCode::kNotFound, (dir / "config.json").string());
    test::TinyCheckpointOptions o;
    o.arch = Architecture::kQwen3Moe;
    o.dense_layer = true;
    o.composite = true;
    test::write_tiny_checkpoint(dir.string(), o);
    const ModelConfig c = load_model_config(dir.string());
    EXPECT_EQ(c.text_config_key, "text_config");
    EXPECT_EQ(c.sub_config_keys, (std::vector<std::string>{"text_config", "vision_config"}));
    EXPECT_TRUE(c.is_moe_layer(0));
    EXPECT_FALSE(c.is_moe_layer(1));
    EXPECT_EQ(c.intermediate_size, 48);
    EXPECT_EQ(c.eos_token_ids, std::vector<int32_t>{63});
    std::ofstream(dir / "generation_config.json") << "{\"eos_token_id\": [1, 2], \"temperature\": \"hot\"}";
    expect_error([&] { load_model_config(dir.string()); }, ErrorCode::kFormat,
                 (dir / "generation_config.json").string() + ": temperature must be a number");
    fs::remove_all(dir);
}

}  // namespace
}  // namespace moex
