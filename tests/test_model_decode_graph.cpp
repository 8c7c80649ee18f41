// The recorded decode step (ModelOptions::decode_graph, src/model/decode_step.cpp): on CUDA every architecture and
// dtype generates the tokens of the unrecorded step, with greedy and seeded sampling, across backend switches, a
// longer prompt that regrows the scratch, a full context and a model whose attention the decode kernel cannot take;
// the experts observer sees every replayed step. On the CPU nothing is recorded.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moex/error.h"
#include "moex/model.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

using test::TinyCheckpointOptions;

class ModelDecodeGraph : public ::testing::Test {
   protected:
    static std::string make(const TinyCheckpointOptions& o) {
        const std::string dir = test::temp_path("graph_checkpoint");
        test::write_tiny_checkpoint(dir, o);
        return dir;
    }
    // head_dim 64: the decode attention kernel takes it (the tiny default of 8 does not). qwen2_moe and olmoe derive
    // head_dim from hidden_size / num_attention_heads, so hidden follows it.
    static TinyCheckpointOptions tiny(Architecture arch, DType dtype, int64_t head_dim = 64) {
        TinyCheckpointOptions o;
        o.arch = arch;
        o.dtype = dtype;
        o.head_dim = head_dim;
        o.hidden = o.heads * head_dim;
        return o;
    }
    static ModelOptions on_cuda(bool graph, int64_t max_context = 0) {
        ModelOptions m;
        m.device = Device::kCUDA;
        m.progress = false;
        m.decode_graph = graph;
        m.max_context = max_context;
        return m;
    }
    static SamplingOptions tokens(int64_t n) {
        SamplingOptions s;
        s.max_new_tokens = n;
        s.stop_on_eos = false;
        return s;
    }
    static std::vector<int32_t> prompt(int64_t n, int32_t vocab) {
        std::vector<int32_t> p;
        for (int64_t i = 0; i < n; ++i) p.push_back(int32_t((i * 37 + 11) % vocab));
        return p;
    }
};

TEST_F(ModelDecodeGraph, CudaGivesTheUnrecordedTokensOnEveryArchitecture) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (Architecture arch :
         {Architecture::kQwen2Moe, Architecture::kQwen3Moe, Architecture::kMixtral, Architecture::kOlmoe})
        for (DType dt : {DType::kF32, DType::kBF16}) {
            const std::string dir = make(tiny(arch, dt));
            const std::string what = std::string(architecture_name(arch)) + " " + std::string(dtype_name(dt));
            Model plain = Model::from_pretrained(dir, on_cuda(false));
            Model recorded = Model::from_pretrained(dir, on_cuda(true));
            // 150 prompt tokens and 60 new ones: the decode attention goes from one split to several.
            for (int64_t prompt_len : {int64_t(5), int64_t(150), int64_t(7)}) {
                const auto ids = prompt(prompt_len, int32_t(plain.config().vocab_size));
                const GenerationResult want = plain.generate(ids, tokens(60));
                const GenerationResult got = recorded.generate(ids, tokens(60));
                EXPECT_EQ(got.new_ids, want.new_ids) << what << ", prompt " << prompt_len;
                EXPECT_EQ(want.recorded_steps, 0);
                EXPECT_EQ(got.recorded_steps, 59) << what << ": every decode step through the graph";
            }
        }
}

TEST_F(ModelDecodeGraph, CudaSeededSamplingAndTheObserverAreUnchanged) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = make(tiny(Architecture::kQwen3Moe, DType::kBF16));
    SamplingOptions s = tokens(24);
    s.temperature = 0.9, s.top_p = 0.95, s.seed = 7;
    std::vector<GenerationResult> runs;
    std::vector<std::vector<std::string>> seen(2);
    for (bool graph : {false, true}) {
        Model m = Model::from_pretrained(dir, on_cuda(graph));
        auto& log = seen[graph ? 1 : 0];
        m.set_experts_observer([&log](int64_t layer, const std::string& b, int64_t t) {
            log.push_back(std::to_string(layer) + ":" + b + ":" + std::to_string(t));
        });
        runs.push_back(m.generate(prompt(9, 64), s));
    }
    EXPECT_EQ(runs[1].new_ids, runs[0].new_ids);
    EXPECT_EQ(runs[1].recorded_steps, 23);
    EXPECT_EQ(seen[1], seen[0]) << "the observer sees each replayed step's MoE layers as it sees launched ones";
}

// A backend switch from on_token: a backend that synchronises the host (eager) runs unrecorded, batched_mm is
// recorded again when it comes back.
TEST_F(ModelDecodeGraph, CudaBackendSwitchesRecordAgain) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = make(tiny(Architecture::kMixtral, DType::kF32));
    std::vector<GenerationResult> runs;
    for (bool graph : {false, true}) {
        Model m = Model::from_pretrained(dir, on_cuda(graph));
        int n = 0;
        runs.push_back(m.generate(prompt(6, 64), tokens(20), [&](int32_t, const std::string&) {
            ++n;
            if (n == 5) m.set_experts_implementation(ExpertsImplementation::name("eager"));
            if (n == 10) m.set_experts_implementation(ExpertsImplementation::name("grouped_mm"));
            return true;
        }));
    }
    EXPECT_EQ(runs[1].new_ids, runs[0].new_ids);
    // Steps 2-5 and 11-20 replay or warm up (the first step after each switch runs unrecorded as the warm-up,
    // which counts: it runs the recorded step's ops); 6-10 run eager, unrecorded.
    EXPECT_EQ(runs[1].recorded_steps, 14);
}

TEST_F(ModelDecodeGraph, CudaRunsToTheEndOfTheContext) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = make(tiny(Architecture::kQwen3Moe, DType::kBF16));
    std::vector<GenerationResult> runs;
    for (bool graph : {false, true}) {
        Model m = Model::from_pretrained(dir, on_cuda(graph, 40));
        runs.push_back(m.generate(prompt(10, 64), tokens(1000)));
        EXPECT_EQ(m.cache_length(), 40);
    }
    EXPECT_EQ(runs[1].new_ids, runs[0].new_ids);
    EXPECT_EQ(runs[1].new_ids.size(), 31u);  // the prefill's token, then one per free cache row
}

TEST_F(ModelDecodeGraph, CudaAttentionOutsideTheDecodeKernelRunsUnrecorded) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const std::string dir = make(tiny(Architecture::kQwen3Moe, DType::kF32, 8));  // head_dim 8
    std::vector<GenerationResult> runs;
    for (bool graph : {false, true}) {
        Model m = Model::from_pretrained(dir, on_cuda(graph));
        runs.push_back(m.generate(prompt(5, 64), tokens(12)));
    }
    EXPECT_EQ(runs[1].new_ids, runs[0].new_ids);
    EXPECT_EQ(runs[1].recorded_steps, 0);
}

TEST_F(ModelDecodeGraph, CpuRecordsNothing) {
    ModelOptions o;
    o.num_threads = 2;
    o.progress = false;
    Model m = Model::from_pretrained(make(tiny(Architecture::kQwen3Moe, DType::kF32)), o);
    const GenerationResult r = m.generate(prompt(4, 64), tokens(6));
    EXPECT_EQ(r.new_ids.size(), 6u);
    EXPECT_EQ(r.recorded_steps, 0);
}

}  // namespace
}  // namespace moex
