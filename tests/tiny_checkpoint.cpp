// Writes tiny random MoE checkpoints (config.json, generation_config.json, safetensors) in the layouts the hub and
// transformers use, for the loader, model and generation tests.
#include "tests/tiny_checkpoint.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "moex/error.h"
#include "moex/quant.h"
#include "moex/safetensors.h"

namespace moex::test {

namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

bool is_qwen(Architecture a) { return a == Architecture::kQwen2Moe || a == Architecture::kQwen3Moe; }
bool is_dense(const TinyCheckpointOptions& o, int64_t layer) { return is_qwen(o.arch) && o.dense_layer && layer == 1; }

struct ExpertNames {
    const char *block, *gate, *up, *down;
};
ExpertNames expert_names(Architecture a) {
    if (a == Architecture::kMixtral) return {"block_sparse_moe.", "w1", "w3", "w2"};
    return {"mlp.", "gate_proj", "up_proj", "down_proj"};
}

// Values ~ offset + scale * N(0, 1): linear weights scale 1/sqrt(fan_in), so activations stay O(1).
class Draw {
   public:
    explicit Draw(uint64_t seed) : rng_(seed) {}
    void add(std::vector<TinyTensor>& out, std::string name, std::initializer_list<int64_t> shape, double scale,
             double offset = 0.0) {
        Tensor t(DType::kF32, shape);
        float* p = static_cast<float*>(t.data());
        for (int64_t i = 0; i < t.view().numel(); ++i) p[i] = float(offset + scale * normal_(rng_));
        out.push_back({std::move(name), std::move(t)});
    }
    void linear(std::vector<TinyTensor>& out, std::string name, int64_t rows, int64_t cols) {
        add(out, std::move(name), {rows, cols}, 1.0 / std::sqrt(double(cols)));
    }

   private:
    std::mt19937_64 rng_;
    std::normal_distribution<double> normal_{0.0, 1.0};
};

void attention_tensors(const TinyCheckpointOptions& o, Draw& d, std::vector<TinyTensor>& out, const std::string& a) {
    const int64_t q = o.heads * o.head_dim, kv = o.kv_heads * o.head_dim, H = o.hidden;
    d.linear(out, a + "q_proj.weight", q, H);
    d.linear(out, a + "k_proj.weight", kv, H);
    d.linear(out, a + "v_proj.weight", kv, H);
    if (o.arch == Architecture::kQwen2Moe) {
        d.add(out, a + "q_proj.bias", {q}, 0.1);
        d.add(out, a + "k_proj.bias", {kv}, 0.1);
        d.add(out, a + "v_proj.bias", {kv}, 0.1);
    }
    if (o.arch == Architecture::kQwen3Moe) {
        d.add(out, a + "q_norm.weight", {o.head_dim}, 0.1, 1.0);
        d.add(out, a + "k_norm.weight", {o.head_dim}, 0.1, 1.0);
    }
    if (o.arch == Architecture::kOlmoe) {
        d.add(out, a + "q_norm.weight", {q}, 0.1, 1.0);
        d.add(out, a + "k_norm.weight", {kv}, 0.1, 1.0);
    }
    d.linear(out, a + "o_proj.weight", H, q);
}

void moe_tensors(const TinyCheckpointOptions& o, Draw& d, std::vector<TinyTensor>& out, const std::string& p) {
    const ExpertNames n = expert_names(o.arch);
    const std::string m = p + n.block;
    d.linear(out, m + "gate.weight", o.experts, o.hidden);
    for (int64_t e = 0; e < o.experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        d.linear(out, x + n.gate + ".weight", o.moe_intermediate, o.hidden);
        d.linear(out, x + n.up + ".weight", o.moe_intermediate, o.hidden);
        d.linear(out, x + n.down + ".weight", o.hidden, o.moe_intermediate);
    }
    if (o.arch == Architecture::kQwen2Moe) {
        d.linear(out, m + "shared_expert.gate_proj.weight", o.shared_intermediate, o.hidden);
        d.linear(out, m + "shared_expert.up_proj.weight", o.shared_intermediate, o.hidden);
        d.linear(out, m + "shared_expert.down_proj.weight", o.hidden, o.shared_intermediate);
        d.linear(out, m + "shared_expert_gate.weight", 1, o.hidden);
    }
}

// Replaces each MoE layer's per-expert tensors by transformers 5's fused pair under "mlp." (gate rows first).
std::vector<TinyTensor> fuse_experts(const TinyCheckpointOptions& o, std::vector<TinyTensor> in) {
    const ExpertNames n = expert_names(o.arch);
    std::map<std::string, const Tensor*> by_name;
    for (const TinyTensor& t : in) by_name[t.name] = &t.values;
    std::vector<TinyTensor> out;
    const int64_t I = o.moe_intermediate, H = o.hidden, block = I * H;
    for (TinyTensor& t : in) {
        const size_t at = t.name.find(std::string(".") + n.block);
        const std::string p = t.name.substr(0, at + 1), m = p + n.block;
        const bool router = at != std::string::npos && t.name == m + "gate.weight";
        if (!router && (at == std::string::npos || t.name.rfind(m + "experts.", 0) != 0)) {
            out.push_back(std::move(t));  // attention, norms, shared expert, dense MLP
            continue;
        }
        if (router) {
            out.push_back({p + "mlp.gate.weight", std::move(t.values)});
        } else if (t.name == m + "experts.0." + n.gate + ".weight") {
            Tensor gate_up(DType::kF32, {o.experts, 2 * I, H}), down(DType::kF32, {o.experts, H, I});
            for (int64_t e = 0; e < o.experts; ++e) {
                const std::string x = m + "experts." + std::to_string(e) + ".";
                float* gu = static_cast<float*>(gate_up.data()) + e * 2 * block;
                std::memcpy(gu, by_name.at(x + n.gate + ".weight")->data(), size_t(block) * 4);
                std::memcpy(gu + block, by_name.at(x + n.up + ".weight")->data(), size_t(block) * 4);
                std::memcpy(static_cast<float*>(down.data()) + e * block, by_name.at(x + n.down + ".weight")->data(),
                            size_t(block) * 4);
            }
            out.push_back({p + "mlp.experts.gate_up_proj", std::move(gate_up)});
            out.push_back({p + "mlp.experts.down_proj", std::move(down)});
        }  // the other per-expert tensors are inside the fused pair
    }
    return out;
}

Tensor stored(const Tensor& f32, DType dtype) {
    if (dtype == DType::kF32) return f32;
    Tensor t(dtype, f32.view().shape, f32.view().ndim);
    const float* src = static_cast<const float*>(f32.data());
    uint16_t* dst = static_cast<uint16_t*>(t.data());
    for (int64_t i = 0; i < f32.view().numel(); ++i)
        dst[i] = dtype == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    return t;
}

Json text_config(const TinyCheckpointOptions& o) {
    Json j;
    j["model_type"] = std::string(architecture_name(o.arch));
    j["vocab_size"] = o.vocab;
    j["hidden_size"] = o.hidden;
    j["num_hidden_layers"] = o.layers;
    j["num_attention_heads"] = o.heads;
    j["num_key_value_heads"] = o.kv_heads;
    j["hidden_act"] = "silu";
    j["max_position_embeddings"] = 512;
    j["rms_norm_eps"] = is_qwen(o.arch) ? 1e-6 : 1e-5;
    j["initializer_range"] = 0.02;
    j["tie_word_embeddings"] = o.tied;
    j["bos_token_id"] = 1;
    j["eos_token_id"] = o.vocab - 1;
    // qwen2_moe and mixtral are written as transformers 4.x wrote them (torch_dtype, rope_theta), the other two as
    // 5.x does (dtype, rope_parameters), so that both spellings are read.
    const std::string dtype(dtype_name(o.dtype));
    const bool v4 = o.arch == Architecture::kQwen2Moe || o.arch == Architecture::kMixtral;
    if (v4) {
        j["torch_dtype"] = dtype;
        j["rope_theta"] = 1000000.0;
    } else {
        j["dtype"] = dtype;
        j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    }
    if (o.arch == Architecture::kQwen3Moe || o.arch == Architecture::kMixtral) j["head_dim"] = o.head_dim;
    if (is_qwen(o.arch)) {
        j["intermediate_size"] = o.intermediate;
        j["moe_intermediate_size"] = o.moe_intermediate;
        j["num_experts"] = o.experts;
        j["decoder_sparse_step"] = 1;
        j["mlp_only_layers"] = o.dense_layer ? Json::array({1}) : Json::array();
        j["norm_topk_prob"] = o.arch == Architecture::kQwen3Moe;
        j["use_sliding_window"] = false;
        j["sliding_window"] = nullptr;
    } else {
        j["intermediate_size"] = o.moe_intermediate;
        j[o.arch == Architecture::kMixtral ? "num_local_experts" : "num_experts"] = o.experts;
    }
    if (o.arch == Architecture::kQwen2Moe) j["shared_expert_intermediate_size"] = o.shared_intermediate;
    if (o.arch == Architecture::kQwen3Moe || o.arch == Architecture::kOlmoe) j["attention_bias"] = false;
    if (o.arch == Architecture::kMixtral) j["sliding_window"] = nullptr;
    if (o.arch == Architecture::kOlmoe) {
        j["norm_topk_prob"] = false;
        j["clip_qkv"] = nullptr;
    }
    j["num_experts_per_tok"] = o.top_k;
    return j;
}

const char* class_name(Architecture a) {
    switch (a) {
        case Architecture::kQwen2Moe: return "Qwen2MoeForCausalLM";
        case Architecture::kQwen3Moe: return "Qwen3MoeForCausalLM";
        case Architecture::kMixtral: return "MixtralForCausalLM";
        case Architecture::kOlmoe: return "OlmoeForCausalLM";
    }
    return "?";
}

void write_text(const fs::path& path, const std::string& text) {
    std::ofstream f(path, std::ios::binary);
    f << text;
    MOEX_REQUIRE(f.good(), ErrorCode::kIo, path.string() + ": write failed");
}

float load_f32(const uint8_t* p, DType t, int64_t i) {
    if (t == DType::kF32) {
        float f;
        std::memcpy(&f, p + 4 * i, 4);
        return f;
    }
    uint16_t h;
    std::memcpy(&h, p + 2 * i, 2);
    return t == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

std::vector<float> floats(const uint8_t* p, DType t, int64_t n, const std::string& what) {
    MOEX_REQUIRE(is_float_activation(t), ErrorCode::kInvalidArgument, what + " is not an f32, bf16 or f16 tensor");
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out[size_t(i)] = load_f32(p, t, i);
    return out;
}

std::string shard_name(int i, int n) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "model-%05d-of-%05d.safetensors", i + 1, n);
    return buf;
}

}  // namespace

std::vector<TinyTensor> tiny_checkpoint_tensors(const TinyCheckpointOptions& o) {
    std::vector<TinyTensor> out;
    Draw d(o.seed);
    d.add(out, "model.embed_tokens.weight", {o.vocab, o.hidden}, 1.0);
    for (int64_t l = 0; l < o.layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l) + ".";
        d.add(out, p + "input_layernorm.weight", {o.hidden}, 0.1, 1.0);
        attention_tensors(o, d, out, p + "self_attn.");
        d.add(out, p + "post_attention_layernorm.weight", {o.hidden}, 0.1, 1.0);
        if (is_dense(o, l)) {
            d.linear(out, p + "mlp.gate_proj.weight", o.intermediate, o.hidden);
            d.linear(out, p + "mlp.up_proj.weight", o.intermediate, o.hidden);
            d.linear(out, p + "mlp.down_proj.weight", o.hidden, o.intermediate);
        } else {
            moe_tensors(o, d, out, p);
        }
    }
    d.add(out, "model.norm.weight", {o.hidden}, 0.1, 1.0);
    d.linear(out, "lm_head.weight", o.vocab, o.hidden);  // drawn even when tied, so other draws do not move
    if (o.tied) out.pop_back();
    return out;
}

std::string tiny_config_json(const TinyCheckpointOptions& o) {
    Json j;
    const bool quantized = o.quantized() && !o.fp8_dequantized;
    const Json quant = quantization_config_json(o);
    if (!o.composite) {
        j["architectures"] = Json::array({class_name(o.arch)});
        const Json text = text_config(o);
        for (const auto& [k, v] : text.items()) j[k] = v;
        if (quantized) j["quantization_config"] = quant;
        return j.dump(2);
    }
    if (quantized) j["quantization_config"] = quant;
    j["architectures"] = Json::array({"TinyVlmForConditionalGeneration"});
    j["model_type"] = "tiny_vlm";
    j["text_config"] = text_config(o);
    j["vision_config"] = {{"model_type", "tiny_vision"}, {"hidden_size", 8}};
    j["tie_word_embeddings"] = o.tied;
    j["dtype"] = std::string(dtype_name(o.dtype));
    return j.dump(2);
}

void write_tiny_checkpoint(const std::string& dir, const TinyCheckpointOptions& o) {
    MOEX_REQUIRE(o.shards >= 1, ErrorCode::kInvalidArgument, "write_tiny_checkpoint: shards must be >= 1");
    fs::create_directories(dir);
    write_text(fs::path(dir) / "config.json", tiny_config_json(o));
    const Json gen = {{"_from_model_config", true}, {"bos_token_id", 1}, {"eos_token_id", o.vocab - 1}};
    write_text(fs::path(dir) / "generation_config.json", gen.dump(2));

    std::vector<TinyTensor> tensors = tiny_checkpoint_tensors(o);
    if (!o.per_expert) tensors = fuse_experts(o, std::move(tensors));
    if (o.composite) {
        for (TinyTensor& t : tensors)
            if (t.name.rfind("model.", 0) == 0) t.name = "model.language_model." + t.name.substr(6);
        Tensor proj(DType::kF32, {8, 8});  // a vision-tower tensor the text model never reads
        for (int i = 0; i < 64; ++i) static_cast<float*>(proj.data())[i] = 0.01f * float(i);
        tensors.push_back({"model.vision_tower.proj.weight", std::move(proj)});
    }
    std::vector<std::vector<RawTensor>> shards(size_t(o.shards));
    for (size_t i = 0; i < tensors.size(); ++i) {
        std::vector<RawTensor>& shard = shards[i * size_t(o.shards) / tensors.size()];
        const TinyTensor& t = tensors[i];
        const QuantFormat f = quantized_format(o, t.name);
        if (f != QuantFormat::kNone) {
            for (RawTensor& r : encode_linear(o, t.name, t.values, f)) shard.push_back(std::move(r));
            continue;
        }
        const Tensor s = stored(t.values, o.dtype);
        const auto* p = static_cast<const uint8_t*>(s.data());
        const TensorView& v = s.view();
        shard.push_back({t.name, std::string(safetensors_dtype_name(o.dtype)),
                         std::vector<int64_t>(v.shape, v.shape + v.ndim), std::vector<uint8_t>(p, p + v.nbytes())});
    }
    const std::map<std::string, std::string> metadata = {{"format", "pt"}};
    auto write = [&](const fs::path& path, const std::vector<RawTensor>& ts) {
        std::vector<SafetensorsEntry> entries;
        for (const RawTensor& t : ts) entries.push_back({t.name, t.dtype, t.shape, t.bytes});
        write_safetensors(path.string(), entries, metadata);
    };
    if (o.shards == 1) return write(fs::path(dir) / "model.safetensors", shards[0]);
    Json weight_map = Json::object();
    int64_t total = 0;
    for (int s = 0; s < o.shards; ++s) {
        write(fs::path(dir) / shard_name(s, o.shards), shards[size_t(s)]);
        for (const RawTensor& t : shards[size_t(s)]) {
            weight_map[t.name] = shard_name(s, o.shards);
            total += int64_t(t.bytes.size());
        }
    }
    const Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
    write_text(fs::path(dir) / "model.safetensors.index.json", index.dump(2));
}

std::vector<float> checkpoint_tensor_f32(const std::string& dir, const std::string& name) {
    for (const auto& entry : fs::directory_iterator(dir)) {
        if (entry.path().extension() != ".safetensors") continue;
        const SafetensorsFile file = SafetensorsFile::open(entry.path().string());
        if (!file.contains(name)) continue;
        const std::optional<DType> t = dtype_from_safetensors(file.info(name).dtype);
        const std::span<const uint8_t> b = file.bytes(name);
        MOEX_REQUIRE(t.has_value(), ErrorCode::kInvalidArgument, name + " has no moex dtype");
        return floats(b.data(), *t, int64_t(b.size()) / dtype_size(*t), name);
    }
    fail(ErrorCode::kNotFound, dir + ": no safetensors file holds " + name);
}

std::vector<float> host_f32(const DeviceTensor& tensor) {
    const TensorView& v = tensor.view();
    Tensor h(v.dtype, v.shape, v.ndim);
    tensor.copy_to_host(h.view());
    return floats(static_cast<const uint8_t*>(h.data()), v.dtype, v.numel(), "host_f32");
}

void edit_safetensors(const std::string& path, const std::function<void(std::vector<RawTensor>&)>& edit) {
    std::vector<RawTensor> tensors;
    {
        const SafetensorsFile file = SafetensorsFile::open(path);
        for (const std::string& name : file.names()) {
            const SafetensorsInfo& info = file.info(name);
            const std::span<const uint8_t> b = file.bytes(name);
            tensors.push_back({name, info.dtype, info.shape, {b.begin(), b.end()}});
        }
    }
    edit(tensors);
    std::vector<SafetensorsEntry> entries;
    for (const RawTensor& t : tensors) entries.push_back({t.name, t.dtype, t.shape, t.bytes});
    write_safetensors(path, entries, {{"format", "pt"}});
}

std::string tiny_checkpoint_name(const TinyCheckpointOptions& o) {
    std::string s = std::string(architecture_name(o.arch)) + "_" +
                    (o.dtype == DType::kF32    ? "f32"
                     : o.dtype == DType::kBF16 ? "bf16"
                                               : "f16");
    s += o.per_expert ? "_per_expert" : "_fused";
    if (o.shards > 1) s += "_" + std::to_string(o.shards) + "shards";
    if (o.composite) s += "_composite";
    if (o.tied) s += "_tied";
    if (o.fp8_block > 0) s += std::string(o.fp8_dequantized ? "_fp8deq" : "_fp8") + std::to_string(o.fp8_block);
    if (o.fp4 != QuantFormat::kNone)
        s += "_" + std::string(quant_format_name(o.fp4)) + (o.fp8_dequantized ? "deq" : "");
    if (o.dense_layer) s += "_dense";
    return s;
}

}  // namespace moex::test
