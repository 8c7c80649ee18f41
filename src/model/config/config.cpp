// config.json (+ generation_config.json) -> ModelConfig for qwen2_moe, qwen3_moe, mixtral and olmoe, with each
// family's transformers defaults for absent fields (configuration_<family>.py, transformers 5.24) and the text model
// of composite configs (text_config).
#include <filesystem>

#include "moex/error.h"
#include "moex/model_config.h"
#include "src/model/config/internal.h"

namespace moex {

std::string_view architecture_name(Architecture a) {
    switch (a) {
        case Architecture::kQwen2Moe: return "qwen2_moe";
        case Architecture::kQwen3Moe: return "qwen3_moe";
        case Architecture::kMixtral: return "mixtral";
        case Architecture::kOlmoe: return "olmoe";
    }
    return "?";
}

bool ModelConfig::is_moe_layer(int64_t layer) const {
    if (num_experts <= 0 || decoder_sparse_step <= 0) return false;
    for (int64_t l : mlp_only_layers)
        if (l == layer) return false;
    return (layer + 1) % decoder_sparse_step == 0;
}

namespace model {
namespace {

// The dataclass defaults of each family's configuration class.
struct Family {
    Architecture arch;
    int64_t vocab, hidden, intermediate, layers, heads, kv_heads, max_positions;
    double rms_norm_eps, rope_theta;
    int64_t moe_intermediate, shared_intermediate, experts, top_k;
    std::optional<int32_t> bos, eos, pad;
};

constexpr int64_t kSameAsHeads = 0;

const Family kFamilies[] = {
    {Architecture::kQwen2Moe, 151936, 2048, 5632, 24, 16, 16, 32768, 1e-6, 10000.0, 1408, 5632, 60, 4, {}, {}, {}},
    {Architecture::kQwen3Moe, 151936, 2048, 6144, 24, 32, 4, 32768, 1e-6, 10000.0, 768, 0, 128, 8, {}, {}, {}},
    {Architecture::kMixtral, 32000, 4096, 14336, 32, 32, 8, 4096 * 32, 1e-5, 1e6, 14336, 0, 8, 2, 1, 2, {}},
    {Architecture::kOlmoe, 50304, 2048, 2048, 16, 16, kSameAsHeads, 4096, 1e-5, 10000.0, 2048, 0, 64, 8, {}, 50279, 1},
};

const Family& family_of(const JsonFields& f, const std::string& model_type) {
    for (const Family& fam : kFamilies)
        if (architecture_name(fam.arch) == model_type) return fam;
    fail(ErrorCode::kUnsupported, f.label() + ": architecture `" + model_type +
                                      "` is not supported; moex runs qwen2_moe, qwen3_moe, mixtral, olmoe");
}

bool is_qwen(Architecture a) { return a == Architecture::kQwen2Moe || a == Architecture::kQwen3Moe; }

// Every key of the top-level object that holds a sub-config: an object with a model_type, or named *_config.
std::vector<std::string> sub_config_keys(const OrderedJson& top) {
    std::vector<std::string> keys;
    for (auto it = top.begin(); it != top.end(); ++it) {
        const std::string& k = it.key();
        const bool named_config = k.size() > 7 && k.compare(k.size() - 7, 7, "_config") == 0;
        if (!it->is_object() || k == "quantization_config") continue;
        if (it->contains("model_type") || named_config) keys.push_back(k);
    }
    return keys;
}

void read_sizes(const JsonFields& f, const Family& fam, ModelConfig& c) {
    const ExpertFieldNames names = expert_field_names(fam.arch);
    c.vocab_size = f.integer_or("vocab_size", fam.vocab);
    c.hidden_size = f.integer_or("hidden_size", fam.hidden);
    c.num_hidden_layers = f.integer_or("num_hidden_layers", fam.layers);
    c.num_attention_heads = f.integer_or("num_attention_heads", fam.heads);
    c.num_key_value_heads =
        f.integer("num_key_value_heads").value_or(fam.kv_heads == kSameAsHeads ? c.num_attention_heads : fam.kv_heads);
    c.head_dim = f.integer("head_dim").value_or(c.num_attention_heads > 0 ? c.hidden_size / c.num_attention_heads : 0);
    c.max_position_embeddings = f.integer_or("max_position_embeddings", fam.max_positions);
    c.rms_norm_eps = f.number_or("rms_norm_eps", fam.rms_norm_eps);

    if (is_qwen(fam.arch)) {
        c.intermediate_size = f.integer_or("intermediate_size", fam.intermediate);
        c.moe_intermediate_size = f.integer_or("moe_intermediate_size", fam.moe_intermediate);
        c.num_experts = f.integer("num_experts").value_or(f.integer_or("num_local_experts", fam.experts));
        c.decoder_sparse_step = f.integer_or("decoder_sparse_step", 1);
        c.mlp_only_layers = f.integer_list("mlp_only_layers").value_or(std::vector<int64_t>{});
        c.norm_topk_prob = f.boolean_or("norm_topk_prob", false);
    } else {
        c.moe_intermediate_size = f.integer_or(names.expert_intermediate, fam.moe_intermediate);
        c.num_experts = f.integer(names.num_experts).value_or(fam.experts);
        c.norm_topk_prob = fam.arch == Architecture::kMixtral ? true : f.boolean_or("norm_topk_prob", false);
    }
    if (fam.arch == Architecture::kQwen2Moe)
        c.shared_expert_intermediate_size = f.integer_or("shared_expert_intermediate_size", fam.shared_intermediate);
    c.num_experts_per_tok = f.integer_or("num_experts_per_tok", fam.top_k);
}

void read_attention(const JsonFields& f, const Family& fam, ModelConfig& c) {
    switch (fam.arch) {
        case Architecture::kQwen2Moe:  // 4.x configs have no qkv_bias: q/k/v always had biases
            c.attention_bias = f.boolean_or("qkv_bias", true);
            break;
        case Architecture::kQwen3Moe:
        case Architecture::kOlmoe:
            // Here attention_bias also puts a bias on o_proj, which LayerWeights has no slot for.
            if (f.boolean_or("attention_bias", false))
                fail(ErrorCode::kUnsupported, f.where("attention_bias") + " is true (biases on q/k/v/o_proj); moex " +
                                                  "runs " + std::string(architecture_name(fam.arch)) + " without them");
            c.qk_norm = true;
            c.qk_norm_per_head = fam.arch == Architecture::kQwen3Moe;
            break;
        case Architecture::kMixtral: break;
    }
    if (fam.arch == Architecture::kOlmoe) c.clip_qkv = f.number("clip_qkv");
    if (is_qwen(fam.arch)) {  // the default window is 4096 when the field is absent; null means full attention
        if (f.boolean_or("use_sliding_window", false))
            c.sliding_window = f.contains("sliding_window") ? f.integer_or("sliding_window", 0) : 4096;
    } else if (fam.arch == Architecture::kMixtral) {
        c.sliding_window = f.integer_or("sliding_window", 0);
    }
}

DType read_dtype(const JsonFields& f) {
    const std::string key = f.has("dtype") ? "dtype" : "torch_dtype";
    std::string name = *f.string(key);
    if (name.rfind("torch.", 0) == 0) name = name.substr(6);
    if (name == "bfloat16") return DType::kBF16;
    if (name == "float32") return DType::kF32;
    if (name == "float16") return DType::kF16;
    fail(ErrorCode::kFormat, f.where(key) + " `" + name + "` is not supported; moex reads bfloat16, float32, float16");
}

// Fields a composite config may keep at the top level: the text config's own value wins.
void read_shared_fields(const JsonFields& text, const JsonFields& top, const Family& fam, ModelConfig& c) {
    auto pick = [&](std::initializer_list<const char*> keys) -> const JsonFields* {
        for (const JsonFields* f : {&text, &top})
            for (const char* k : keys)
                if (f->has(k)) return f;
        return nullptr;
    };
    if (const JsonFields* f = pick({"dtype", "torch_dtype"})) c.torch_dtype = read_dtype(*f);
    // transformers ties on the top-level config's flag (getattr(self.config, "tie_word_embeddings")).
    for (const JsonFields* f : {&top, &text})
        if (f->has("tie_word_embeddings")) {
            c.tie_word_embeddings = *f->boolean("tie_word_embeddings");
            break;
        }
    // Token ids: a field written as null means "none" (as in transformers), not the family default.
    auto written = [&](const char* key) -> const JsonFields* {
        for (const JsonFields* f : {&text, &top})
            if (f->contains(key)) return f;
        return nullptr;
    };
    if (const JsonFields* f = written("eos_token_id")) {
        const std::vector<int64_t> ids = f->integer_or_list("eos_token_id").value_or(std::vector<int64_t>{});
        for (int64_t id : ids) c.eos_token_ids.push_back(token_id(*f, "eos_token_id", id));
    } else if (fam.eos) {
        c.eos_token_ids = {*fam.eos};
    }
    auto id_field = [&](const char* key, std::optional<int32_t> fallback) -> std::optional<int32_t> {
        const JsonFields* f = written(key);
        if (f == nullptr) return fallback;
        const std::optional<int64_t> v = f->integer(key);
        return v ? std::optional(token_id(*f, key, *v)) : std::nullopt;
    };
    c.bos_token_id = id_field("bos_token_id", fam.bos);
    c.pad_token_id = id_field("pad_token_id", fam.pad);
}

std::vector<std::pair<std::string, std::string>> experts_implementation_of(const JsonFields& top) {
    const OrderedJson* v = top.get("experts_implementation");
    if (v == nullptr) return {};
    if (v->is_string()) return {{"", v->get<std::string>()}};
    if (!v->is_object()) top.fail_type("experts_implementation", "a string or an object of strings");
    std::vector<std::pair<std::string, std::string>> out;
    for (auto it = v->begin(); it != v->end(); ++it) {
        if (it->is_null()) continue;
        if (!it->is_string()) top.fail_type("experts_implementation", "a string or an object of strings");
        out.emplace_back(it.key(), it->get<std::string>());
    }
    return out;
}

std::string generation_label(const std::string& label) {
    const std::string stem = "config.json";
    if (label.size() >= stem.size() && label.compare(label.size() - stem.size(), stem.size(), stem) == 0)
        return label.substr(0, label.size() - stem.size()) + "generation_config.json";
    return label + " (generation_config.json)";
}

}  // namespace
}  // namespace model

ModelConfig parse_model_config(const std::string& config_json, const std::string& generation_config_json,
                               const std::string& label) {
    using namespace model;
    const OrderedJson top = parse_json_object(config_json, label);
    const JsonFields top_fields(top, label);
    ModelConfig c;
    const OrderedJson* text = &top;
    std::string prefix;
    if (const OrderedJson* t = top_fields.get("text_config")) {
        if (!t->is_object()) top_fields.fail_type("text_config", "an object");
        text = t;
        c.text_config_key = "text_config";
        prefix = "text_config.";
    }
    const JsonFields f(*text, label, prefix);
    const std::optional<std::string> model_type = f.string("model_type");
    MOEX_REQUIRE(model_type.has_value(), ErrorCode::kFormat, f.where("model_type") + " is missing");
    const Family& fam = family_of(f, *model_type);
    c.arch = fam.arch;
    c.model_type = *model_type;
    c.sub_config_keys = sub_config_keys(top);

    read_sizes(f, fam, c);
    read_attention(f, fam, c);
    const std::string act = f.string("hidden_act").value_or("silu");
    const std::optional<Activation> activation = activation_from_name(act);
    if (!activation)
        fail(ErrorCode::kFormat,
             f.where("hidden_act") + " `" + act + "` is not supported; moex runs silu, gelu, gelu_pytorch_tanh, relu");
    c.hidden_act = *activation;
    read_shared_fields(f, top_fields, fam, c);
    c.rope = parse_rope_config(f, fam.rope_theta, c.max_position_embeddings);
    c.experts_implementation_in_file = experts_implementation_of(top_fields);
    c.quant = quantization_of(top_fields);
    check_model_config(c, f);

    if (!generation_config_json.empty()) {
        const std::string gen_label = generation_label(label);
        const OrderedJson gen = parse_json_object(generation_config_json, gen_label);
        apply_generation_config(JsonFields(gen, gen_label), c);
    }
    return c;
}

ModelConfig load_model_config(const std::string& dir) {
    namespace fs = std::filesystem;
    // Absent is told apart from present-but-unreadable: a FIFO or a directory named config.json is not "missing",
    // and read_text_file refuses it by kind (a FIFO would block a plain read forever).
    auto absent = [](const fs::path& p) {
        std::error_code ec;
        return fs::symlink_status(p, ec).type() == fs::file_type::not_found;
    };
    const fs::path config_path = fs::path(dir) / "config.json";
    if (absent(config_path))
        fail(ErrorCode::kNotFound, config_path.string() + ": not found (a checkpoint directory needs config.json)");
    const std::string config_text = model::read_text_file(config_path.string(), io::kMaxConfigBytes);
    const fs::path gen_path = fs::path(dir) / "generation_config.json";
    const std::string gen_text = absent(gen_path) ? "" : model::read_text_file(gen_path.string(), io::kMaxConfigBytes);
    return parse_model_config(config_text, gen_text, config_path.string());
}

}  // namespace moex
