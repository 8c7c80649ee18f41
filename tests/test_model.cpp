// The model API on tiny random checkpoints: experts_implementation (names, maps, sub-configs, user backends, the
// megamoe guard), which backend runs in each generation phase (the decode switch), agreement of every backend's
// logits, sampling, and the errors of bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "moex/backend.h"
#include "moex/error.h"
#include "moex/model.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

using test::TinyCheckpointOptions;

// A fresh checkpoint folder per call, removed when the test program exits.
class ModelApi : public ::testing::Test {
   protected:
    static std::string make(TinyCheckpointOptions o) {
        const std::string dir = test::temp_path("model_checkpoint");  // removed when the test program exits
        test::write_tiny_checkpoint(dir, o);
        return dir;
    }
    static TinyCheckpointOptions qwen3() {
        TinyCheckpointOptions o;
        o.arch = Architecture::kQwen3Moe;
        o.dtype = DType::kF32;
        return o;
    }
    static ModelOptions cpu(ExpertsImplementation impl = {}) {
        ModelOptions m;
        m.num_threads = 2;
        m.progress = false;
        m.experts_implementation = std::move(impl);
        return m;
    }
};

// A CPU backend that counts its calls and delegates to grouped_mm.
class CountingBackend final : public Backend {
   public:
    explicit CountingBackend(std::string name, bool load_time_only = false)
        : name_(std::move(name)), load_time_only_(load_time_only) {}
    std::string_view name() const override { return name_; }
    bool load_time_only() const override { return load_time_only_; }
    std::string_view description() const override { return "test backend: grouped_mm with a call counter"; }
    std::vector<Device> devices() const override { return {Device::kCPU}; }
    void run(const ExpertsProblem& p, const TensorView& out, const RunOptions& o) const override {
        ++calls;
        ExpertsInterface::global().get("grouped_mm").run(p, out, o);
    }
    mutable int calls = 0;

   private:
    std::string name_;
    bool load_time_only_;
};

TEST(ExpertsImplementationParse, NameAndMap) {
    auto a = ExpertsImplementation::parse("eager");
    ASSERT_TRUE(a.all.has_value());
    EXPECT_EQ(*a.all, "eager");
    auto b = ExpertsImplementation::parse("text_config=batched_mm,=eager");
    EXPECT_FALSE(b.all.has_value());
    EXPECT_EQ(b.per_config.at("text_config"), "batched_mm");
    EXPECT_EQ(b.per_config.at(""), "eager");
    EXPECT_THROW(ExpertsImplementation::parse(""), Error);
    EXPECT_THROW(ExpertsImplementation::parse("a=x,a=y"), Error);
    EXPECT_THROW(ExpertsImplementation::parse("a="), Error);
}

TEST(ExpertsImplementationParse, DecodeMapSwitchesOnlyGroupedOnGpu) {
    const std::map<std::string, std::string> m = {
        {"", "grouped_mm"}, {"text_config", "eager"}, {"vision_config", "grouped_mm"}};
    EXPECT_EQ(decode_experts_implementation(m, Device::kCPU), m);
    const auto d = decode_experts_implementation(m, Device::kCUDA);
    EXPECT_EQ(d.at(""), "batched_mm");
    EXPECT_EQ(d.at("text_config"), "eager");
    EXPECT_EQ(d.at("vision_config"), "batched_mm");
}

TEST_F(ModelApi, DefaultIsGroupedAndSwitchesAtRunTime) {
    Model m = Model::from_pretrained(make(qwen3()), cpu());
    EXPECT_EQ(m.get_experts_implementation(), (std::map<std::string, std::string>{{"", "grouped_mm"}}));
    std::vector<std::string> seen;
    m.set_experts_observer([&](int64_t, const std::string& b, int64_t) { seen.push_back(b); });
    m.forward({1, 2, 3});
    m.set_experts_implementation(ExpertsImplementation::name("eager"));
    EXPECT_EQ(m.experts_backend(), "eager");
    m.forward({4});
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front(), "grouped_mm");
    EXPECT_EQ(seen.back(), "eager");
}

TEST_F(ModelApi, UnknownNameListsValidOnesIncludingUserBackends) {
    auto counting = std::make_shared<CountingBackend>("test_counting_mm");
    ExpertsInterface::global().register_backend(counting);
    const std::string dir = make(qwen3());
    try {
        Model::from_pretrained(dir, cpu(ExpertsImplementation::name("no_such_mm")));
        FAIL() << "expected an error";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("no_such_mm"), std::string::npos) << msg;
        EXPECT_NE(msg.find("grouped_mm"), std::string::npos) << msg;
        EXPECT_NE(msg.find("test_counting_mm"), std::string::npos) << msg;
    }
    Model m = Model::from_pretrained(dir, cpu(ExpertsImplementation::name("test_counting_mm")));
    m.forward({5, 6});
    int moe_layers = 0;
    for (int64_t l = 0; l < m.config().num_hidden_layers; ++l) moe_layers += m.config().is_moe_layer(l);
    EXPECT_EQ(counting->calls, moe_layers);
    EXPECT_THROW(m.set_experts_implementation(ExpertsImplementation::name("bogus")), Error);
    EXPECT_EQ(m.experts_backend(), "test_counting_mm");  // a refused switch changes nothing
}

TEST_F(ModelApi, CudaOnlyBackendRefusedOnCpuWithReason) {
    try {
        Model::from_pretrained(make(qwen3()), cpu(ExpertsImplementation::name("deepgemm")));
        FAIL() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("deepgemm"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("cpu"), std::string::npos) << e.what();
    }
}

TEST_F(ModelApi, CompositeConfigMapsReachTheTextModel) {
    auto o = qwen3();
    o.composite = true;
    const std::string dir = make(o);
    Model m = Model::from_pretrained(
        dir, cpu(ExpertsImplementation::per_config_map({{"", "batched_mm"}, {"text_config", "eager"}})));
    const auto got = m.get_experts_implementation();
    EXPECT_EQ(got.at(""), "batched_mm");
    EXPECT_EQ(got.at("text_config"), "eager");
    EXPECT_EQ(got.at("vision_config"), "grouped_mm");  // keys a map leaves out keep the default
    EXPECT_EQ(m.experts_backend(), "eager");
    std::vector<std::string> seen;
    m.set_experts_observer([&](int64_t, const std::string& b, int64_t) { seen.push_back(b); });
    m.forward({1, 2});
    EXPECT_EQ(seen.front(), "eager");
    m.set_experts_implementation(ExpertsImplementation::per_config_map({{"text_config", "grouped_mm"}}));
    EXPECT_EQ(m.get_experts_implementation().at(""), "batched_mm");  // untouched
    EXPECT_EQ(m.experts_backend(), "grouped_mm");
    m.set_experts_implementation(ExpertsImplementation::name("eager"));  // a name reaches every sub-config
    for (const auto& [k, v] : m.get_experts_implementation()) EXPECT_EQ(v, "eager") << k;
    EXPECT_THROW(m.set_experts_implementation(ExpertsImplementation::per_config_map({{"audio_config", "eager"}})),
                 Error);
}

TEST_F(ModelApi, LoadTimeBackendsAreNeverSwitched) {
    // deepgemm_megamoe is the built-in load-time backend (CUDA only); a CPU user backend with the same property
    // stands in for it here.
    EXPECT_TRUE(ExpertsInterface::global().get("deepgemm_megamoe").load_time_only());
    ExpertsInterface::global().register_backend(std::make_shared<CountingBackend>("test_load_time_mm", true));
    const std::string dir = make(qwen3());
    Model a = Model::from_pretrained(dir, cpu());
    EXPECT_THROW(a.set_experts_implementation(ExpertsImplementation::name("test_load_time_mm")), Error);
    Model b = Model::from_pretrained(dir, cpu(ExpertsImplementation::name("test_load_time_mm")));
    try {
        b.set_experts_implementation(ExpertsImplementation::name("grouped_mm"));
        FAIL() << "expected the megamoe guard";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("load time"), std::string::npos) << e.what();
    }
}

// Every CPU backend gives the same logits (within f32 rounding) on every architecture and checkpoint form.
TEST_F(ModelApi, EveryBackendAgreesOnEveryArchitecture) {
    for (Architecture arch :
         {Architecture::kQwen2Moe, Architecture::kQwen3Moe, Architecture::kMixtral, Architecture::kOlmoe}) {
        TinyCheckpointOptions o;
        o.arch = arch;
        o.dtype = DType::kF32;
        const std::string dir = make(o);
        std::vector<float> ref;
        for (const char* name : {"eager", "batched_mm", "grouped_mm"}) {
            Model m = Model::from_pretrained(dir, cpu(ExpertsImplementation::name(name)));
            m.forward({1, 7, 3, 9, 2});
            const std::vector<float> logits = m.forward({4});
            ASSERT_EQ(int64_t(logits.size()), m.config().vocab_size);
            for (float v : logits) ASSERT_TRUE(std::isfinite(v)) << name;
            if (ref.empty()) {
                ref = logits;
                continue;
            }
            double max_diff = 0, max_ref = 0;
            for (size_t i = 0; i < ref.size(); ++i) {
                max_diff = std::max(max_diff, double(std::fabs(ref[i] - logits[i])));
                max_ref = std::max(max_ref, double(std::fabs(ref[i])));
            }
            EXPECT_LE(max_diff, 1e-4 * std::max(1.0, max_ref))
                << architecture_name(arch) << " " << name << " differs from eager";
        }
    }
}

// Continuing a cache gives the same last logits as one forward of the whole sequence.
TEST_F(ModelApi, IncrementalForwardMatchesFullForward) {
    Model m = Model::from_pretrained(make(qwen3()), cpu());
    const std::vector<float> full = m.forward({3, 1, 4, 1, 5, 9});
    m.reset();
    m.forward({3, 1, 4});
    m.forward({1, 5});
    const std::vector<float> inc = m.forward({9});
    EXPECT_EQ(m.cache_length(), 6);
    for (size_t i = 0; i < full.size(); ++i) EXPECT_NEAR(full[i], inc[i], 1e-4f) << i;
}

TEST_F(ModelApi, GenerationOnCpuNeverSwitches) {
    Model m = Model::from_pretrained(make(qwen3()), cpu());
    std::vector<std::pair<int64_t, std::string>> seen;  // (tokens, backend)
    m.set_experts_observer([&](int64_t, const std::string& b, int64_t t) { seen.emplace_back(t, b); });
    SamplingOptions s;
    s.max_new_tokens = 4;
    s.stop_on_eos = false;
    const GenerationResult r = m.generate(std::vector<int32_t>{1, 2, 3, 4}, s, [&](int32_t, const std::string&) {
        EXPECT_EQ(m.get_experts_implementation().at(""), "grouped_mm");
        return true;
    });
    EXPECT_EQ(r.new_ids.size(), 4u);
    for (const auto& [t, b] : seen) EXPECT_EQ(b, "grouped_mm") << "forward of " << t << " tokens";
    EXPECT_EQ(m.experts_backend(), "grouped_mm");
}

TEST_F(ModelApi, GenerationOnCudaSwitchesForDecodeAndRestores) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    ModelOptions o = cpu();
    o.device = Device::kCUDA;
    Model m = Model::from_pretrained(make(qwen3()), o);
    std::vector<std::pair<int64_t, std::string>> seen;  // (tokens, backend) of each forward's first MoE layer
    m.set_experts_observer([&](int64_t layer, const std::string& b, int64_t t) {
        if (layer == 0) seen.emplace_back(t, b);
    });
    SamplingOptions s;
    s.max_new_tokens = 4;
    s.stop_on_eos = false;
    // What get_experts_implementation() reports while each token streams: the running backend, as the seed says
    // (the first token comes from the prefill, the rest from the decode phase).
    std::vector<std::string> reported;
    m.generate(std::vector<int32_t>{1, 2, 3, 4}, s, [&](int32_t, const std::string&) {
        reported.push_back(m.get_experts_implementation().at(""));
        EXPECT_EQ(m.experts_backend(), reported.back());
        return true;
    });
    EXPECT_EQ(reported, (std::vector<std::string>{"grouped_mm", "batched_mm", "batched_mm", "batched_mm"}));
    ASSERT_EQ(seen.size(), 4u);  // prefill + 3 decode steps
    ASSERT_FALSE(seen.empty());
    EXPECT_EQ(seen.front(), std::make_pair(int64_t(4), std::string("grouped_mm")));  // prefill
    for (size_t i = 1; i < seen.size(); ++i) EXPECT_EQ(seen[i].second, "batched_mm") << "decode forward " << i;
    EXPECT_EQ(m.experts_backend(), "grouped_mm");
    EXPECT_EQ(m.get_experts_implementation().at(""), "grouped_mm");
    // Cancelled and failing generations restore it too; eager is left alone.
    m.generate(std::vector<int32_t>{1, 2}, s, [](int32_t, const std::string&) { return false; });
    EXPECT_EQ(m.experts_backend(), "grouped_mm");
    int n = 0;
    EXPECT_THROW(m.generate(std::vector<int32_t>{1, 2}, s,
                            [&](int32_t, const std::string&) -> bool {
                                if (++n == 2) throw std::runtime_error("cancelled by the test");
                                return true;
                            }),
                 std::runtime_error);
    EXPECT_EQ(m.experts_backend(), "grouped_mm");
    m.set_experts_implementation(ExpertsImplementation::name("eager"));
    seen.clear();
    m.generate(std::vector<int32_t>{1, 2}, s);
    for (const auto& [t, b] : seen) EXPECT_EQ(b, "eager");
}

TEST_F(ModelApi, SamplingIsSeededAndTopKOneIsGreedy) {
    Model m = Model::from_pretrained(make(qwen3()), cpu());
    SamplingOptions greedy;
    greedy.max_new_tokens = 6;
    greedy.stop_on_eos = false;
    const auto g = m.generate(std::vector<int32_t>{5, 6, 7}, greedy).new_ids;
    SamplingOptions s = greedy;
    s.temperature = 0.7;
    s.top_k = 1;
    EXPECT_EQ(m.generate(std::vector<int32_t>{5, 6, 7}, s).new_ids, g);
    s.top_k = 0;
    s.top_p = 0.9;
    s.seed = 42;
    const auto a = m.generate(std::vector<int32_t>{5, 6, 7}, s).new_ids;
    EXPECT_EQ(m.generate(std::vector<int32_t>{5, 6, 7}, s).new_ids, a);
    s.temperature = -1;  // negative means greedy too
    EXPECT_EQ(m.generate(std::vector<int32_t>{5, 6, 7}, s).new_ids, g);
    s.temperature = 1.0;
    s.top_p = 1.5;
    EXPECT_THROW(m.generate(std::vector<int32_t>{5, 6, 7}, s), Error);
}

TEST_F(ModelApi, BadInputGetsClearErrors) {
    EXPECT_THROW(Model::from_pretrained("/nonexistent/moex-model", cpu()), Error);
    ModelOptions o = cpu();
    o.max_context = 8;
    Model m = Model::from_pretrained(make(qwen3()), o);
    try {
        m.generate(std::vector<int32_t>(9, 1), SamplingOptions{});
        FAIL() << "expected a context error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("context"), std::string::npos) << e.what();
    }
    EXPECT_THROW(m.forward({int32_t(m.config().vocab_size)}), Error);
    EXPECT_THROW(m.forward({-1}), Error);
    EXPECT_THROW(m.forward({}), Error);
    m.reset();
    m.forward({1, 2, 3, 4, 5, 6, 7, 8});
    EXPECT_THROW(m.forward({1}), Error);  // the cache is full
    ModelOptions f16 = cpu();
    f16.dtype = DType::kF16;
    EXPECT_THROW(Model::from_pretrained(make(qwen3()), f16), Error);
}

}  // namespace
}  // namespace moex
