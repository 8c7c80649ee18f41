// The pre-quantized forms of tiny checkpoints (tiny_checkpoint.h): each linear the method's quantizer converts,
// encoded with moex::quantize_weights and stored under the names and dtypes the hub uses, or decoded back to f32
// (the dequantized twin). Decoding here is written out independently of the loader's decoder.
#include <cstring>
#include <nlohmann/json.hpp>

#include "moex/error.h"
#include "moex/quant.h"
#include "moex/safetensors.h"
#include "tests/tiny_checkpoint.h"

namespace moex::test {

namespace {

bool ends(const std::string& name, const char* suffix) {
    const std::string s(suffix);
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
}

bool expert_tensor(const std::string& name) { return name.find(".experts.") != std::string::npos; }

RawTensor raw(std::string name, const char* dtype, std::vector<int64_t> shape, const Tensor& t) {
    const auto* p = static_cast<const uint8_t*>(t.data());
    return {std::move(name), dtype, std::move(shape), std::vector<uint8_t>(p, p + t.view().nbytes())};
}

// The value of element (e, n, k) of an encoded (E, N, K) weight: code * (scale * global).
float decoded(const QuantizedWeights& q, QuantFormat f, int64_t block, int64_t e, int64_t n, int64_t k, int64_t N,
              int64_t K) {
    const auto* codes = static_cast<const uint8_t*>(q.weights.data());
    const auto* scales = static_cast<const uint8_t*>(q.scale_inv.data());
    if (f == QuantFormat::kFp8) {
        const TensorView& s = q.scale_inv.view();
        const int64_t si = (e * s.shape[1] + n / block) * s.shape[2] + k / block;
        const float scale =
            s.dtype == DType::kF32 ? static_cast<const float*>(q.scale_inv.data())[si] : ue8m0_to_f32(scales[si]);
        return fp8e4m3_to_f32(codes[(e * N + n) * K + k]) * scale;
    }
    const uint8_t byte = codes[(e * N + n) * (K / 2) + k / 2];
    const float code = fp4e2m1_to_f32(k % 2 ? uint8_t(byte >> 4) : uint8_t(byte & 15));
    if (f == QuantFormat::kMxfp4) return code * ue8m0_to_f32(scales[(e * N + n) * (K / 32) + k / 32]);
    const float g = static_cast<const float*>(q.global_scale.data())[e];
    return code * (fp8e4m3_to_f32(scales[(e * N + n) * (K / 16) + k / 16]) * g);
}

}  // namespace

QuantFormat quantized_format(const TinyCheckpointOptions& o, const std::string& name) {
    const bool linear = ends(name, "_proj.weight") || ends(name, ".w1.weight") || ends(name, ".w2.weight") ||
                        ends(name, ".w3.weight") || ends(name, "experts.gate_up_proj") ||
                        ends(name, "experts.down_proj");
    if (!linear) return QuantFormat::kNone;  // embeddings, norms, the router, shared_expert_gate, lm_head
    if (o.fp4 == QuantFormat::kNvfp4) return QuantFormat::kNvfp4;
    if (o.fp4 == QuantFormat::kMxfp4)
        return expert_tensor(name) ? QuantFormat::kMxfp4 : o.fp8_block > 0 ? QuantFormat::kFp8 : QuantFormat::kNone;
    return o.fp8_block > 0 ? QuantFormat::kFp8 : QuantFormat::kNone;
}

nlohmann::ordered_json quantization_config_json(const TinyCheckpointOptions& o) {
    using Json = nlohmann::ordered_json;
    if (o.fp4 == QuantFormat::kNvfp4)
        return Json{{"quant_method", "modelopt"}, {"quant_algo", "NVFP4"}, {"group_size", 16}};
    if (o.fp4 == QuantFormat::kMxfp4 && o.fp8_block == 0) return Json{{"quant_method", "mxfp4"}};
    Json j = {{"quant_method", "fp8"},
              {"weight_block_size", Json::array({o.fp8_block, o.fp8_block})},
              {"activation_scheme", "dynamic"},
              {"scale_fmt", o.fp8_ue8m0 ? "ue8m0" : "float"}};
    if (o.fp4 == QuantFormat::kMxfp4) j["expert_dtype"] = "fp4";
    return j;
}

std::vector<RawTensor> encode_linear(const TinyCheckpointOptions& o, const std::string& name, const Tensor& w,
                                     QuantFormat f) {
    TensorView w3 = w.view();  // quantized as (E, N, K): a linear is one "expert"
    const bool fused = w3.ndim == 3;
    if (!fused) w3 = TensorView::contiguous(w3.data, DType::kF32, {1, w3.shape[0], w3.shape[1]});
    const int64_t E = w3.shape[0], N = w3.shape[1], K = w3.shape[2];
    const bool gate_up = fused && name.find("gate_up_proj") != std::string::npos;
    const DType sdt = f == QuantFormat::kFp8 && !o.fp8_ue8m0 ? DType::kF32 : DType::kUE8M0;
    const QuantizedWeights q = quantize_weights(w3, f, o.fp8_block, o.fp8_block, sdt, gate_up ? 2 : 1);
    auto shape = [&](std::vector<int64_t> s) {  // drop the leading 1 of a linear
        if (!fused) s.erase(s.begin());
        return s;
    };
    if (o.fp8_dequantized) {  // the same values as f32: what a loader must produce from the encoded form
        Tensor deq(DType::kF32, {E, N, K});
        float* d = static_cast<float*>(deq.data());
        for (int64_t e = 0; e < E; ++e)
            for (int64_t n = 0; n < N; ++n)
                for (int64_t k = 0; k < K; ++k) d[(e * N + n) * K + k] = decoded(q, f, o.fp8_block, e, n, k, N, K);
        return {raw(name, "F32", shape({E, N, K}), deq)};
    }
    const TensorView& s = q.scale_inv.view();
    const std::vector<int64_t> sshape(s.shape, s.shape + s.ndim);
    switch (f) {
        case QuantFormat::kFp8:
            return {raw(name, "F8_E4M3", shape({E, N, K}), q.weights),
                    raw(name + "_scale_inv", sdt == DType::kF32 ? "F32" : "F8_E8M0", shape(sshape), q.scale_inv)};
        case QuantFormat::kMxfp4:
            if (o.fp8_block == 0)  // gpt-oss: `_blocks` (E, N, K / 32, 16) and `_scales`, fused experts only
                return {raw(name + "_blocks", "U8", {E, N, K / 32, 16}, q.weights),
                        raw(name + "_scales", "U8", sshape, q.scale_inv)};
            return {raw(name, "I8", shape({E, N, K / 2}), q.weights),  // FineGrainedFP8's expert_dtype fp4
                    raw(name + "_scale_inv", "F8_E8M0", shape(sshape), q.scale_inv)};
        case QuantFormat::kNvfp4:
            return {raw(name, "U8", shape({E, N, K / 2}), q.weights),
                    raw(name + "_scale", "F8_E4M3", shape(sshape), q.scale_inv),
                    raw(name + "_scale_2", "F32", fused ? std::vector<int64_t>{E} : std::vector<int64_t>{},
                        q.global_scale)};
        case QuantFormat::kNone: break;
    }
    fail(ErrorCode::kInvalidArgument, "encode_linear: no format");
}

}  // namespace moex::test
