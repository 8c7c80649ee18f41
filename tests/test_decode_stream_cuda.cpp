// batched_mm's one-kernel decode path on CUDA (cuda/experts/decode_stream.cuh) against the float64 reference: every
// gated and ungated layout, biases, both 16-bit dtypes, both tile heights (T <= 8 and 9..16), K tails shorter than
// one 32-deep step and than one stage, duplicate and sentinel slots, a call with no routed slot, the real qwen3 size
// at T * k = 128; and bit-for-bit repeatability. The path is opt-in (MOEX_DECODE_STREAM=1, set here per run); each run
// checks that it ran (decode_stream_calls) and its twin on the three-launch pipeline passes the same check.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "moex/backend.h"
#include "moex/device.h"
#include "tests/test_support.h"

#if MOEX_WITH_CUDA
#include "cuda/launch.h"
#endif

namespace moex::test {
namespace {

#if MOEX_WITH_CUDA

struct StreamCase {
    int64_t T, H, I, E, k;
    Variant v;
};

Variant variant(DType d, bool has_gate, GateKind gate, Activation act, bool concatenated, bool bias, bool i64,
                bool weights_f32) {
    Variant v;
    v.dtype = d, v.has_gate = has_gate, v.gate = gate, v.activation = act, v.concatenated = concatenated;
    v.bias = bias, v.ids_i64 = i64, v.weights_f32 = weights_f32;
    return v;
}

// Runs batched_mm on the stream path (asserting it ran) and on the three-launch pipeline; both against the reference.
void expect_both_paths_match(const HostProblem& hp, const std::string& what) {
    const Backend& backend = ExpertsInterface::global().get("batched_mm");
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const Expected ref = reference_of(hp.problem());
    const uint64_t before = cuda::decode_stream_calls();
    const Tensor out = with_env("MOEX_DECODE_STREAM", "1", [&] { return run_backend(backend, placed); });
    ASSERT_EQ(cuda::decode_stream_calls(), before + 1) << what << ": the one-kernel path did not run";
    EXPECT_TRUE(outputs_close(out.view(), ref)) << what << " (one kernel)";
    const Tensor twin = run_backend(backend, placed);
    EXPECT_EQ(cuda::decode_stream_calls(), before + 1) << what << ": the path ran without MOEX_DECODE_STREAM=1";
    EXPECT_TRUE(outputs_close(twin.view(), ref)) << what << " (three launches)";
}

TEST(DecodeStreamCuda, EveryLayoutAndTileHeight) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    using A = Activation;
    const Variant variants[] = {
        variant(DType::kBF16, true, GateKind::kDefault, A::kSilu, true, false, false, true),
        variant(DType::kBF16, true, GateKind::kDefault, A::kGelu, false, true, true, false),
        variant(DType::kF16, true, GateKind::kGptOss, A::kSilu, true, true, false, true),
        variant(DType::kF16, true, GateKind::kGptOss, A::kSilu, false, false, true, true),
        variant(DType::kBF16, false, GateKind::kDefault, A::kRelu, true, true, false, false),
        variant(DType::kF16, true, GateKind::kDefault, A::kGeluTanh, true, false, true, false),
    };
    // (H, I): small rows, copied whole; H past one stage of 16 token rows (1040 = 1024 + 16: row pieces and a 16-deep
    // tail), and past one stage of 8 (2112 = 2048 + 64); I not a multiple of 16.
    const int64_t sizes[][4] = {{64, 48, 8, 2}, {1040, 528, 16, 8}, {136, 40, 6, 3}, {2112, 40, 8, 2}};
    int n = 0;
    for (const Variant& v : variants)
        for (const auto& s : sizes)
            for (int64_t T : {1, 3, 8, 9, 16}) {
                if (T * s[3] > 128) continue;
                const HostProblem hp(T, s[0], s[1], s[2], s[3], v, uint64_t(300 + n++));
                expect_both_paths_match(hp, v.name() + " T=" + std::to_string(T) + " H=" + std::to_string(s[0]) +
                                                " I=" + std::to_string(s[1]));
            }
}

// Duplicates (one expert many times in a token: tiles of more rows than tokens), sentinels with NaN weights, one token
// with every slot a sentinel, and every slot on one expert (8 tiles of that expert).
TEST(DecodeStreamCuda, DuplicatesSentinelsAndOneHotExpert) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    for (DType d : {DType::kBF16, DType::kF16}) {
        const Variant v = variant(d, true, GateKind::kDefault, Activation::kSilu, true, true, false, true);
        HostProblem dup(12, 64, 48, 8, 8, v, 41);
        for (int64_t t = 0; t < 12; ++t)
            for (int64_t j = 0; j < 8; ++j) {
                dup.set_id(t, j, j < 5 ? t % 3 : (t + j) % 8);
                if (t == 4) dup.set_id(t, j, j % 2 ? 8 : -1), dup.set_weight(t, j, NAN);
            }
        expect_both_paths_match(dup, std::string(dtype_name(d)) + " duplicates and sentinels");
        for (int64_t T : {8, 16}) {
            HostProblem hot(T, 64, 48, 8, 8, v, 42);
            for (int64_t t = 0; t < T; ++t)
                for (int64_t j = 0; j < 8; ++j) hot.set_id(t, j, 3);
            expect_both_paths_match(hot, std::string(dtype_name(d)) + " one hot expert, T=" + std::to_string(T));
        }
    }
}

// No slot routed at all: the output is exactly zero (no down unit runs, so the kernel writes it directly).
TEST(DecodeStreamCuda, NoRoutedSlotGivesZero) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const Variant v = variant(DType::kBF16, true, GateKind::kDefault, Activation::kSilu, true, true, true, true);
    HostProblem hp(3, 64, 48, 8, 2, v, 43);
    for (int64_t t = 0; t < 3; ++t) hp.set_id(t, 0, -1), hp.set_id(t, 1, int64_t(1) << 40);
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const uint64_t before = cuda::decode_stream_calls();
    const Tensor out = with_env("MOEX_DECODE_STREAM", "1",
                                [&] { return run_backend(ExpertsInterface::global().get("batched_mm"), placed); });
    ASSERT_EQ(cuda::decode_stream_calls(), before + 1);
    for (int64_t i = 0; i < 3 * 64; ++i) ASSERT_EQ(load_as_double(out.view(), i), 0.0) << "element " << i;
}

// The real qwen3-30b-a3b experts at T = 1 and at the path's limit T * k = 128; then the same call twice, bit for bit.
TEST(DecodeStreamCuda, Qwen3SizeAndRepeatability) {
    if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    const Variant v = variant(DType::kBF16, true, GateKind::kDefault, Activation::kSilu, true, false, false, true);
    for (int64_t T : {1, 16}) {
        const HostProblem hp(T, 2048, 768, 128, 8, v, uint64_t(44 + T));
        expect_both_paths_match(hp, "qwen3 T=" + std::to_string(T));
    }
    const HostProblem hp(5, 2048, 768, 128, 8, v, 46);
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const Backend& backend = ExpertsInterface::global().get("batched_mm");
    with_env("MOEX_DECODE_STREAM", "1", [&] {
        const Tensor a = run_backend(backend, placed), b = run_backend(backend, placed);
        EXPECT_TRUE(bitwise_equal(a, b));
    });
}

#endif  // MOEX_WITH_CUDA

}  // namespace
}  // namespace moex::test
