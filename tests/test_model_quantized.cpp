// Pre-quantized checkpoints in the runtime: FP8 (float and ue8m0 scales, per-expert and fused), FineGrainedFP8's
// FP4 experts, gpt-oss's mxfp4 `_blocks` and modelopt's NVFP4 keep their routed experts resident (codes + scales)
// and generate the greedy tokens of the dequantized load; with dequantize every weight has the bits of the decoded
// twin checkpoint; each bad input gives its named error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "moex/error.h"
#include "moex/model.h"
#include "src/model/weights/weights.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using model::LoadOptions;
using model::ModelWeights;
using test::expect_error;
using test::TinyCheckpointOptions;

struct Checkpoint {
    explicit Checkpoint(const TinyCheckpointOptions& o) : dir(fresh()) { test::write_tiny_checkpoint(dir, o); }
    ~Checkpoint() { fs::remove_all(dir); }
    static std::string fresh() {
        static int counter = 0;
        const fs::path d =
            fs::temp_directory_path() / ("moex_quant_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
        fs::remove_all(d);
        return d.string();
    }
    ModelWeights load(bool dequantize) const {
        return model::load_weights(dir, load_model_config(dir),
                                   LoadOptions{.dtype = DType::kF32, .progress = false, .dequantize = dequantize});
    }
    Model model(bool dequantize) const {
        return Model::from_pretrained(dir, {.num_threads = 2, .progress = false, .dequantize = dequantize});
    }
    std::string file() const { return dir + "/model.safetensors"; }
    std::string dir;
};

TinyCheckpointOptions fp8(Architecture arch, bool per_expert, bool ue8m0) {
    TinyCheckpointOptions o;
    o.arch = arch, o.per_expert = per_expert, o.fp8_block = 8, o.fp8_ue8m0 = ue8m0, o.seed = 5;
    o.dense_layer = arch == Architecture::kQwen2Moe;
    return o;
}
TinyCheckpointOptions fp4(Architecture arch, QuantFormat format, bool per_expert, int64_t fp8_block) {
    TinyCheckpointOptions o;
    o.arch = arch, o.per_expert = per_expert, o.fp4 = format, o.fp8_block = fp8_block, o.seed = 6;
    o.moe_intermediate = 32;  // FP4 groups of 32 along K = I
    return o;
}

// Every quantized form: the options and the format its experts stay in.
std::vector<std::pair<TinyCheckpointOptions, QuantFormat>> forms() {
    return {{fp8(Architecture::kQwen3Moe, true, false), QuantFormat::kFp8},
            {fp8(Architecture::kMixtral, false, true), QuantFormat::kFp8},
            {fp8(Architecture::kQwen2Moe, true, true), QuantFormat::kFp8},
            {fp4(Architecture::kQwen3Moe, QuantFormat::kMxfp4, true, 8), QuantFormat::kMxfp4},
            {fp4(Architecture::kQwen3Moe, QuantFormat::kMxfp4, false, 0), QuantFormat::kMxfp4},
            {fp4(Architecture::kMixtral, QuantFormat::kNvfp4, true, 0), QuantFormat::kNvfp4}};
}

std::vector<float> host(const DeviceTensor& t) { return test::host_f32(t); }

TEST(QuantizedCheckpoint, ExpertsStayResident) {
    for (const auto& [o, format] : forms()) {
        SCOPED_TRACE(test::tiny_checkpoint_name(o));
        const Checkpoint ck(o);
        const ModelWeights w = ck.load(false);
        EXPECT_EQ(w.experts.format, format);
        const model::LayerWeights& l = w.layers[0];
        const DType codes = format == QuantFormat::kFp8 ? DType::kFP8E4M3 : DType::kU8;
        const int64_t K = format == QuantFormat::kFp8 ? o.hidden : o.hidden / 2;
        EXPECT_EQ(l.experts_gate_up.view().dtype, codes);
        EXPECT_EQ(l.experts_gate_up.view().shape[1], 2 * o.moe_intermediate);
        EXPECT_EQ(l.experts_gate_up.view().shape[2], K);
        EXPECT_EQ(l.experts_down.view().dtype, codes);
        EXPECT_TRUE(l.experts_gate_up_scale.view().defined());
        EXPECT_EQ(l.experts_gate_up_global.view().defined(), format == QuantFormat::kNvfp4);
        if (format == QuantFormat::kNvfp4) EXPECT_EQ(l.experts_gate_up_global.view().ndim, 1);
        EXPECT_EQ(l.qkv.view().dtype, DType::kF32);  // dense quantized linears are decoded on load
        const ExpertsQuant q = l.experts_quant(w.experts);
        EXPECT_EQ(q.format, format);
        const ModelWeights d = ck.load(true);
        EXPECT_EQ(d.experts.format, QuantFormat::kNone);
        EXPECT_EQ(d.layers[0].experts_gate_up.view().dtype, DType::kF32);
        EXPECT_EQ(host(w.layers[0].qkv), host(d.layers[0].qkv));
    }
}

// Loose: FP8 experts quantize their activations per token (activation_scheme dynamic) where the dequantized model
// does not, so logits agree to a few percent and greedy tokens of the tiny random model part after a few steps
// (measured: the 4th of 8 for qwen3_moe); FP4 experts are weight-only and give every token.
TEST(QuantizedCheckpoint, ResidentGeneratesTheDequantizedTokens) {
    const std::vector<int32_t> prompt = {3, 14, 15, 9, 26, 5};
    for (const auto& [o, format] : forms()) {
        SCOPED_TRACE(test::tiny_checkpoint_name(o));
        const Checkpoint ck(o);
        Model resident = ck.model(false), deq = ck.model(true);
        const std::vector<float> a = resident.forward(prompt), b = deq.forward(prompt);
        float amax = 0, diff = 0;
        for (size_t i = 0; i < a.size(); ++i)
            amax = std::max(amax, std::fabs(b[i])), diff = std::max(diff, std::fabs(a[i] - b[i]));
        EXPECT_LT(diff, 0.05f * amax) << "max |logit| " << amax;
        resident.reset(), deq.reset();
        const SamplingOptions greedy{.max_new_tokens = 8, .stop_on_eos = false};
        std::vector<int32_t> got = resident.generate(prompt, greedy).new_ids,
                             want = deq.generate(prompt, greedy).new_ids;
        if (format == QuantFormat::kFp8) got.resize(3), want.resize(3);
        EXPECT_EQ(got, want);
    }
}

// With dequantize every weight is the decoded twin's, bit for bit (the loader's decoder against the writer's).
TEST(QuantizedCheckpoint, DequantizeGivesTheDecodedTwin) {
    for (auto [o, format] : forms()) {
        SCOPED_TRACE(test::tiny_checkpoint_name(o));
        const Checkpoint q(o);
        o.fp8_dequantized = true;
        const Checkpoint twin(o);
        const ModelWeights a = q.load(true), b = twin.load(false);
        for (size_t l = 0; l < a.layers.size(); ++l)
            for (DeviceTensor model::LayerWeights::*m :
                 {&model::LayerWeights::qkv, &model::LayerWeights::o_proj, &model::LayerWeights::experts_gate_up,
                  &model::LayerWeights::experts_down, &model::LayerWeights::shared_gate_up,
                  &model::LayerWeights::shared_down, &model::LayerWeights::mlp_gate_up,
                  &model::LayerWeights::mlp_down}) {
                ASSERT_EQ((a.layers[l].*m).view().defined(), (b.layers[l].*m).view().defined());
                if ((a.layers[l].*m).view().defined()) EXPECT_EQ(host(a.layers[l].*m), host(b.layers[l].*m));
            }
    }
}

void edit(const Checkpoint& ck, const std::function<void(std::vector<test::RawTensor>&)>& f) {
    test::edit_safetensors(ck.file(), f);
}
test::RawTensor& find(std::vector<test::RawTensor>& ts, const std::string& name) {
    for (test::RawTensor& t : ts)
        if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
}

TEST(QuantizedCheckpoint, BadCompanionsAreNamed) {
    const std::string e = "model.layers.0.mlp.experts.1.";
    {
        const Checkpoint ck(fp8(Architecture::kQwen3Moe, true, false));
        edit(ck, [&](auto& ts) { find(ts, e + "up_proj.weight_scale_inv").shape = {4, 2}; });
        expect_error([&] { ck.load(false); }, ErrorCode::kFormat,
                     e + "up_proj.weight_scale_inv has shape (4, 2), expected (2, 4) for " + e +
                         "up_proj.weight (16, 32) in blocks of 8x8");
        edit(ck, [&](auto& ts) {
            test::RawTensor& t = find(ts, e + "up_proj.weight_scale_inv");
            t.shape = {2, 4}, t.dtype = "BF16", t.bytes.resize(16);
        });
        expect_error([&] { ck.load(false); }, ErrorCode::kFormat,
                     e + "up_proj.weight_scale_inv has dtype BF16, expected F32 or F8_E8M0 or U8");
        edit(ck, [&](auto& ts) {
            test::RawTensor& t = find(ts, e + "up_proj.weight_scale_inv");
            t.dtype = "F32", t.bytes.resize(32);
            find(ts, e + "down_proj.weight").dtype = "F8_E5M2";
        });
        expect_error([&] { ck.load(true); }, ErrorCode::kFormat,
                     e + "down_proj.weight has dtype F8_E5M2, expected a float tensor");
    }
    {
        const Checkpoint ck(fp4(Architecture::kMixtral, QuantFormat::kNvfp4, true, 0));
        const std::string w = "model.layers.1.block_sparse_moe.experts.2.w2.weight";
        edit(ck, [&](auto& ts) { std::erase_if(ts, [&](auto& t) { return t.name == w + "_scale_2"; }); });
        expect_error([&] { ck.load(true); }, ErrorCode::kNotFound,
                     "tensor `" + w + "_scale_2` not found (the scales of `" + w + "`)");
        edit(ck, [&](auto& ts) { find(ts, w + "_scale").dtype = "U8"; });
        expect_error([&] { ck.load(false); }, ErrorCode::kFormat, w + "_scale has dtype U8, expected F8_E4M3");
    }
    {
        const Checkpoint ck(fp4(Architecture::kQwen3Moe, QuantFormat::kMxfp4, false, 0));
        const std::string w = "model.layers.0.mlp.experts.gate_up_proj";
        edit(ck, [&](auto& ts) { std::erase_if(ts, [&](auto& t) { return t.name == w + "_scales"; }); });
        expect_error([&] { ck.load(false); }, ErrorCode::kNotFound, "tensor `" + w + "_scales` not found");
    }
}

// A block that does not divide the experts' dims: resident FP8 experts need whole blocks (transformers' own
// quantizer leaves such tensors unquantized; other producers write ceil-sized scale grids), dequantize decodes them.
TEST(QuantizedCheckpoint, UndividableDimsAndUnsupportedSchemes) {
    TinyCheckpointOptions o;
    o.moe_intermediate = 24;
    const Checkpoint ck(o);
    edit(ck, [&](auto& ts) {
        std::vector<test::RawTensor> scales;
        for (test::RawTensor& t : ts) {
            if (t.name.find(".experts.") == std::string::npos) continue;
            const int64_t n = t.shape[0], k = t.shape[1];
            std::vector<uint8_t> codes(size_t(n * k));
            for (size_t i = 0; i < codes.size(); ++i) {
                float v;
                std::memcpy(&v, t.bytes.data() + 4 * i, 4);
                codes[i] = f32_to_fp8e4m3(v);
            }
            t.dtype = "F8_E4M3", t.bytes = codes;
            const std::vector<int64_t> grid = {(n + 15) / 16, (k + 15) / 16};
            const float one = 1.0f;
            std::vector<uint8_t> s(size_t(grid[0] * grid[1]) * 4);
            for (size_t i = 0; i < s.size(); i += 4) std::memcpy(s.data() + i, &one, 4);
            scales.push_back({t.name + "_scale_inv", "F32", grid, s});
        }
        for (test::RawTensor& s : scales) ts.push_back(std::move(s));
    });
    nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(test::tiny_config_json(o));
    cfg["quantization_config"] = {{"quant_method", "fp8"}, {"weight_block_size", {16, 16}}};
    std::ofstream(ck.dir + "/config.json") << cfg.dump();
    expect_error([&] { ck.load(false); }, ErrorCode::kUnsupported,
                 "moe_intermediate_size=24 is not a multiple of weight_block_size[0]=16, so the FP8 experts cannot "
                 "stay resident in whole blocks; load it with dequantize");
    EXPECT_EQ(ck.load(true).layers[0].experts_gate_up.view().dtype, DType::kF32);

    cfg["quantization_config"]["activation_scheme"] = "static";
    cfg["quantization_config"]["weight_block_size"] = {8, 8};
    std::ofstream(ck.dir + "/config.json") << cfg.dump();
    expect_error([&] { ck.load(false); }, ErrorCode::kFormat, "has shape (2, 2), expected (3, 4)");
    cfg["quantization_config"] = {{"quant_method", "modelopt"}, {"quant_algo", "FP8"}};
    std::ofstream(ck.dir + "/config.json") << cfg.dump();
    expect_error(
        [&] { load_model_config(ck.dir); }, ErrorCode::kUnsupported,
        "quantization_config.quant_algo `FP8` is not loaded by moex; of modelopt's checkpoints it loads NVFP4");
    cfg["quantization_config"] = {{"quant_method", "gptq"}};
    std::ofstream(ck.dir + "/config.json") << cfg.dump();
    expect_error([&] { load_model_config(ck.dir); }, ErrorCode::kUnsupported,
                 "quant_method `gptq` is not loaded by moex");

    TinyCheckpointOptions s = fp8(Architecture::kQwen3Moe, true, false);
    const Checkpoint st(s);
    nlohmann::ordered_json sc = nlohmann::ordered_json::parse(test::tiny_config_json(s));
    sc["quantization_config"]["activation_scheme"] = "static";
    std::ofstream(st.dir + "/config.json") << sc.dump();
    expect_error([&] { st.load(false); }, ErrorCode::kUnsupported, "activation_scheme static with per-expert tensors");
    EXPECT_EQ(st.load(true).experts.format, QuantFormat::kNone);
}

}  // namespace
}  // namespace moex
