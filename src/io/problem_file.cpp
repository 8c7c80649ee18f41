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
    "gate_up_proj_bias (up_proj_bias), down_proj_bias, out; quantized problems add {proj}_scale_inv, "
    "{proj}_global_scale (nvfp4) and {proj}_activation_scale (activation_scheme static)";
constexpr const char* kKnownKeys =
    "activation, is_transposed, is_concatenated, has_gate, gate, swiglu_alpha, swiglu_limit, quant, block, "
    "scale_fmt, activation_scheme (and format, description)";
const std::set<std::string_view> kMetadataKeys = {
    "activation", "is_transposed", "is_concatenated", "has_gate", "gate",        "swiglu_alpha",     "swiglu_limit",
    "quant",      "block",         "scale_fmt",       "format",   "description", "activation_scheme"};

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

    ExpertsQuant& q = p.quant;
    if (const std::string* v = flags.get("quant")) {
        const auto f = quant_format_from_name(*v);
        if (!f) bad(path, "metadata quant = " + io::backticked(*v) + "; allowed: none, fp8_block, mxfp4, nvfp4");
        q.format = *f;
    }
    q.activations = q.format == QuantFormat::kFp8 ? ActivationQuant::kDynamic : ActivationQuant::kNone;
    for (const char* key : {"block", "scale_fmt", "activation_scheme"})
        if (flags.get(key) && !q.enabled())
            bad(path, "metadata " + std::string(key) + " is given but the problem is not quantized (metadata quant)");
    if (const std::string* v = flags.get("block")) {
        if (q.format != QuantFormat::kFp8)
            bad(path, "metadata block applies to quant fp8_block only; " + std::string(quant_format_name(q.format)) +
                          " groups are fixed (mxfp4: 32, nvfp4: 16 along K)");
        const auto block = weight_block_from_name(*v);
        if (!block)
            bad(path, "metadata block = " + io::backticked(*v) + "; expected <rows>x<cols> (e.g. 128x128) or none");
        q.block_n = block->n, q.block_k = block->k;
    }
    if (const std::string* v = flags.get("activation_scheme")) {
        const auto a = activation_quant_from_name(*v);
        if (!a) bad(path, "metadata activation_scheme = " + io::backticked(*v) + "; allowed: none, dynamic, static");
        q.activations = *a;
    }
    if (const std::string* v = flags.get("scale_fmt"); v && *v != "float" && *v != "ue8m0")
        bad(path, "metadata scale_fmt = " + io::backticked(*v) + "; allowed: float, ue8m0");
}

// The scale_fmt flag, when given, names the dtype of the fp8 scales.
void check_scale_fmt(const SafetensorsFile& file, const ExpertsProblem& p) {
    const auto it = file.metadata().find("scale_fmt");
    if (it == file.metadata().end() || p.quant.format != QuantFormat::kFp8) return;
    const DType want = it->second == "ue8m0" ? DType::kUE8M0 : DType::kF32;
    for (const auto* s : {&p.quant.gate_up.scale_inv, &p.quant.down.scale_inv})
        if (s->defined() && s->dtype != want)
            bad(file.path(), "metadata scale_fmt = " + it->second + " but a scale tensor has dtype " +
                                 std::string(dtype_name(s->dtype)) + " (expected " + std::string(dtype_name(want)) +
                                 ")");
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
    const std::string up_s = std::string(up) + "_scale_inv", up_g = std::string(up) + "_global_scale",
                      up_a = std::string(up) + "_activation_scale";
    std::set<std::string_view> known = {"hidden_states", "top_k_index", "top_k_weights",  up,
                                        "down_proj",     up_bias,       "down_proj_bias", "out"};
    if (p.quant.enabled()) {
        known.insert({up_s, "down_proj_scale_inv"});
        if (p.quant.format == QuantFormat::kNvfp4) known.insert({up_g, "down_proj_global_scale"});
        if (p.quant.activations == ActivationQuant::kStatic) known.insert({up_a, "down_proj_activation_scale"});
    }
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
    if (p.quant.enabled()) {
        p.quant.gate_up.scale_inv = required(up_s.c_str());
        p.quant.down.scale_inv = required("down_proj_scale_inv");
        p.quant.gate_up.global_scale = optional(up_g.c_str());
        p.quant.down.global_scale = optional("down_proj_global_scale");
        p.quant.gate_up.activation_scale = optional(up_a.c_str());
        p.quant.down.activation_scale = optional("down_proj_activation_scale");
        check_scale_fmt(file, p);
    }
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
    const std::string up = p.has_gate ? "gate_up_proj" : "up_proj";
    const ExpertsQuant& q = p.quant;
    for (const auto& [name, pq] :
         {std::pair<std::string, const ProjectionQuant*>{up, &q.gate_up}, {"down_proj", &q.down}}) {
        if (!q.enabled()) break;
        tensors.push_back({name + "_scale_inv", pq->scale_inv});
        if (pq->global_scale.defined()) tensors.push_back({name + "_global_scale", pq->global_scale});
        if (pq->activation_scale.defined()) tensors.push_back({name + "_activation_scale", pq->activation_scale});
    }

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
    if (q.enabled()) {
        meta["quant"] = std::string(quant_format_name(q.format));
        meta["activation_scheme"] = std::string(activation_quant_name(q.activations));
        if (q.format == QuantFormat::kFp8) {
            meta["block"] = q.block_n == 0 ? "none" : std::to_string(q.block_n) + "x" + std::to_string(q.block_k);
            meta["scale_fmt"] = q.gate_up.scale_inv.dtype == DType::kUE8M0 ? "ue8m0" : "float";
        }
    }
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
