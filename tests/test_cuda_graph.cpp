// CUDA-graph capture of the device backends: batched_mm and grouped_mm are captured once, then NEW routing is written
// into the same device buffers and the replay must match the float64 reference of the new routing. eager must say
// that it synchronises the host (it is not capturable). Plus host checks of the decode kernel's configuration.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/device.h"
#include "tests/test_support.h"

#if MOEX_WITH_CUDA
#include <cuda_runtime.h>

#include <cstdlib>

#include "cuda/experts/batched_config.h"
#include "cuda/launch.h"
#endif

namespace moex::test {
namespace {

TEST(CudaGraph, HostSynchronizationIsReported) {
    const auto& reg = ExpertsInterface::global();
    EXPECT_TRUE(reg.get("eager").host_synchronizes(Device::kCUDA));
    EXPECT_FALSE(reg.get("batched_mm").host_synchronizes(Device::kCUDA));
    EXPECT_FALSE(reg.get("grouped_mm").host_synchronizes(Device::kCUDA));
}

#if MOEX_WITH_CUDA

TEST(BatchedConfig, ChunkCoversTheRowsAnExpertGets) {
    using cuda::batched::choose_nt;
    unsetenv("MOEX_BATCHED_NT");
    for (int64_t T = 1; T <= 64; ++T) {  // every row to one expert (k = E = 1): the chunk holds all T
        EXPECT_GE(8 * choose_nt(T, 1, 1), T) << "T=" << T;
        EXPECT_TRUE(choose_nt(T, 1, 1) == 1 || 8 * choose_nt(T, 1, 1) / 2 < T) << "T=" << T;  // and no more
    }
    EXPECT_EQ(choose_nt(100000, 1, 1), 8);
    // Uniform top-k at T = 64: deepseek-v3 (8 of 256: 2 rows an expert on average), qwen3 (8 of 128: 4),
    // mixtral (2 of 8: 16) get chunks of 8, 16 and 32 rows.
    EXPECT_EQ(choose_nt(64, 8, 256), 1);
    EXPECT_EQ(choose_nt(64, 8, 128), 2);
    EXPECT_EQ(choose_nt(64, 2, 8), 4);
    EXPECT_EQ(choose_nt(1, 8, 256), 1);
    setenv("MOEX_BATCHED_NT", "8", 1);
    EXPECT_EQ(choose_nt(1, 8, 256), 8);
    unsetenv("MOEX_BATCHED_NT");
}

TEST(BatchedConfig, SplitsAndSharedMemoryAreValid) {
    using namespace cuda::batched;
    unsetenv("MOEX_BATCHED_KS");
    const int64_t shapes[][3] = {{4096, 7168, 8},  {7168, 2048, 8},  {1536, 2048, 8}, {2048, 768, 128},
                                 {28672, 4096, 2}, {4096, 14336, 8}, {64, 40, 1}};
    for (const auto& s : shapes) {
        for (int rt : {1, 2}) {
            const int ks = choose_ks(s[0], s[1], double(s[2]), rt, 264);
            EXPECT_TRUE(ks == 1 || ks == 2 || ks == 4 || ks == 8);
            EXPECT_TRUE(ks == 1 || s[1] / ks >= 128) << "too little K per warp: K=" << s[1] << " ks=" << ks;
        }
    }
    for (int nt : {1, 2, 4, 8})
        for (int ks : {1, 2, 4, 8}) {
            const ProjConfig c = make_config(Loop::kMma, nt, ks, 2);
            EXPECT_EQ(c.bw * c.ks, 16 * c.rt * 8);
            EXPECT_LE(c.smem, size_t(48 * 1024)) << "nt=" << nt;  // no opt-in needed on the decode path
        }
    EXPECT_EQ(make_config(Loop::kVecN, 1, 1, 2).bw, 256);
    EXPECT_EQ(make_config(Loop::kGeneric, 1, 1, 4).ks, 4);
    setenv("MOEX_BATCHED_KS", "8", 1);
    EXPECT_EQ(choose_ks(4096, 7168, 8, 2, 264), 8);
    unsetenv("MOEX_BATCHED_KS");
}

#define CU(call) ASSERT_EQ((call), cudaSuccess) << #call

struct GraphCase {
    const char* backend;
    int64_t T, H, I, E, k;
    Variant v;
    bool pdl = true;      // batched_mm: programmatic dependent launch between its kernels (MOEX_PDL)
    bool stream = false;  // batched_mm: the one-kernel decode path (MOEX_DECODE_STREAM=1)
};

Variant make_variant(DType d, bool transposed, bool bias, bool concatenated, bool has_gate, Activation act,
                     bool ids_i64, bool weights_f32) {
    Variant v;
    v.dtype = d, v.transposed = transposed, v.bias = bias, v.concatenated = concatenated, v.has_gate = has_gate;
    v.activation = act, v.ids_i64 = ids_i64, v.weights_f32 = weights_f32;
    return v;
}

std::vector<GraphCase> graph_cases() {
    const Variant plain_bf16 = make_variant(DType::kBF16, false, false, true, true, Activation::kSilu, false, true);
    const Variant odd_f16 = make_variant(DType::kF16, true, true, false, true, Activation::kGelu, true, false);
    const Variant ungated_f32 = make_variant(DType::kF32, false, true, true, false, Activation::kRelu, false, true);
    std::vector<GraphCase> cases;
    for (const char* b : {"batched_mm", "grouped_mm"}) {
        cases.push_back({b, 5, 64, 48, 8, 2, plain_bf16});     // decode: fused routing, fused combine
        cases.push_back({b, 40, 64, 48, 16, 4, odd_f16});      // transposed, interleaved, bias, int64 ids
        cases.push_back({b, 2100, 64, 48, 8, 2, plain_bf16});  // S = 4200: multi-kernel routing, separate combine
        cases.push_back({b, 33, 40, 24, 8, 2, ungated_f32});   // f32, ungated
    }
    cases.push_back({"batched_mm", 5, 64, 48, 8, 2, plain_bf16, false});  // the same without PDL edges
    const Variant interleaved_f16 = make_variant(DType::kF16, false, true, false, true, Activation::kGelu, true, false);
    cases.push_back({"batched_mm", 5, 64, 48, 8, 2, plain_bf16, true, true});         // the one-kernel path
    cases.push_back({"batched_mm", 12, 64, 48, 16, 4, interleaved_f16, true, true});  // 16-row tiles
    cases.push_back({"deepgemm", 5, 128, 128, 8, 2, plain_bf16});                     // the TMA kernels, decode
    cases.push_back({"deepgemm", 2100, 64, 48, 8, 2, plain_bf16});                    // multi-kernel routing
    return cases;
}

// A second routing for the same data: skewed toward low experts, with a sentinel slot (id E) and duplicate ids,
// so the tile counts and row blocks differ from the captured call's.
void reroute(HostProblem& hp, int64_t T, int64_t E, int64_t k) {
    for (int64_t t = 0; t < T; ++t)
        for (int64_t j = 0; j < k; ++j) {
            const int64_t e = (t % 3 == 0 && j == k - 1) ? E : (t * 7 + j * j) % (E > 3 ? E / 2 : E);
            hp.set_id(t, j, e);
            hp.set_weight(t, j, 0.25 + 0.125 * double((t + j) % 5));
        }
}

class CudaGraphReplay : public ::testing::TestWithParam<GraphCase> {};

TEST_P(CudaGraphReplay, NewRoutingInCapturedBuffers) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const GraphCase& c = GetParam();
    const Backend& backend = ExpertsInterface::global().get(c.backend);
    if (!c.pdl) setenv("MOEX_PDL", "0", 1);
    if (c.stream) setenv("MOEX_DECODE_STREAM", "1", 1);
    struct Unset {
        ~Unset() { unsetenv("MOEX_PDL"), unsetenv("MOEX_DECODE_STREAM"); }
    } unset_env;
    HostProblem first(c.T, c.H, c.I, c.E, c.k, c.v, 77);
    HostProblem second(c.T, c.H, c.I, c.E, c.k, c.v, 77);  // same data (drawn first), then a new routing
    reroute(second, c.T, c.E, c.k);
    const PlacedProblem placed = place(first.problem(), Device::kCUDA);
    MOEX_SKIP_IF_REFUSED(backend, placed);
    const ExpertsProblem& dp = placed.problem;
    const int64_t shape[2] = {c.T, c.H};
    DeviceTensor out(c.v.dtype, shape, 2, Device::kCUDA);
    Tensor host_out(c.v.dtype, {c.T, c.H});

    cudaStream_t stream = nullptr;
    CU(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CU(cudaDeviceSynchronize());  // place() copied on the legacy stream, which a non-blocking stream does not wait for
    RunOptions opts;
    opts.cuda_stream = stream;
    const uint64_t stream_calls = cuda::decode_stream_calls();
    backend.run(dp, out.view(), opts);  // eager warm-up: lazy initialisation stays outside the graph
    CU(cudaStreamSynchronize(stream));
    if (c.stream) ASSERT_EQ(cuda::decode_stream_calls(), stream_calls + 1) << "the one-kernel path did not run";

    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    CU(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
        backend.run(dp, out.view(), opts);
    } catch (const std::exception& e) {
        (void)cudaStreamEndCapture(stream, &graph);
        FAIL() << "run under capture threw: " << e.what();
    }
    CU(cudaStreamEndCapture(stream, &graph));
    CU(cudaGraphInstantiate(&exec, graph, 0));

    auto replay_and_check = [&](const HostProblem& hp, const char* what) {
        const ExpertsProblem& p = hp.problem();
        CU(cudaMemcpy(dp.top_k_index.data, p.top_k_index.data, size_t(p.top_k_index.nbytes()), cudaMemcpyHostToDevice));
        CU(cudaMemcpy(dp.top_k_weights.data, p.top_k_weights.data, size_t(p.top_k_weights.nbytes()),
                      cudaMemcpyHostToDevice));
        out.fill_bytes(0xff);
        CU(cudaDeviceSynchronize());  // the copies and the memset ran on the legacy stream, the graph does not
        CU(cudaGraphLaunch(exec, stream));
        CU(cudaStreamSynchronize(stream));
        out.copy_to_host(host_out.view());
        EXPECT_TRUE(outputs_close(host_out.view(), reference_of(p))) << c.backend << " replay with " << what;
    };
    replay_and_check(second, "the new routing");
    replay_and_check(first, "the captured routing");
    replay_and_check(second, "the new routing again");

    CU(cudaGraphExecDestroy(exec));
    CU(cudaGraphDestroy(graph));
    CU(cudaStreamDestroy(stream));
}

INSTANTIATE_TEST_SUITE_P(All, CudaGraphReplay, ::testing::ValuesIn(graph_cases()), [](const auto& info) {
    const GraphCase& c = info.param;
    return gtest_safe(std::string(c.backend) + "_T" + std::to_string(c.T) + "_" + c.v.name() + (c.pdl ? "" : "_nopdl") +
                      (c.stream ? "_stream" : ""));
});

#endif  // MOEX_WITH_CUDA

}  // namespace
}  // namespace moex::test
