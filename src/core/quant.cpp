// Quantized experts: format names, the validation of a quantized problem's weights and companions, and the weight
// quantizer of problem files and tests.
#include "moex/quant.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "moex/error.h"
#include "moex/experts.h"
#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"

namespace moex {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(ErrorCode::kInvalidArgument, msg); }

std::string dims(std::initializer_list<int64_t> d) {
    std::string s = "(";
    int i = 0;
    for (int64_t v : d) s += (i++ ? ", " : "") + std::to_string(v);
    return s + ")";
}

void require_dims(const TensorView& t, const std::string& name, std::initializer_list<int64_t> want,
                  const char* letters) {
    bool ok = t.ndim == int(want.size());
    int d = 0;
    for (int64_t v : want) ok = ok && t.shape[d++] == v;
    if (!ok) bad(name + " has shape " + t.shape_string() + ", expected " + dims(want) + " = " + letters);
}

void require_companion(const TensorView& t, const std::string& name, const TensorView& like) {
    if (!t.defined()) bad(name + " is missing");
    if (t.device != like.device || t.device_index != like.device_index)
        bad(name + " is on " + std::string(device_name(t.device)) + " but the weights are on " +
            std::string(device_name(like.device)));
    if (!t.is_contiguous()) bad(name + " must be contiguous (row-major)");
    if (t.data == nullptr && t.numel() > 0) bad(name + " has a null data pointer");
}

void require_divides(int64_t block, int64_t dim, const std::string& what, const char* hint) {
    if (block > 0 && dim % block != 0)
        bad(what + " = " + std::to_string(dim) + " is not a multiple of the block " + std::to_string(block) + "; " +
            hint);
}

// Checks one projection: weights (E, N, K) stored as `storage` and its companions.
void validate_projection(const ExpertsProblem& p, const TensorView& w, const ProjectionQuant& pq, const char* name,
                         int64_t N, int64_t K, const char* n_letter, const char* k_letter, bool gated_up) {
    const ExpertsQuant& q = p.quant;
    const std::string wn = name, sn = std::string(name) + "_scale_inv";
    const int64_t E = p.E();
    if (q.fp4()) {
        if (w.dtype != DType::kU8)
            bad(wn + " has dtype " + std::string(dtype_name(w.dtype)) + ", expected uint8 (two " +
                std::string(quant_format_name(q.format)) + " e2m1 codes per byte)");
        require_divides(q.group_k(), K, wn + " " + k_letter, "FP4 scales cover whole groups along K");
        require_dims(w, wn, {E, N, K / 2}, (std::string("(E, ") + n_letter + ", " + k_letter + " / 2)").c_str());
    } else {
        if (w.dtype != DType::kFP8E4M3)
            bad(wn + " has dtype " + std::string(dtype_name(w.dtype)) + ", expected float8_e4m3fn");
        require_dims(w, wn, {E, N, K}, (std::string("(E, ") + n_letter + ", " + k_letter + ")").c_str());
    }
    require_companion(pq.scale_inv, sn, w);
    switch (q.format) {
        case QuantFormat::kFp8: {
            if (pq.scale_inv.dtype != DType::kF32 && pq.scale_inv.dtype != DType::kUE8M0)
                bad(sn + " has dtype " + std::string(dtype_name(pq.scale_inv.dtype)) +
                    ", expected float32 or float8_e8m0fnu (scale_fmt float | ue8m0)");
            if (q.block_n == 0) {
                require_dims(pq.scale_inv, sn, {E, 1, 1}, "(E, 1, 1) (per-tensor)");
                break;
            }
            const char* hint = "use a weight_block_size that divides it, per-tensor scales, or dequantize";
            require_divides(q.block_n, N, wn + " " + n_letter, hint);
            require_divides(q.block_k, K, wn + " " + k_letter, hint);
            const int64_t rows = N / q.block_n < (gated_up ? 2 : 1) ? (gated_up ? 2 : 1) : N / q.block_n;
            require_dims(pq.scale_inv, sn, {E, rows, K / q.block_k},
                         (std::string("(E, ") + (gated_up ? "max(" : "") + n_letter + " / block_n" +
                          (gated_up ? ", 2)" : "") + ", " + k_letter + " / block_k)")
                             .c_str());
            break;
        }
        case QuantFormat::kMxfp4:
            if (pq.scale_inv.dtype != DType::kUE8M0 && pq.scale_inv.dtype != DType::kU8)
                bad(sn + " has dtype " + std::string(dtype_name(pq.scale_inv.dtype)) +
                    ", expected float8_e8m0fnu or uint8 (mxfp4 scales are ue8m0 bytes)");
            require_dims(pq.scale_inv, sn, {E, N, K / 32},
                         (std::string("(E, ") + n_letter + ", " + k_letter + " / 32)").c_str());
            break;
        case QuantFormat::kNvfp4:
            if (pq.scale_inv.dtype != DType::kFP8E4M3)
                bad(sn + " has dtype " + std::string(dtype_name(pq.scale_inv.dtype)) +
                    ", expected float8_e4m3fn (nvfp4 block scales)");
            require_dims(pq.scale_inv, sn, {E, N, K / 16},
                         (std::string("(E, ") + n_letter + ", " + k_letter + " / 16)").c_str());
            require_companion(pq.global_scale, wn + "_global_scale", w);
            if (pq.global_scale.dtype != DType::kF32)
                bad(wn + "_global_scale has dtype " + std::string(dtype_name(pq.global_scale.dtype)) +
                    ", expected float32");
            require_dims(pq.global_scale, wn + "_global_scale", {E}, "(E,)");
            break;
        case QuantFormat::kNone: break;
    }
    if (q.format != QuantFormat::kNvfp4 && pq.global_scale.defined())
        bad(wn + "_global_scale is given but only nvfp4 weights take a global scale");
    if (q.activations == ActivationQuant::kStatic) {
        const std::string an = wn + "_activation_scale";
        require_companion(pq.activation_scale, an, w);
        if (pq.activation_scale.dtype != DType::kF32)
            bad(an + " has dtype " + std::string(dtype_name(pq.activation_scale.dtype)) + ", expected float32");
        require_dims(pq.activation_scale, an, {E}, "(E,) (one static scale per expert)");
    } else if (pq.activation_scale.defined()) {
        bad(wn + "_activation_scale is given but activation_scheme is " +
            std::string(activation_quant_name(q.activations)) + " (static scales need activation_scheme static)");
    }
}

}  // namespace

std::string_view quant_format_name(QuantFormat f) {
    switch (f) {
        case QuantFormat::kNone: return "none";
        case QuantFormat::kFp8: return "fp8_block";
        case QuantFormat::kMxfp4: return "mxfp4";
        case QuantFormat::kNvfp4: return "nvfp4";
    }
    return "?";
}

std::optional<QuantFormat> quant_format_from_name(std::string_view n) {
    if (n == "none") return QuantFormat::kNone;
    if (n == "fp8_block" || n == "fp8") return QuantFormat::kFp8;
    if (n == "mxfp4") return QuantFormat::kMxfp4;
    if (n == "nvfp4") return QuantFormat::kNvfp4;
    return std::nullopt;
}

std::string_view activation_quant_name(ActivationQuant a) {
    switch (a) {
        case ActivationQuant::kNone: return "none";
        case ActivationQuant::kDynamic: return "dynamic";
        case ActivationQuant::kStatic: return "static";
    }
    return "?";
}

std::optional<ActivationQuant> activation_quant_from_name(std::string_view n) {
    if (n == "none") return ActivationQuant::kNone;
    if (n == "dynamic") return ActivationQuant::kDynamic;
    if (n == "static") return ActivationQuant::kStatic;
    return std::nullopt;
}

std::optional<WeightBlock> weight_block_from_name(std::string_view v) {
    if (v == "none") return WeightBlock{0, 0};
    const size_t x = v.find('x');
    if (x == std::string_view::npos) return std::nullopt;
    auto num = [](std::string_view t, int64_t& out) {
        auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
        return ec == std::errc() && ptr == t.data() + t.size() && out > 0 && out <= (int64_t(1) << 20);
    };
    WeightBlock b{};
    if (!num(v.substr(0, x), b.n) || !num(v.substr(x + 1), b.k)) return std::nullopt;
    return b;
}

// The quantized part of ExpertsProblem::validate(): hidden_states, ids and weights are checked there first.
void validate_quantized(const ExpertsProblem& p) {
    const ExpertsQuant& q = p.quant;
    if (p.is_transposed)
        bad("quantized experts are stored (E, N, K) as transformers' FP8Experts holds them; is_transposed=true is "
            "not supported with quant " +
            std::string(quant_format_name(q.format)));
    if (q.format == QuantFormat::kFp8) {
        if ((q.block_n == 0) != (q.block_k == 0) || q.block_n < 0 || q.block_k < 0)
            bad("weight_block_size (" + std::to_string(q.block_n) + ", " + std::to_string(q.block_k) +
                ") must be two positive sizes, or (0, 0) for per-tensor scales");
    }
    if (q.fp4() && q.activations != ActivationQuant::kNone)
        bad("activation_scheme " + std::string(activation_quant_name(q.activations)) + " is an FP8 scheme; " +
            std::string(quant_format_name(q.format)) +
            " weights take activations as they are (activation_scheme none, weight-only)");
    const int64_t H = p.H(), I = p.I();
    validate_projection(p, p.gate_up_proj, q.gate_up, p.has_gate ? "gate_up_proj" : "up_proj", p.up_width(), H,
                        p.has_gate ? "2I" : "I", "H", p.has_gate);
    validate_projection(p, p.down_proj, q.down, "down_proj", H, I, "H", "I", false);
}

QuantizedWeights quantize_weights(const TensorView& w, QuantFormat format, int64_t block_n, int64_t block_k,
                                  DType scale_dtype, int64_t min_scale_rows) {
    MOEX_REQUIRE(w.device == Device::kCPU && w.ndim == 3 && w.is_contiguous() && is_float_activation(w.dtype),
                 ErrorCode::kInvalidArgument,
                 "quantize_weights takes contiguous host weights (E, N, K) in bf16, f16 or f32");
    const int64_t E = w.shape[0], N = w.shape[1], K = w.shape[2];
    auto at = [&](int64_t i) -> float {
        switch (w.dtype) {
            case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
            case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(w.data)[i]);
            default: return static_cast<const float*>(w.data)[i];
        }
    };
    QuantizedWeights r;
    if (format == QuantFormat::kFp8) {
        MOEX_REQUIRE(scale_dtype == DType::kF32 || scale_dtype == DType::kUE8M0, ErrorCode::kInvalidArgument,
                     "fp8 scales are float32 or float8_e8m0fnu");
        const bool per_tensor = block_n == 0;
        const int64_t bn = per_tensor ? N : block_n, bk = per_tensor ? K : block_k;
        MOEX_REQUIRE(bn > 0 && bk > 0 && N % bn == 0 && K % bk == 0, ErrorCode::kInvalidArgument,
                     "weight_block_size (" + std::to_string(block_n) + ", " + std::to_string(block_k) +
                         ") does not divide the weights " + w.shape_string());
        const int64_t rows = std::max(N / bn, per_tensor ? 1 : min_scale_rows), cols = K / bk;
        r.weights = Tensor(DType::kFP8E4M3, {E, N, K});
        r.scale_inv = Tensor(scale_dtype, {E, rows, cols});
        auto* qd = static_cast<uint8_t*>(r.weights.data());
        cpu::parallel_for(E, cpu::resolve_threads(0), [&](int64_t e) {
            for (int64_t sr = 0; sr < rows; ++sr)
                for (int64_t sc = 0; sc < cols; ++sc) {
                    const int64_t idx = (e * rows + sr) * cols + sc;
                    if (sr * bn >= N) {  // the padding row of min_scale_rows
                        if (scale_dtype == DType::kF32)
                            static_cast<float*>(r.scale_inv.data())[idx] = 1.0f;
                        else
                            static_cast<uint8_t*>(r.scale_inv.data())[idx] = 127;
                        continue;
                    }
                    float amax = 0.0f;
                    for (int64_t n = sr * bn; n < (sr + 1) * bn; ++n)
                        for (int64_t k = sc * bk; k < (sc + 1) * bk; ++k)
                            amax = std::max(amax, std::fabs(at((e * N + n) * K + k)));
                    float s = amax > 0.0f ? amax / 448.0f : 1.0f;
                    if (scale_dtype == DType::kUE8M0) {
                        const uint8_t b = ue8m0_ceil(s);
                        static_cast<uint8_t*>(r.scale_inv.data())[idx] = b;
                        s = ue8m0_to_f32(b);
                    } else {
                        static_cast<float*>(r.scale_inv.data())[idx] = s;
                    }
                    for (int64_t n = sr * bn; n < (sr + 1) * bn; ++n)
                        for (int64_t k = sc * bk; k < (sc + 1) * bk; ++k)
                            qd[(e * N + n) * K + k] = f32_to_fp8e4m3(at((e * N + n) * K + k) / s);
                }
        });
        return r;
    }
    MOEX_REQUIRE(format == QuantFormat::kMxfp4 || format == QuantFormat::kNvfp4, ErrorCode::kInvalidArgument,
                 "quantize_weights: no format given");
    const int64_t g = format == QuantFormat::kMxfp4 ? 32 : 16;
    MOEX_REQUIRE(K % g == 0, ErrorCode::kInvalidArgument,
                 "K = " + std::to_string(K) + " of " + w.shape_string() + " is not a multiple of the FP4 group " +
                     std::to_string(g));
    r.weights = Tensor(DType::kU8, {E, N, K / 2});
    r.scale_inv = Tensor(format == QuantFormat::kMxfp4 ? DType::kUE8M0 : DType::kFP8E4M3, {E, N, K / g});
    auto* qd = static_cast<uint8_t*>(r.weights.data());
    auto* sd = static_cast<uint8_t*>(r.scale_inv.data());
    std::memset(qd, 0, size_t(r.weights.nbytes()));
    std::vector<float> global(static_cast<size_t>(E), 1.0f);
    if (format == QuantFormat::kNvfp4) r.global_scale = Tensor(DType::kF32, {E});
    cpu::parallel_for(E, cpu::resolve_threads(0), [&](int64_t e) {
        if (format == QuantFormat::kNvfp4) {
            float amax = 0.0f;
            for (int64_t i = 0; i < N * K; ++i) amax = std::max(amax, std::fabs(at(e * N * K + i)));
            global[size_t(e)] = amax > 0.0f ? amax / (448.0f * 6.0f) : 1.0f;
            static_cast<float*>(r.global_scale.data())[e] = global[size_t(e)];
        }
        for (int64_t n = 0; n < N; ++n)
            for (int64_t k0 = 0; k0 < K; k0 += g) {
                const int64_t row = (e * N + n) * K;
                float amax = 0.0f;
                for (int64_t k = k0; k < k0 + g; ++k) amax = std::max(amax, std::fabs(at(row + k)));
                float s;
                uint8_t& sb = sd[(e * N + n) * (K / g) + k0 / g];
                if (format == QuantFormat::kMxfp4) {
                    sb = amax > 0.0f ? ue8m0_ceil(amax / 6.0f) : 127;
                    s = ue8m0_to_f32(sb);
                } else {
                    const float gl = global[size_t(e)];
                    sb = amax > 0.0f ? f32_to_fp8e4m3(amax / (6.0f * gl)) : f32_to_fp8e4m3(1.0f);
                    if (fp8e4m3_to_f32(sb) == 0.0f) sb = 0x01;  // a block far below the expert's max: smallest scale
                    s = fp8e4m3_to_f32(sb) * gl;
                }
                for (int64_t k = k0; k < k0 + g; ++k) {
                    const uint8_t c = f32_to_fp4e2m1(at(row + k) / s);
                    qd[(row + k) / 2] |= uint8_t((k & 1) ? c << 4 : c);
                }
            }
    });
    return r;
}

QuantizedExperts quantize_experts(ExpertsProblem& p, QuantFormat format, int64_t block_n, int64_t block_k,
                                  DType scale_dtype) {
    MOEX_REQUIRE(!p.is_transposed, ErrorCode::kInvalidArgument,
                 "quantize_experts: quantized experts are stored (E, N, K); the weights are transposed");
    QuantizedExperts r{quantize_weights(p.gate_up_proj, format, block_n, block_k, scale_dtype, p.has_gate ? 2 : 1),
                       quantize_weights(p.down_proj, format, block_n, block_k, scale_dtype)};
    ExpertsQuant& q = p.quant;
    q.format = format, q.block_n = block_n, q.block_k = block_k;
    p.gate_up_proj = r.gate_up.weights.view(), p.down_proj = r.down.weights.view();
    q.gate_up.scale_inv = r.gate_up.scale_inv.view(), q.down.scale_inv = r.down.scale_inv.view();
    q.gate_up.global_scale = r.gate_up.global_scale.view(), q.down.global_scale = r.down.global_scale.view();
    return r;
}

}  // namespace moex
