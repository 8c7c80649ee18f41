// Problem files: reads the metadata flags strictly (unknown keys or values are errors that list the allowed ones),
// maps the tensors to an ExpertsProblem and validates it; writes the same format back.
#include "moex/problem_file.h"

#include <charconv>
#include <cmath>
#include <set>

#include "moex/error.h"
#include "src/io/safetensors_header.h"

namespace moex {
namespace {

constexpr const char* kTensorNames =
    "hidden_states, top_k_index, top_k_weights, gate_up_proj (up_proj when has_gate=false), down_proj, and optionally "
    "gate_up_proj_bias (up_proj_bias), down_proj_bias, out";
constexpr const char* kKnownKeys =
    "activation, is_transposed, is_concatenated, has_gate, gate, swiglu_alpha, swiglu_limit (and format, description)";
const std::set<std::string_view> kMetadataKeys = {"activation",   "is_transposed", "is_concatenated",
                                                  "has_gate",     "gate",          "swiglu_alpha",
                                                  "swiglu_limit", "format",        "description"};

[[noreturn]] void bad(const std::string& path, const std::string& msg) {
    fail(ErrorCode::kInvalidArgument, path + ": " + msg);
}

class Flags {
   public:
    Flags(const std::map<std::string, std::string>& m, const std::string& path) : m_(m), path_(path) {}

    const std::string* get(const char* key) const {
        auto it = m_.find(key);
        return it == m_.end() ? nullptr : &it->second;
    }
    bool boolean(const char* key, bool fallback) const {
        const std::string* v = get(key);
        if (v == nullptr) return fallback;
        if (*v == "true" || *v == "True") return true;
        if (*v == "false" || *v == "False") return false;
        bad(path_, "metadata " + std::string(key) + " = " + io::backticked(*v) + "; allowed: true, false");
    }
    float number(const char* key, float fallback) const {
        const std::string* v = get(key);
        if (v == nullptr) return fallback;
        float f = 0;
        const char* end = v->data() + v->size();
        auto [ptr, ec] = std::from_chars(v->data(), end, f);
        if (ec != std::errc() || ptr != end || !std::isfinite(f))
            bad(path_, "metadata " + std::string(key) + " = " + io::backticked(*v) + " is not a finite number");
        return f;
    }

   private:
    const std::map<std::string, std::string>& m_;
    const std::string& path_;
};

void read_flags(const SafetensorsFile& file, ExpertsProblem& p) {
    const std::string& path = file.path();
    for (const auto& [key, value] : file.metadata())
        if (!kMetadataKeys.count(key))
            bad(path, "unknown metadata key " + io::backticked(key) + "; known: " + kKnownKeys);
    const Flags flags(file.metadata(), path);
    if (const std::string* a = flags.get("activation")) {
        const auto act = activation_from_name(*a);
        if (!act)
            bad(path, "metadata activation = " + io::backticked(*a) + "; allowed: silu, gelu, gelu_pytorch_tanh, relu");
        p.activation = *act;
    }
    p.is_transposed = flags.boolean("is_transposed", false);
    p.is_concatenated = flags.boolean("is_concatenated", true);
    p.has_gate = flags.boolean("has_gate", true);
    if (const std::string* g = flags.get("gate")) {
        const auto gate = gate_kind_from_name(*g);
        if (!gate) bad(path, "metadata gate = " + io::backticked(*g) + "; allowed: default, gpt_oss");
        p.gate = *gate;
    }
    p.swiglu_alpha = flags.number("swiglu_alpha", 1.702f);
    p.swiglu_limit = flags.number("swiglu_limit", 7.0f);
}

}  // namespace

ProblemFile problem_from_safetensors(SafetensorsFile file) {
    const std::string path = file.path();
    ExpertsProblem p;
    read_flags(file, p);
    const char* up = p.has_gate ? "gate_up_proj" : "up_proj";
    const char* up_bias = p.has_gate ? "gate_up_proj_bias" : "up_proj_bias";
    const char* other_up = p.has_gate ? "up_proj" : "gate_up_proj";
    if (file.contains(other_up) && !file.contains(up))
        bad(path, std::string("has_gate is ") + (p.has_gate ? "true" : "false") + " but the file holds `" + other_up +
                      "` instead of `" + up + "`; set metadata has_gate=" + (p.has_gate ? "false" : "true"));
    const std::set<std::string_view> known = {"hidden_states", "top_k_index", "top_k_weights",  up,
                                              "down_proj",     up_bias,       "down_proj_bias", "out"};
    for (const std::string& name : file.names())
        if (!known.count(name))
            bad(path, "unexpected tensor " + io::backticked(name) + "; a problem file holds " + kTensorNames);

    auto required = [&](const char* name) {
        if (!file.contains(name))
            bad(path, std::string("missing tensor `") + name + "`; a problem file holds " + kTensorNames);
        return file.view(name);
    };
    auto optional = [&](const char* name) { return file.contains(name) ? file.view(name) : TensorView{}; };
    p.hidden_states = required("hidden_states");
    p.top_k_index = required("top_k_index");
    p.top_k_weights = required("top_k_weights");
    p.gate_up_proj = required(up);
    p.down_proj = required("down_proj");
    p.gate_up_bias = optional(up_bias);
    p.down_bias = optional("down_proj_bias");
    TensorView expected = optional("out");
    try {
        p.validate();
        if (expected.defined()) p.validate_output(expected);
    } catch (const Error& e) {
        fail(e.code(), path + ": " + e.what());
    }
    return ProblemFile{std::move(file), p, expected};
}

ProblemFile load_problem_file(const std::string& path) { return problem_from_safetensors(SafetensorsFile::open(path)); }

void save_problem_file(const std::string& path, const ExpertsProblem& p, const TensorView& expected) {
    try {
        p.validate();
    } catch (const Error& e) {
        fail(e.code(), path + ": " + e.what());
    }
    std::vector<NamedTensor> tensors = {{"hidden_states", p.hidden_states},
                                        {"top_k_index", p.top_k_index},
                                        {"top_k_weights", p.top_k_weights},
                                        {p.has_gate ? "gate_up_proj" : "up_proj", p.gate_up_proj},
                                        {"down_proj", p.down_proj}};
    if (p.gate_up_bias.defined())
        tensors.push_back({p.has_gate ? "gate_up_proj_bias" : "up_proj_bias", p.gate_up_bias});
    if (p.down_bias.defined()) tensors.push_back({"down_proj_bias", p.down_bias});
    if (expected.defined()) tensors.push_back({"out", expected});

    auto text = [](bool b) { return std::string(b ? "true" : "false"); };
    auto number = [](float f) {
        char buf[32];
        auto [end, ec] = std::to_chars(buf, buf + sizeof buf, f);  // shortest text that reads back exactly
        return std::string(buf, ec == std::errc() ? end : buf);
    };
    std::map<std::string, std::string> meta = {{"activation", std::string(activation_name(p.activation))},
                                               {"is_transposed", text(p.is_transposed)},
                                               {"is_concatenated", text(p.is_concatenated)},
                                               {"has_gate", text(p.has_gate)},
                                               {"gate", std::string(gate_kind_name(p.gate))}};
    if (p.gate == GateKind::kGptOss) {
        meta["swiglu_alpha"] = number(p.swiglu_alpha);
        meta["swiglu_limit"] = number(p.swiglu_limit);
    }
    write_safetensors(path, tensors, meta);
}

void save_output_file(const std::string& path, const TensorView& out,
                      const std::map<std::string, std::string>& metadata) {
    write_safetensors(path, std::vector<NamedTensor>{{"out", out}}, metadata);
}

}  // namespace moex
