// Checkpoint loading: every architecture x {per-expert, fused} x {1, 3 shards} x {f32, bf16} source loads and each
// weight equals its source tensors (fused experts gate rows first, q/k/v stacked), composite and tied checkpoints,
// the run-dtype conversions, and one test per error (its code and the message naming the file and the tensor).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "moex/error.h"
#include "moex/safetensors.h"
#include "src/model/weights/progress.h"
#include "src/model/weights/weights.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

using test::expect_error;

namespace fs = std::filesystem;
using model::LoadOptions;
using model::ModelWeights;
using test::TinyCheckpointOptions;

std::string fresh_dir() {
    static int counter = 0;
    const fs::path d =
        fs::temp_directory_path() / ("moex_weights_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(d);
    return d.string();
}

// A checkpoint written into a fresh folder, removed at the end of the test.
struct Checkpoint {
    explicit Checkpoint(const TinyCheckpointOptions& o) : options(o), dir(fresh_dir()) {
        test::write_tiny_checkpoint(dir, o);
    }
    ~Checkpoint() { fs::remove_all(dir); }
    ModelConfig config() const { return load_model_config(dir); }
    ModelWeights load(DType dtype = DType::kF32, bool dequantize = false) const {
        return model::load_weights(dir, config(),
                                   LoadOptions{.dtype = dtype, .progress = false, .dequantize = dequantize});
    }
    TinyCheckpointOptions options;
    std::string dir;
};

// The checkpoint's tensors as f32 rounded through the run dtype.
class Sources {
   public:
    Sources(std::string dir, DType run) : dir_(std::move(dir)), run_(run) {}
    std::vector<float> operator()(const std::string& name) const {
        std::vector<float> v = test::checkpoint_tensor_f32(dir_, name);
        if (run_ == DType::kBF16)
            for (float& x : v) x = bf16_to_f32(f32_to_bf16(x));
        return v;
    }
    std::vector<float> cat(const std::vector<std::string>& names) const {
        std::vector<float> out;
        for (const std::string& n : names) {
            const std::vector<float> part = (*this)(n);
            out.insert(out.end(), part.begin(), part.end());
        }
        return out;
    }

   private:
    std::string dir_;
    DType run_;
};

std::vector<float> host(const DeviceTensor& t) { return test::host_f32(t); }

std::vector<int64_t> shape(const DeviceTensor& t) { return {t.view().shape, t.view().shape + t.view().ndim}; }

// Checks every weight of `w` against the checkpoint's source tensors, knowing the tiny writer's names.
void expect_matches_sources(const ModelWeights& w, const Checkpoint& ck, DType run) {
    const TinyCheckpointOptions& o = ck.options;
    const Sources src(ck.dir, run);
    const std::string p = o.composite ? "model.language_model." : "model.";
    const bool mixtral = o.arch == Architecture::kMixtral;
    EXPECT_EQ(host(w.embed), src(p + "embed_tokens.weight"));
    EXPECT_EQ(host(w.final_norm), src(p + "norm.weight"));
    EXPECT_EQ(host(w.lm_head), src(o.tied ? p + "embed_tokens.weight" : "lm_head.weight"));
    ASSERT_EQ(int64_t(w.layers.size()), o.layers);
    for (int64_t l = 0; l < o.layers; ++l) {
        SCOPED_TRACE("layer " + std::to_string(l));
        const model::LayerWeights& lw = w.layers[size_t(l)];
        const std::string L = p + "layers." + std::to_string(l) + ".", a = L + "self_attn.";
        EXPECT_EQ(lw.qkv.view().dtype, run);
        EXPECT_EQ(shape(lw.qkv), (std::vector<int64_t>{(o.heads + 2 * o.kv_heads) * o.head_dim, o.hidden}));
        EXPECT_EQ(host(lw.qkv), src.cat({a + "q_proj.weight", a + "k_proj.weight", a + "v_proj.weight"}));
        EXPECT_EQ(host(lw.o_proj), src(a + "o_proj.weight"));
        EXPECT_EQ(host(lw.input_norm), src(L + "input_layernorm.weight"));
        EXPECT_EQ(host(lw.post_norm), src(L + "post_attention_layernorm.weight"));
        EXPECT_EQ(lw.qkv_bias.view().defined(), o.arch == Architecture::kQwen2Moe);
        if (lw.qkv_bias.view().defined())
            EXPECT_EQ(host(lw.qkv_bias), src.cat({a + "q_proj.bias", a + "k_proj.bias", a + "v_proj.bias"}));
        EXPECT_EQ(lw.q_norm.view().defined(), o.arch == Architecture::kQwen3Moe || o.arch == Architecture::kOlmoe);
        if (lw.q_norm.view().defined()) {
            EXPECT_EQ(host(lw.q_norm), src(a + "q_norm.weight"));
            EXPECT_EQ(host(lw.k_norm), src(a + "k_norm.weight"));
        }
        if (o.dense_layer && l == 1) {
            ASSERT_FALSE(lw.is_moe());
            EXPECT_EQ(host(lw.mlp_gate_up), src.cat({L + "mlp.gate_proj.weight", L + "mlp.up_proj.weight"}));
            EXPECT_EQ(host(lw.mlp_down), src(L + "mlp.down_proj.weight"));
            continue;
        }
        ASSERT_TRUE(lw.is_moe());
        EXPECT_FALSE(lw.mlp_gate_up.view().defined());
        const std::string m = L + (mixtral && o.per_expert ? "block_sparse_moe." : "mlp.");
        EXPECT_EQ(host(lw.router), src(m + "gate.weight"));
        EXPECT_EQ(shape(lw.experts_gate_up), (std::vector<int64_t>{o.experts, 2 * o.moe_intermediate, o.hidden}));
        EXPECT_EQ(shape(lw.experts_down), (std::vector<int64_t>{o.experts, o.hidden, o.moe_intermediate}));
        if (o.per_expert) {
            const char *g = mixtral ? "w1" : "gate_proj", *u = mixtral ? "w3" : "up_proj",
                       *d = mixtral ? "w2" : "down_proj";
            std::vector<std::string> gate_up, down;
            for (int64_t e = 0; e < o.experts; ++e) {
                const std::string x = m + "experts." + std::to_string(e) + ".";
                gate_up.insert(gate_up.end(), {x + g + ".weight", x + u + ".weight"});  // gate rows first
                down.push_back(x + d + ".weight");
            }
            EXPECT_EQ(host(lw.experts_gate_up), src.cat(gate_up));
            EXPECT_EQ(host(lw.experts_down), src.cat(down));
        } else {
            EXPECT_EQ(host(lw.experts_gate_up), src(m + "experts.gate_up_proj"));
            EXPECT_EQ(host(lw.experts_down), src(m + "experts.down_proj"));
        }
        EXPECT_EQ(lw.shared_gate_up.view().defined(), o.arch == Architecture::kQwen2Moe);
        if (lw.shared_gate_up.view().defined()) {
            const std::string s = m + "shared_expert.";
            EXPECT_EQ(host(lw.shared_gate_up), src.cat({s + "gate_proj.weight", s + "up_proj.weight"}));
            EXPECT_EQ(host(lw.shared_down), src(s + "down_proj.weight"));
            EXPECT_EQ(shape(lw.shared_gate), (std::vector<int64_t>{1, o.hidden}));
            EXPECT_EQ(host(lw.shared_gate), src(m + "shared_expert_gate.weight"));
        }
    }
}

using Form = std::tuple<Architecture, bool, int, DType>;  // arch, per_expert, shards, stored dtype

class ModelWeightsForms : public ::testing::TestWithParam<Form> {};

TEST_P(ModelWeightsForms, LoadsAndMatchesSources) {
    TinyCheckpointOptions o;
    std::tie(o.arch, o.per_expert, o.shards, o.dtype) = GetParam();
    o.seed = 7;
    const Checkpoint ck(o);
    expect_matches_sources(ck.load(DType::kF32), ck, DType::kF32);
}

INSTANTIATE_TEST_SUITE_P(ModelWeights, ModelWeightsForms,
                         ::testing::Combine(::testing::Values(Architecture::kQwen2Moe, Architecture::kQwen3Moe,
                                                              Architecture::kMixtral, Architecture::kOlmoe),
                                            ::testing::Bool(), ::testing::Values(1, 3),
                                            ::testing::Values(DType::kF32, DType::kBF16)),
                         [](const ::testing::TestParamInfo<Form>& info) {
                             TinyCheckpointOptions o;
                             std::tie(o.arch, o.per_expert, o.shards, o.dtype) = info.param;
                             return test::tiny_checkpoint_name(o);
                         });

void expect_same_weights(const ModelWeights& a, const ModelWeights& b) {
    EXPECT_EQ(host(a.embed), host(b.embed));
    EXPECT_EQ(host(a.lm_head), host(b.lm_head));
    for (size_t l = 0; l < a.layers.size(); ++l) {
        EXPECT_EQ(host(a.layers[l].qkv), host(b.layers[l].qkv));
        EXPECT_EQ(host(a.layers[l].experts_gate_up), host(b.layers[l].experts_gate_up));
        EXPECT_EQ(host(a.layers[l].experts_down), host(b.layers[l].experts_down));
    }
}

TEST(ModelWeights, EveryFormHoldsTheSameModel) {
    for (Architecture arch : {Architecture::kQwen2Moe, Architecture::kMixtral}) {
        TinyCheckpointOptions o;
        o.arch = arch;
        const Checkpoint plain(o);
        const ModelWeights ref = plain.load();
        o.per_expert = false;
        o.shards = 3;
        expect_same_weights(ref, Checkpoint(o).load());
        o.composite = true;
        expect_same_weights(ref, Checkpoint(o).load());
    }
}

// A pre-quantized FP8 checkpoint (quantization_config fp8, F8_E4M3 linears with `_scale_inv`, f32 or ue8m0 scales,
// per-expert or fused experts) loaded with dequantize: every weight has the bits of the f32 checkpoint of the same
// quantized values.
TEST(ModelWeights, Fp8CheckpointDequantizesOnLoad) {
    for (Architecture arch : {Architecture::kQwen2Moe, Architecture::kQwen3Moe, Architecture::kMixtral})
        for (bool per_expert : {true, false})
            for (bool ue8m0 : {false, true}) {
                TinyCheckpointOptions o;
                o.arch = arch, o.per_expert = per_expert, o.dense_layer = arch == Architecture::kQwen2Moe;
                o.fp8_block = 8, o.fp8_ue8m0 = ue8m0, o.seed = 3;
                const Checkpoint fp8(o);
                EXPECT_EQ(fp8.config().quant.format, QuantFormat::kFp8);
                const SafetensorsFile file = SafetensorsFile::open(fp8.dir + "/model.safetensors");
                const std::string experts = arch == Architecture::kMixtral && per_expert
                                                ? "model.layers.0.block_sparse_moe.experts."
                                                : "model.layers.0.mlp.experts.";
                const std::string w =
                    experts + (per_expert ? (arch == Architecture::kMixtral ? "0.w1.weight" : "0.gate_proj.weight")
                                          : "gate_up_proj");
                ASSERT_TRUE(file.contains(w + "_scale_inv")) << w;
                EXPECT_EQ(file.info(w).dtype, "F8_E4M3");
                o.fp8_dequantized = true;
                const Checkpoint deq(o);
                const ModelWeights a = fp8.load(DType::kF32, true), b = deq.load();
                SCOPED_TRACE(test::tiny_checkpoint_name(o));
                auto same = [](const DeviceTensor& x, const DeviceTensor& y) {
                    ASSERT_EQ(x.view().defined(), y.view().defined());
                    if (x.view().defined()) EXPECT_EQ(host(x), host(y));
                };
                for (size_t l = 0; l < a.layers.size(); ++l)
                    for (DeviceTensor model::LayerWeights::*m :
                         {&model::LayerWeights::o_proj, &model::LayerWeights::router,
                          &model::LayerWeights::shared_gate_up, &model::LayerWeights::shared_down,
                          &model::LayerWeights::mlp_gate_up, &model::LayerWeights::mlp_down})
                        same(a.layers[l].*m, b.layers[l].*m);
                for (size_t l = 0; l < a.layers.size(); ++l)
                    for (DeviceTensor model::LayerWeights::*m :
                         {&model::LayerWeights::qkv, &model::LayerWeights::experts_gate_up,
                          &model::LayerWeights::experts_down})
                        same(a.layers[l].*m, b.layers[l].*m);
                same(a.embed, b.embed);
                same(a.lm_head, b.lm_head);
            }
}

TEST(ModelWeights, Fp8CheckpointErrorsNameTheTensor) {
    TinyCheckpointOptions o;
    o.fp8_block = 8;
    const Checkpoint ck(o);
    const std::string path = ck.dir + "/model.safetensors";
    const std::string scale = "model.layers.0.self_attn.o_proj.weight_scale_inv";
    test::edit_safetensors(path, [&](std::vector<test::RawTensor>& ts) {
        for (auto& t : ts)
            if (t.name == scale) t.shape = {2, 4}, t.bytes.resize(32);
    });
    test::expect_error([&] { ck.load(); }, ErrorCode::kFormat,
                       scale +
                           " has shape (2, 4), expected (4, 4) for model.layers.0.self_attn.o_proj.weight (32, 32) "
                           "in blocks of 8x8");
    test::edit_safetensors(path, [&](std::vector<test::RawTensor>& ts) {
        std::erase_if(ts, [&](const test::RawTensor& t) { return t.name == scale; });
    });
    test::expect_error([&] { ck.load(); }, ErrorCode::kNotFound, "`" + scale + "` not found");
    // F8_E4M3 tensors without a quantization_config are refused by name.
    std::string cfg = test::tiny_config_json(o);
    const size_t at = cfg.find("\"quantization_config\"");
    ASSERT_NE(at, std::string::npos);
    std::ofstream(ck.dir + "/config.json") << cfg.replace(at, 21, "\"quantization_confiq\"");
    test::expect_error([&] { ck.load(); }, ErrorCode::kFormat,
                       "has dtype F8_E4M3 but config.json has no quantization_config with quant_method fp8");
    std::string other = test::tiny_config_json(o);
    other.replace(other.find("\"fp8\""), 5, "\"awq\"");
    std::ofstream(ck.dir + "/config.json") << other;
    test::expect_error([&] { ck.config(); }, ErrorCode::kUnsupported,
                       "quantization_config.quant_method `awq` is not loaded by moex; it loads fp8");
}

TEST(ModelWeights, CompositeCheckpoint) {
    for (bool per_expert : {true, false}) {
        TinyCheckpointOptions o;
        o.arch = Architecture::kQwen3Moe;
        o.composite = true;
        o.per_expert = per_expert;
        o.shards = 2;
        const Checkpoint ck(o);
        EXPECT_EQ(ck.config().text_config_key, "text_config");
        expect_matches_sources(ck.load(), ck, DType::kF32);
    }
}

TEST(ModelWeights, DenseLayer) {
    for (Architecture arch : {Architecture::kQwen2Moe, Architecture::kQwen3Moe})
        for (bool per_expert : {true, false}) {
            TinyCheckpointOptions o;
            o.arch = arch;
            o.per_expert = per_expert;
            o.dense_layer = true;
            const Checkpoint ck(o);
            const ModelWeights w = ck.load();
            EXPECT_EQ(shape(w.layers[1].mlp_gate_up), (std::vector<int64_t>{2 * o.intermediate, o.hidden}));
            expect_matches_sources(w, ck, DType::kF32);
        }
}

TEST(ModelWeights, TiedEmbeddingsShareStorage) {
    TinyCheckpointOptions o;
    o.arch = Architecture::kOlmoe;
    o.tied = true;
    const Checkpoint ck(o);
    const ModelWeights w = ck.load();
    EXPECT_EQ(w.lm_head.view().data, w.embed.view().data);
    expect_matches_sources(w, ck, DType::kF32);
}

TEST(ModelWeights, RunDtypeConversions) {
    for (DType stored : {DType::kF32, DType::kBF16, DType::kF16})
        for (DType run : {DType::kF32, DType::kBF16}) {
            TinyCheckpointOptions o;
            o.arch = Architecture::kMixtral;
            o.dtype = stored;
            o.per_expert = stored != DType::kF16;
            const Checkpoint ck(o);
            SCOPED_TRACE(test::tiny_checkpoint_name(o) + " -> " + std::string(dtype_name(run)));
            expect_matches_sources(ck.load(run), ck, run);
        }
    Checkpoint ck(TinyCheckpointOptions{});
    try {
        ck.load(DType::kF16);
        ADD_FAILURE() << "f16 run dtype accepted";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    }
}

TEST(ModelWeights, NoProgressOutputWhenStderrIsNotATerminal) {
    if (::isatty(2)) GTEST_SKIP() << "stderr is a terminal here";
    const Checkpoint ck(TinyCheckpointOptions{});
    ::testing::internal::CaptureStderr();
    model::load_weights(ck.dir, ck.config(), LoadOptions{.dtype = DType::kF32, .progress = true});
    EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(model::human_bytes(999), "999 B");
    EXPECT_EQ(model::human_bytes(1'234'567'890), "1.2 GB");
}

TEST(ModelWeights, CudaMatchesCpu) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    TinyCheckpointOptions o;
    o.arch = Architecture::kQwen2Moe;
    o.dtype = DType::kBF16;
    const Checkpoint ck(o);
    const ModelWeights cpu = ck.load(DType::kBF16);
    const ModelWeights gpu = model::load_weights(
        ck.dir, ck.config(), LoadOptions{.dtype = DType::kBF16, .device = Device::kCUDA, .progress = false});
    EXPECT_EQ(gpu.layers[0].experts_gate_up.view().device, Device::kCUDA);
    expect_same_weights(cpu, gpu);
}

#if !MOEX_WITH_CUDA
TEST(ModelWeights, CudaRefusedWithoutCuda) {
    const Checkpoint ck(TinyCheckpointOptions{});
    try {
        model::load_weights(ck.dir, ck.config(), LoadOptions{.device = Device::kCUDA, .progress = false});
        ADD_FAILURE() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
    }
}
#endif

// ---- errors: each names the file and the tensor ----

void edit(const Checkpoint& ck, const std::string& file, const std::function<void(std::vector<test::RawTensor>&)>& f) {
    test::edit_safetensors((fs::path(ck.dir) / file).string(), f);
}

test::RawTensor& find(std::vector<test::RawTensor>& ts, const std::string& name) {
    for (test::RawTensor& t : ts)
        if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
}

void rewrite_index(const Checkpoint& ck, const std::string& from, const std::string& to) {
    const fs::path index = fs::path(ck.dir) / "model.safetensors.index.json";
    std::ifstream in(index);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    std::ofstream(index) << text;
}

TEST(ModelWeights, WrongShapeNamesTensorAndConfigFields) {
    const Checkpoint ck(TinyCheckpointOptions{});
    const std::string name = "model.layers.1.mlp.experts.3.up_proj.weight";
    edit(ck, "model.safetensors", [&](auto& ts) {
        find(ts, name).shape = {16, 30};
        find(ts, name).bytes.resize(16 * 30 * 4);
    });
    expect_error(
        [&] { ck.load(); }, ErrorCode::kFormat,
        "model.safetensors: " + name +
            " has shape (16, 30), expected (16, 32) from config.json (moe_intermediate_size=16, hidden_size=32)");
}

TEST(ModelWeights, WrongFusedShapeAndCompositeFieldNames) {
    TinyCheckpointOptions o;
    o.arch = Architecture::kMixtral;
    o.per_expert = false;
    o.composite = true;
    const Checkpoint ck(o);
    edit(ck, "model.safetensors", [&](auto& ts) {
        find(ts, "model.language_model.layers.0.mlp.experts.down_proj").shape = {4, 16, 32};
    });
    expect_error([&] { ck.load(); }, ErrorCode::kFormat,
                 "model.language_model.layers.0.mlp.experts.down_proj has shape (4, 16, 32), expected (4, 32, 16) from "
                 "config.json (text_config.num_local_experts=4, text_config.hidden_size=32, "
                 "text_config.intermediate_size=16)");
}

TEST(ModelWeights, WrongDtype) {
    const Checkpoint ck(TinyCheckpointOptions{});
    edit(ck, "model.safetensors", [&](auto& ts) { find(ts, "model.layers.0.self_attn.k_norm.weight").dtype = "I32"; });
    expect_error([&] { ck.load(); }, ErrorCode::kFormat,
                 "model.layers.0.self_attn.k_norm.weight has dtype I32, expected a float tensor (F32, BF16 or F16)");
}

TEST(ModelWeights, MissingTensor) {
    TinyCheckpointOptions o;
    o.arch = Architecture::kQwen2Moe;
    const Checkpoint ck(o);
    edit(ck, "model.safetensors", [&](auto& ts) {
        std::erase_if(ts, [](auto& t) { return t.name == "model.layers.1.mlp.shared_expert_gate.weight"; });
    });
    expect_error([&] { ck.load(); }, ErrorCode::kNotFound,
                 "tensor `model.layers.1.mlp.shared_expert_gate.weight` not found; searched " +
                     (fs::path(ck.dir) / "model.safetensors").string());
}

TEST(ModelWeights, MissingLmHeadWhenNotTied) {
    TinyCheckpointOptions o;
    o.tied = true;
    const Checkpoint ck(o);
    ModelConfig c = ck.config();
    c.tie_word_embeddings = false;
    expect_error([&] { model::load_weights(ck.dir, c, LoadOptions{.progress = false}); }, ErrorCode::kNotFound,
                 "tensor `lm_head.weight` (or `language_model.lm_head.weight`) not found");
}

TEST(ModelWeights, MissingFiles) {
    TinyCheckpointOptions o;
    o.shards = 3;
    const Checkpoint ck(o);
    const ModelConfig c = ck.config();
    fs::remove(fs::path(ck.dir) / "model-00002-of-00003.safetensors");
    expect_error([&] { ck.load(); }, ErrorCode::kNotFound, "model-00002-of-00003.safetensors: shard file not found");
    fs::remove(fs::path(ck.dir) / "model.safetensors.index.json");
    expect_error([&] { ck.load(); }, ErrorCode::kNotFound, "no model.safetensors or model.safetensors.index.json");
    expect_error([&] { model::load_weights(ck.dir + "/nowhere", c, LoadOptions{.progress = false}); },
                 ErrorCode::kNotFound, "nowhere");
}

TEST(ModelWeights, ShardPathsMustStayInside) {
    for (const std::string bad : {"../model-00001-of-00003.safetensors", "/tmp/model-00001-of-00003.safetensors",
                                  "sub/../../model-00001-of-00003.safetensors"}) {
        TinyCheckpointOptions o;
        o.shards = 3;
        const Checkpoint ck(o);
        rewrite_index(ck, "\"model-00001-of-00003.safetensors\"", "\"" + bad + "\"");
        expect_error([&] { ck.load(); }, ErrorCode::kInvalidArgument, "shard path `" + bad + "`");
    }
}

TEST(ModelWeights, IndexNamesATensorTheShardLacks) {
    TinyCheckpointOptions o;
    o.shards = 3;
    const Checkpoint ck(o);
    rewrite_index(ck, "\"model.norm.weight\": \"model-00003-of-00003.safetensors\"",
                  "\"model.norm.weight\": \"model-00001-of-00003.safetensors\"");
    // Shard 3 still holds it: the first of the two shards opened says where the index puts it.
    expect_error([&] { ck.load(); }, ErrorCode::kFormat,
                 "model-00003-of-00003.safetensors: holds tensor `model.norm.weight`, which");
}

TEST(ModelWeights, CorruptSafetensors) {
    const Checkpoint ck(TinyCheckpointOptions{});
    const fs::path file = fs::path(ck.dir) / "model.safetensors";
    fs::resize_file(file, fs::file_size(file) / 2);
    expect_error([&] { ck.load(); }, ErrorCode::kFormat, file.string() + ": ");
    fs::resize_file(file, 5);
    expect_error([&] { ck.load(); }, ErrorCode::kFormat, file.string() + ": ");
}

}  // namespace
}  // namespace moex
