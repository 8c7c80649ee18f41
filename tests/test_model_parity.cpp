// Parity with transformers: tests/data/models/<fixture>/ holds tiny random checkpoints saved as the hub saves them,
// with the tokens transformers produced (tests/data/make_parity_fixtures.py). Every backend must give the same prompt
// ids and the same greedy tokens, on the CPU and, where there is a GPU, on CUDA.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moex/device.h"
#include "moex/model.h"

#ifndef MOEX_TEST_DATA_DIR
#define MOEX_TEST_DATA_DIR "tests/data"
#endif

namespace moex {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> fixtures() {
    std::vector<std::string> out;
    const fs::path root = fs::path(MOEX_TEST_DATA_DIR) / "models";
    if (!fs::is_directory(root)) return out;
    for (const auto& e : fs::directory_iterator(root))
        if (fs::exists(e.path() / "expected.json")) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
}

// A bf16 fixture runs twice: in bf16 (transformers' bf16 tokens, first equal_prefix of them) and in f32 on the
// same bf16 weights (transformers' f32 tokens, all of them).
struct Case {
    std::string fixture, backend;
    Device device;
    bool bf16 = false;
};

bool is_bf16_fixture(const std::string& f) {
    std::ifstream in(fs::path(MOEX_TEST_DATA_DIR) / "models" / f / "expected.json");
    return nlohmann::json::parse(in).value("dtype", "float32") == "bfloat16";
}

std::vector<Case> cases() {
    std::vector<Case> out;
    std::vector<Device> devices = {Device::kCPU};
    if (cuda_device_count() > 0) devices.push_back(Device::kCUDA);
    for (const auto& f : fixtures()) {
        const bool bf16 = is_bf16_fixture(f);
        for (Device d : devices)
            for (const char* b : {"eager", "batched_mm", "grouped_mm"}) {
                out.push_back({f, b, d, false});
                if (bf16) out.push_back({f, b, d, true});
            }
    }
    return out;
}

class ModelParity : public ::testing::TestWithParam<Case> {};

TEST_P(ModelParity, GreedyTokensMatchTransformers) {
    const Case& c = GetParam();
    const fs::path dir = fs::path(MOEX_TEST_DATA_DIR) / "models" / c.fixture;
    std::ifstream in(dir / "expected.json");
    const nlohmann::json expected = nlohmann::json::parse(in);
    const bool bf16 = c.bf16, bf16_weights = expected.value("dtype", "float32") == "bfloat16";
    const auto& compare = expected.contains("compare") ? expected.at("compare") : nlohmann::json::object();
    const double logits_atol = bf16 ? compare.value("logits_atol", 0.35) : 1e-3;
    const char* sfx = bf16_weights && !bf16 ? "_f32" : "";  // f32 compute on bf16 weights: the *_f32 records
    ModelOptions o;
    o.dtype = bf16 ? DType::kBF16 : DType::kF32;
    o.device = c.device;
    o.num_threads = 2;
    o.progress = false;
    o.experts_implementation = ExpertsImplementation::name(c.backend);
    Model m = Model::from_pretrained(dir.string(), o);
    ASSERT_NE(m.tokenizer(), nullptr);
    for (const auto& p : expected.at("prompts")) {
        const std::string text = p.at("text");
        const auto want_prompt = p.at("prompt_ids").get<std::vector<int32_t>>();
        EXPECT_EQ(m.tokenizer()->encode(text, true), want_prompt) << "prompt: " << text;
        const auto want = p.at(std::string("greedy_new_ids") + sfx).get<std::vector<int32_t>>();
        // The last prompt position's first logits, against transformers' (f32: tight; bf16: loose).
        m.reset();
        const std::vector<float> logits = m.forward(want_prompt);
        if (p.contains(std::string("logits_last_prompt") + sfx)) {
            const auto ref = p.at(std::string("logits_last_prompt") + sfx).get<std::vector<float>>();
            for (size_t i = 0; i < ref.size(); ++i)
                EXPECT_NEAR(logits[i], ref[i], logits_atol) << "logit " << i << " prompt: " << text;
        }
        SamplingOptions s;
        s.max_new_tokens = int64_t(want.size());
        const GenerationResult r = m.generate(want_prompt, s);
        if (!bf16) {
            EXPECT_EQ(r.new_ids, want) << "prompt: " << text;
        } else {
            // bf16: rounding order may differ from PyTorch's; the first tokens must still agree.
            const size_t n =
                std::min<size_t>(p.value("equal_prefix", expected.value("bf16_exact_prefix", 4)), want.size());
            ASSERT_GE(r.new_ids.size(), n);
            EXPECT_EQ(std::vector<int32_t>(r.new_ids.begin(), r.new_ids.begin() + long(n)),
                      std::vector<int32_t>(want.begin(), want.begin() + long(n)))
                << "prompt: " << text;
        }
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelParity, ::testing::ValuesIn(cases()), [](const auto& info) {
    std::string n = info.param.fixture + "_" + info.param.backend + "_" + std::string(device_name(info.param.device)) +
                    (info.param.bf16 ? "_bf16" : "");
    for (char& ch : n)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return n;
});
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(ModelParity);

}  // namespace
}  // namespace moex
