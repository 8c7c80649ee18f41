// `moex experts make-problem --shape NAME --tokens T --out P.safetensors [...]`: writes an example problem file with
// a model's expert sizes from common/shapes.h, random data (weights N(0, 0.02), hidden states N(0, 1)), uniform
// top-k routing without duplicates and softmax-normalised weights, in any layout the contract allows, optionally
// quantized (--quant fp8_block | mxfp4 | nvfp4).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "common/cli_parse.h"
#include "common/random_data.h"
#include "common/shapes.h"
#include "moex/error.h"
#include "moex/problem_file.h"
#include "moex/quant.h"
#include "tools/cli.h"

namespace moex::cli {
namespace {

using common::Distribution;
using common::fill_random;
using common::mix_seed;
using common::random_routing;

struct MakeArgs {
    std::string shape, dtype = "bf16", out, activation = "silu", gate = "default", index_dtype = "i64",
                       weights_dtype = "f32", quant = "none", block = "128x128", scale_fmt = "float", activation_scheme;
    int64_t tokens = -1, experts = 0, divide = 1;
    uint64_t seed = 0;
    bool transposed = false, interleaved = false, ungated = false, bias = false;
    double max_gb = 8;
};

shapes::ExpertsShape find_shape(const std::string& name) {
    std::string valid;
    for (const auto& s : shapes::kModelShapes) {
        if (s.name == name) return s;
        valid += (valid.empty() ? "" : ", ") + std::string(s.name);
    }
    fail(ErrorCode::kInvalidArgument, "unknown shape `" + name + "`; valid: " + valid);
}

Tensor random_tensor(DType dtype, std::initializer_list<int64_t> shape, double std, uint64_t seed) {
    Tensor t(dtype, shape);
    fill_random(t.view(), std, seed, Distribution::kNormal);
    return t;
}

// Replaces p's weights by their quantization (moex/quant.h's quantizer); static activation scales are amax(x) / 448
// for every expert's up projection and 8 / 448 for the down one (the gated hidden values of N(0, 0.02) weights
// stay far below 8).
void quantize(const MakeArgs& a, ExpertsProblem& p, QuantizedExperts& weights, Tensor& up_act, Tensor& down_act) {
    const common::QuantOptions o = common::parse_quant_options(a.quant, a.block, a.scale_fmt, a.activation_scheme);
    MOEX_REQUIRE(!p.is_transposed, ErrorCode::kInvalidArgument,
                 "--quant needs (E, N, K) weights as transformers' FP8Experts holds them; drop --transposed");
    weights = quantize_experts(p, o.format, o.block.n, o.block.k, o.scale_dtype);
    ExpertsQuant& q = p.quant;
    q.activations = o.activations;
    if (q.activations == ActivationQuant::kStatic) {
        const int64_t E = p.E(), n = p.hidden_states.numel();
        const TensorView& x = p.hidden_states;
        float amax = 0.0f;
        for (int64_t i = 0; i < n; ++i) {
            const float v = x.dtype == DType::kF32    ? x.ptr<const float>()[i]
                            : x.dtype == DType::kBF16 ? bf16_to_f32(x.ptr<const uint16_t>()[i])
                                                      : f16_to_f32(x.ptr<const uint16_t>()[i]);
            amax = std::max(amax, std::fabs(v));
        }
        up_act = Tensor(DType::kF32, {E}), down_act = Tensor(DType::kF32, {E});
        for (int64_t e = 0; e < E; ++e) {
            static_cast<float*>(up_act.data())[e] = amax > 0.0f ? amax / 448.0f : 1.0f;
            static_cast<float*>(down_act.data())[e] = 8.0f / 448.0f;
        }
        q.gate_up.activation_scale = up_act.view(), q.down.activation_scale = down_act.view();
    }
}

void make(const MakeArgs& a) {
    shapes::ExpertsShape s = find_shape(a.shape);
    MOEX_REQUIRE(a.tokens >= 0, ErrorCode::kInvalidArgument, "--tokens must be >= 0");
    MOEX_REQUIRE(a.divide >= 1, ErrorCode::kInvalidArgument, "--divide must be >= 1");
    MOEX_REQUIRE(a.experts >= 0, ErrorCode::kInvalidArgument, "--scale-e must be >= 0 (0 = the model's E)");
    if (a.divide > 1) s = shapes::scaled(s, a.divide, s.E);
    if (a.experts > 0) s.E = a.experts, s.k = std::min(s.k, s.E);
    const DType dt = parse_activation_dtype(a.dtype);
    const auto act = activation_from_name(a.activation);
    MOEX_REQUIRE(act.has_value(), ErrorCode::kInvalidArgument,
                 "unknown --activation `" + a.activation + "`; valid: silu, gelu, gelu_pytorch_tanh, relu");
    const auto gate = gate_kind_from_name(a.gate);
    MOEX_REQUIRE(gate.has_value(), ErrorCode::kInvalidArgument,
                 "unknown --gate `" + a.gate + "`; valid: default, gpt_oss");
    const auto idt = dtype_from_name(a.index_dtype);
    MOEX_REQUIRE(idt == DType::kI32 || idt == DType::kI64, ErrorCode::kInvalidArgument,
                 "unknown --index-dtype `" + a.index_dtype + "`; valid: i32, i64");
    const DType wdt = a.weights_dtype == "same" ? dt : parse_activation_dtype(a.weights_dtype);
    MOEX_REQUIRE(wdt == DType::kF32 || wdt == dt, ErrorCode::kInvalidArgument,
                 "--weights-dtype must be f32 or the activation dtype (or `same`)");

    const int64_t T = a.tokens, H = s.H, I = s.I, E = s.E, n = a.ungated ? I : 2 * I;
    const double gb = double(dtype_size(dt)) * double(E) * double((n + I) * H) * 1e-9;
    MOEX_REQUIRE(gb <= a.max_gb, ErrorCode::kInvalidArgument,
                 fmt::format("{} with E = {} needs {:.1f} GB of weights in {}, over --max-gb {:.1f}; reduce E with "
                             "--scale-e or H, I with --divide",
                             s.name, E, gb, dtype_name(dt), a.max_gb));
    const uint64_t seed = a.seed;
    Tensor x = random_tensor(dt, {T, H}, 1.0, mix_seed(seed, 1));
    Tensor up = a.transposed ? random_tensor(dt, {E, H, n}, 0.02, mix_seed(seed, 2))
                             : random_tensor(dt, {E, n, H}, 0.02, mix_seed(seed, 2));
    Tensor down = a.transposed ? random_tensor(dt, {E, I, H}, 0.02, mix_seed(seed, 3))
                               : random_tensor(dt, {E, H, I}, 0.02, mix_seed(seed, 3));
    Tensor index(*idt, {T, s.k}), weights(wdt, {T, s.k}), up_bias, down_bias;
    random_routing(index.view(), weights.view(), E, mix_seed(seed, 4));

    ExpertsProblem p;
    p.hidden_states = x.view();
    p.top_k_index = index.view();
    p.top_k_weights = weights.view();
    p.gate_up_proj = up.view();
    p.down_proj = down.view();
    if (a.bias) {
        up_bias = random_tensor(dt, {E, n}, 0.02, mix_seed(seed, 5));
        down_bias = random_tensor(dt, {E, H}, 0.02, mix_seed(seed, 6));
        p.gate_up_bias = up_bias.view();
        p.down_bias = down_bias.view();
    }
    p.has_gate = !a.ungated;
    p.is_transposed = a.transposed;
    p.is_concatenated = !a.interleaved;
    p.activation = *act;
    p.gate = *gate;
    QuantizedExperts quantized;
    Tensor up_act, down_act;
    double stored_gb = gb;
    if (a.quant != "none") {
        quantize(a, p, quantized, up_act, down_act);
        stored_gb = double(p.gate_up_proj.nbytes() + p.down_proj.nbytes() + p.quant.gate_up.scale_inv.nbytes() +
                           p.quant.down.scale_inv.nbytes()) *
                    1e-9;
    }
    save_problem_file(a.out, p);
    fmt::print("wrote {}: {} T={} H={} I={} E={} k={} {}{}{}{}{}, {:.2f} GB of weights\n", a.out, s.name, T, H, I, E,
               s.k, dtype_name(dt), a.transposed ? ", transposed" : "", a.interleaved ? ", interleaved" : "",
               a.ungated ? ", ungated" : "", a.bias ? ", biases" : "", stored_gb);
    if (p.quant.enabled())
        fmt::print(
            "weights quantized: {} ({}), activation_scheme {}\n", quant_format_name(p.quant.format),
            p.quant.format == QuantFormat::kFp8 ? "block " + a.block + ", scale_fmt " + a.scale_fmt : "fixed groups",
            activation_quant_name(p.quant.activations));
}

}  // namespace

void add_make_problem_command(CLI::App& experts) {
    auto a = std::make_shared<MakeArgs>();
    CLI::App* cmd = experts.add_subcommand("make-problem", "Write an example problem file with random data");
    std::string shapes;
    for (const auto& s : shapes::kModelShapes) shapes += (shapes.empty() ? "" : ", ") + std::string(s.name);
    cmd->add_option("--shape", a->shape, "Model expert sizes: " + shapes)->required();
    cmd->add_option("--tokens", a->tokens, "T, the number of tokens")->required();
    cmd->add_option("--dtype", a->dtype, "Activation and weight dtype: bf16, f16, f32")->capture_default_str();
    cmd->add_option("--scale-e", a->experts, "Keep only N experts (k is capped at N); 0 = the model's E");
    cmd->add_option("--divide", a->divide, "Divide H and I by this factor (small files for tests)");
    cmd->add_option("--seed", a->seed, "Random seed")->capture_default_str();
    cmd->add_flag("--transposed", a->transposed, "Weights as (E, H, 2I) and (E, I, H)");
    cmd->add_flag("--interleaved", a->interleaved, "Gate and up columns interleaved [g0, u0, g1, u1, ...]");
    cmd->add_flag("--ungated", a->ungated, "Ungated experts: up_proj (E, I, H), f(x) = down(act(up x))");
    cmd->add_flag("--bias", a->bias, "Add gate_up_proj_bias and down_proj_bias");
    cmd->add_option("--activation", a->activation, "silu, gelu, gelu_pytorch_tanh, relu")->capture_default_str();
    cmd->add_option("--gate", a->gate, "default (act(gate)*up) or gpt_oss (clamped SwiGLU)")->capture_default_str();
    cmd->add_option("--index-dtype", a->index_dtype, "top_k_index dtype: i32, i64")->capture_default_str();
    cmd->add_option("--weights-dtype", a->weights_dtype, "top_k_weights dtype: f32 or same")->capture_default_str();
    cmd->add_option("--max-gb", a->max_gb, "Refuse to write more weights than this")->capture_default_str();
    cmd->add_option("--quant", a->quant, "Quantize the weights: none, fp8_block, mxfp4, nvfp4")->capture_default_str();
    cmd->add_option("--block", a->block, "fp8_block: weight_block_size as <rows>x<cols>, or none (per-tensor)")
        ->capture_default_str();
    cmd->add_option("--scale-fmt", a->scale_fmt, "fp8_block scales: float (f32) or ue8m0")->capture_default_str();
    cmd->add_option("--activation-scheme", a->activation_scheme,
                    "none, dynamic or static (default: dynamic for fp8_block, none for FP4)");
    cmd->add_option("--out", a->out, "Output problem file (.safetensors)")->required();
    cmd->callback([a] { make(*a); });
}

}  // namespace moex::cli
