// The 30 bad inputs of §B6 in shared/research/ecosystem-and-reliability.md (and its "must handle" list): each row's
// clear error or documented behaviour, tested here (B6.RowNN_*, and B6Experts.RowNN_* on the CPU and on CUDA, which
// skips without a device) or, where a test elsewhere already shows it exactly, named in this table.
//
// moex's codes are coarser than the table's E_* names: every malformed file is ErrorCode::kFormat, size arithmetic
// kOverflow, a bad call kInvalidArgument, a valid request moex cannot serve kUnsupported; the message says which.
//
// row | bad input                                    | test(s)
//  1  | safetensors file < 8 bytes                   | SafetensorsMalformed.ShorterThanEightBytes
//  2  | header length > 100 MB or past the end       | SafetensorsMalformed.HeaderLengthHugeOrPastTheEnd (2^64-1 on a
//     |                                              | 10-byte file: refused before any allocation)
//  3  | header not UTF-8 / JSON / one object; pads   | SafetensorsMalformed.HeaderIsNotUtf8,
//  .HeaderIsNotJsonOrNotAnObject,
//     |                                              | HardenSafetensors.NulBytesAfterTheHeaderJsonAreRefused; padding
//     |                                              | accepted: Safetensors.AcceptsWhitespacePaddingEmptyTensors...
//  4  | duplicate key; twice in weight_map           | SafetensorsMalformed.DuplicateKeysAreNamed,
//     |                                              | ModelHardening.IndexNamingATensorTwiceIsRefused
//  5  | __metadata__ values / as a tensor name       | SafetensorsMalformed.MetadataMustMapStringsToStrings
//  6  | unknown dtype string                         | SafetensorsMalformed.UnknownDtypeListsTheAcceptedNames
//  7  | shape/offset negative, fractional, > 2^48-1  | SafetensorsMalformed.ShapeValuesMustBeSmallNonNegativeIntegers,
//     |                                              | .OffsetsMustBeAPairOfSmallIntegers
//  8  | offsets not tiling the buffer                | SafetensorsMalformed.OffsetsDoNotTileTheBuffer (END < BEGIN:
//     |                                              | .OffsetsMustBeAPairOfSmallIntegers)
//  9  | truncated or appended bytes                  | SafetensorsMalformed.TruncatedAtEveryCutPoint,
//  .TrailingBytesAfter...
// 10  | prod(shape) x bits overflows                 | SafetensorsMalformed.ShapeTimesBitsOverflows (kOverflow)
// 11  | byte range != size; sub-byte not whole bytes | SafetensorsMalformed.ByteRangeDisagreesWithShape,
//     |                                              | .SubByteDtypeNotEndingOnAByte
// 12  | shard index: missing shard, absolute or ..,  | ModelWeights.MissingFiles, .ShardPathsMustStayInside,
//     | link out, tensor absent / in two shards      | ModelHardening.ShardLinksMayNotLeaveTheCheckpoint,
//     |                                              | .ShardAndIndexMustAgree, .ATensorInTwoShardsIsRefused,
//     |                                              | ModelWeights.IndexNamesATensorTheShardLacks
// 13  | top_k < 1 or > E, E < 1; group routing       | B6.Row13_ExpertCountsAreRanged, ModelConfig.BadFieldsName... (no
//     |                                              | family moex loads routes by groups: n_group/topk_group are row
//     14)
// 14  | unknown model_type, scoring_func, hidden_act | B6.Row14_UnsupportedModelOrActivationIsNamed,
//     |                                              | ModelConfig.UnsupportedArchitecture (sonicmoe's gates: row 29)
// 15  | tensor shapes vs config, missing expert,     | ModelWeights.WrongShapeNamesTensorAndConfigFields,
// .MissingTensor,
//     | extra layers                                 | ModelHardening.MoreLayersThanConfigSaysIsRefused,
//     |                                              | .MoreExpertsOrStrayTensorsAreRefused, .KnownExtrasAreAccepted
// 16  | ambiguous layout (2I == H)                   | B6Experts.Row16_LayoutIsNeverInferredFromShapes
// 17  | quantization_config invalid                  | B6.Row17_QuantizationConfigIsChecked,
//     |                                              | QuantizedCheckpoint.UndividableDimsAndUnsupportedSchemes
// 18  | scales missing / wrong shape or dtype        | QuantizedCheckpoint.BadCompanionsAreNamed,
//     |                                              | ModelWeights.Fp8CheckpointErrorsNameTheTensor,
//     |                                              | QuantValidation.ErrorsNameTheTensorAndTheFix
// 19  | dims the blocks do not divide                | QuantizedCheckpoint.UndividableDimsAndUnsupportedSchemes,
//     |                                              | QuantValidation.ErrorsNameTheTensorAndTheFix,
//     |                                              | QuantValidation.DevicePipelinesRefuseWhatTheyCannotRun
// 20  | NaN / Inf / zero / negative scales           | B6Experts.Row20_ScalesAreValuesAndNaNStaysInItsExpert. Differs:
//     |                                              | scales are not checked (a pass over every scale per call); they
//     |                                              | are values, a NaN one poisons only its expert's rows and the
//     |                                              | finite check names it. No moex backend needs UE8M0 over float.
// 21  | expert id >= E or < 0                        | EdgeCases.SentinelIdsContributeExactlyZero (every backend, CPU
// and
//     |                                              | CUDA). Differs: no strict mode; every id outside [0, E) is a
//     |                                              | sentinel adding exactly 0 (moex/experts.h)
// 22  | routing dtype / shape                        | B6Experts.Row22_RoutingShapeAndDtypeAreNamed, Validation.*
// 23  | host-visible group metadata                  | B6Experts.Row23_GroupLayoutIsBuiltFromTheIds. Differs: moex
// takes
//     |                                              | no offsets or labels; each backend builds its layout from the
//     ids
// 24  | activation dtype != weight dtype             | B6Experts.Row24_DtypesMustAgree (f32 routing weights with 16-bit
//     |                                              | activations are the one cast the contract takes)
// 25  | devices, strides, alignment                  | B6Experts.Row25_DevicesStridesAndAlignment (misaligned pointers
//     |                                              | run correctly: the vector and TMA paths check and fall back)
// 26  | NaN / Inf in activations, weights, routing   | B6Experts.Row26_FiniteCheckNamesRowExpertAndStage,
//     |                                              | EdgeCases.NonFiniteStaysInItsToken, .IdleExpertsAreNeverRead
// 27  | T·k·max(H, 2I) past 2^31; sizes past 2^63    | B6Experts.Row27_MoreThan2To31RoutedElements (CUDA),
//     |                                              | B6.Row27_SizesThatOverflowAreRefused
// 28  | unknown backend name                         | Registry.UnknownNameListsEveryValidName,
//     |                                              | ModelApi.UnknownNameListsValidOnesIncludingUserBackends
// 29  | backend unusable here (device, dtype, quant) | B6Experts.Row29_UnusableBackendsSayWhy,
// Registry.CudaOnlyBackends...,
//     |                                              | Registry.CudaUnavailabilityHasAReason,
//     |                                              | QuantValidation.CudaAndUnawareBackendsRefuseQuantizedProblems
// 30  | switch into/out of a load-time backend;      | ModelApi.LoadTimeBackendsAreNeverSwitched,
//     | host-syncing backend under graph capture     | CudaGraph.HostSynchronizationIsReported,
//     |                                              | B6Experts.Row30_HostSyncingBackendUnderCapture (CUDA). Differs:
//     |                                              | moex says host_synchronizes(); under capture the CUDA error is
//     |                                              | raised as moex::Error(kCuda)
// must handle: T = 0                               | EdgeCases.EmptyBatch
//   experts with zero tokens                       | EdgeCases.IdleExpertsAreNeverRead
//   all tokens on one expert                       | EdgeCases.AllTokensOnOneExpert
//   duplicate id within a token                    | EdgeCases.DuplicateIdsCountTwice
//   top_k = E                                      | EdgeCases.TopKEqualsNumExperts
//   EP sentinel ids                                | EdgeCases.SentinelIdsContributeExactlyZero, Ep* (test_ep.cpp)
//   empty tensors, 0-rank scalars in safetensors   | Safetensors.AcceptsWhitespacePaddingEmptyTensorsNullMetadataAnd...
//   legacy unaligned safetensors                   | Safetensors.UnalignedLegacyFileIsCopiedIntoAlignedMemory
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/device.h"
#include "moex/error.h"
#include "moex/model_config.h"
#include "moex/quant.h"
#include "tests/test_support.h"

#if MOEX_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace moex::test {
namespace {

// The built-in backends: other tests register user backends in the same global registry, and when every test runs
// in one process (moex_tests alone, not under ctest) those must not be held to the built-ins' promises.
const std::vector<std::string>& builtin_backends() {
    static const std::vector<std::string> names = {"eager",    "batched_mm",       "grouped_mm",
                                                   "deepgemm", "deepgemm_megamoe", "sonicmoe"};
    return names;
}

// ---- config rows ----

TEST(B6, Row13_ExpertCountsAreRanged) {
    const std::string base = R"({"model_type": "qwen3_moe", )";
    expect_error([&] { parse_model_config(base + R"("num_experts_per_tok": 0})", ""); }, ErrorCode::kFormat,
                 "num_experts_per_tok must be between 1");
    expect_error([&] { parse_model_config(base + R"("num_experts": 0})", ""); }, ErrorCode::kFormat,
                 "num_experts must be between 1");
    expect_error([&] { parse_model_config(base + R"("num_experts": 8, "num_experts_per_tok": 9})", ""); },
                 ErrorCode::kFormat, "num_experts_per_tok=9 exceeds num_experts=8");
    expect_error([] { parse_model_config(R"({"model_type": "mixtral", "num_experts_per_tok": -1})", ""); },
                 ErrorCode::kFormat, "num_experts_per_tok must be between 1");
}

TEST(B6, Row14_UnsupportedModelOrActivationIsNamed) {
    // DeepSeek's grouped routing (n_group, topk_group, scoring_func) comes with an architecture moex does not run.
    expect_error(
        [] {
            parse_model_config(R"({"model_type": "deepseek_v3", "n_group": 8, "topk_group": 4,
                                   "scoring_func": "sqrtsoftplus"})",
                               "");
        },
        ErrorCode::kUnsupported, "architecture `deepseek_v3` is not supported; moex runs qwen2_moe");
    expect_error([] { parse_model_config(R"({"model_type": "qwen2_moe", "hidden_act": "tanh"})", ""); },
                 ErrorCode::kFormat, "hidden_act `tanh` is not supported; moex runs silu, gelu");
}

TEST(B6, Row17_QuantizationConfigIsChecked) {
    const auto with = [](const std::string& q) {
        return R"({"model_type": "qwen3_moe", "quantization_config": )" + q + "}";
    };
    for (const char* block : {"[128]", "[0, 128]", "[128, -1]", "[128, 128, 1]"})
        expect_error(
            [&] {
                parse_model_config(with(R"({"quant_method": "fp8", "weight_block_size": )" + std::string(block) + "}"),
                                   "");
            },
            ErrorCode::kFormat, "weight_block_size must be two positive sizes or null");
    expect_error([&] { parse_model_config(with(R"({"quant_method": "fp8", "activation_scheme": "none"})"), ""); },
                 ErrorCode::kFormat, "activation_scheme `none`; allowed: dynamic, static");
    expect_error([&] { parse_model_config(with(R"({"quant_method": "fp8", "scale_fmt": "e4m3"})"), ""); },
                 ErrorCode::kFormat, "scale_fmt `e4m3`; allowed: float, ue8m0");
    expect_error([&] { parse_model_config(with(R"({"quant_method": "awq"})"), ""); }, ErrorCode::kUnsupported,
                 "quant_method `awq` is not loaded by moex");
    expect_error([&] { parse_model_config(with("[1]"), ""); }, ErrorCode::kFormat, "quantization_config");
}

// ---- size arithmetic ----

// Views whose sizes do not fit in 64 bits are refused before a backend multiplies them: a (2^40, 2^40) input (and
// output), and tensors that each fit but whose routed rows T * k * N (2^31 * 2^20 * 2^13) do not.
TEST(B6, Row27_SizesThatOverflowAreRefused) {
    std::vector<char> bytes(64);
    const auto view = [&](DType d, std::initializer_list<int64_t> shape) {  // row-major strides, unchecked
        TensorView v;
        v.data = bytes.data(), v.dtype = d, v.ndim = int(shape.size());
        int i = 0;
        for (int64_t n : shape) v.shape[i++] = n;
        uint64_t stride = 1;
        for (int dim = v.ndim - 1; dim >= 0; --dim) v.strides[dim] = int64_t(stride), stride *= uint64_t(v.shape[dim]);
        return v;
    };
    const int64_t huge = int64_t(1) << 40;
    ExpertsProblem wide;
    wide.hidden_states = view(DType::kF32, {huge, huge});
    wide.top_k_index = view(DType::kI32, {huge, 1});
    wide.top_k_weights = view(DType::kF32, {huge, 1});
    wide.gate_up_proj = view(DType::kF32, {2, 8, huge});
    wide.down_proj = view(DType::kF32, {2, huge, 4});
    const TensorView wide_out = view(DType::kF32, {huge, huge});
    ExpertsProblem routed;
    const int64_t T = int64_t(1) << 31, k = int64_t(1) << 20, I = int64_t(1) << 12;
    routed.hidden_states = view(DType::kF32, {T, 2});
    routed.top_k_index = view(DType::kI32, {T, k});
    routed.top_k_weights = view(DType::kF32, {T, k});
    routed.gate_up_proj = view(DType::kF32, {1, 2 * I, 2});
    routed.down_proj = view(DType::kF32, {1, 2, I});
    const TensorView routed_out = view(DType::kF32, {T, 2});
    const struct {
        const ExpertsProblem* p;
        TensorView out;
        const char* part;
    } cases[] = {{&wide, wide_out, "hidden_states has shape (1099511627776, 1099511627776), whose size in bytes"},
                 {&routed, routed_out, "T * k * max(H, N) = 2147483648 * 1048576 * 8192 routed values"}};
    for (const auto& c : cases) {
        expect_error([&] { c.p->validate(); }, ErrorCode::kOverflow, c.part);
        for (const std::string& name : builtin_backends())
            expect_error([&] { ExpertsInterface::global().run(name, *c.p, c.out); }, ErrorCode::kOverflow, c.part);
    }
}

// ---- experts rows, on the CPU and on CUDA ----

class B6Experts : public ::testing::TestWithParam<Device> {
   protected:
    void SetUp() override {
        if (GetParam() == Device::kCUDA && cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
    Device device() const { return GetParam(); }
    // The backends that run on this device in this build (the others are row 29's).
    std::vector<const Backend*> backends() const {
        std::vector<const Backend*> r;
        for (const std::string& n : builtin_backends()) {
            const Backend& b = ExpertsInterface::global().get(n);
            if (!b.unavailable(device())) r.push_back(&b);
        }
        return r;
    }
    // Runs b on the host problem placed on this device; nullopt when b refuses it (refusal() checks the refusal).
    std::optional<Tensor> run(const Backend& b, const ExpertsProblem& host, const RunOptions& o = {}) {
        const PlacedProblem placed = place(host, device());
        if (refusal(b, placed)) return std::nullopt;
        return run_backend(b, placed, o);
    }
};

// Every backend on the device refuses `p` with kInvalidArgument naming `part`.
void expect_refused(const std::vector<const Backend*>& backends, const ExpertsProblem& p, const std::string& part) {
    const int64_t shape[2] = {p.T(), p.H()};
    DeviceTensor out(p.dtype(), shape, 2, p.device());
    for (const Backend* b : backends) {
        try {
            b->run(p, out.view(), {});
            ADD_FAILURE() << b->name() << " ran it; expected an error naming " << part;
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << b->name() << ": " << e.what();
            EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << b->name() << ": " << e.what();
        }
    }
}

// H == I ungated: (E, I, H) and (E, H, I) are the same shape for both projections, so the bytes are valid either
// way and only is_transposed says which. 2I == H gated: gate_up is ambiguous, down_proj is not, so the wrong flag
// is refused (I is read from down_proj under the flag, and gate_up then disagrees) rather than guessed.
TEST_P(B6Experts, Row16_LayoutIsNeverInferredFromShapes) {
    Variant ungated;
    ungated.has_gate = false, ungated.activation = Activation::kGelu;
    const HostProblem square(9, 16, 16, 4, 2, ungated, 16);
    ExpertsProblem flipped = square.problem();
    flipped.is_transposed = true;
    const Expected ref = reference_of(square.problem()), ref_t = reference_of(flipped);
    ASSERT_NE(ref.out, ref_t.out);
    int ran = 0;
    for (const Backend* b : backends()) {
        if (auto out = run(*b, square.problem())) {
            EXPECT_TRUE(outputs_close(out->view(), ref)) << b->name() << " is_transposed=false";
            ++ran;
        }
        if (auto out = run(*b, flipped)) EXPECT_TRUE(outputs_close(out->view(), ref_t)) << b->name() << " true";
    }
    Variant gated;
    gated.transposed = true;
    const HostProblem half(5, 16, 8, 4, 2, gated, 17);  // gate_up (E, H, 2I) = (4, 16, 16)
    ExpertsProblem wrong = half.problem();
    wrong.is_transposed = false;
    const PlacedProblem placed = place(wrong, device());
    expect_refused(backends(), placed.problem, "gate_up_proj has shape (4, 16, 16), expected (4, 32, 16) = (E, 2I, H)");
    if (ran == 0) GTEST_SKIP() << "no backend ran here";
}

// A NaN block scale poisons the rows routed to its expert and no other; zero and negative scales are values like any
// other (the reference gets the same); the finite check names the expert and the scale.
TEST_P(B6Experts, Row20_ScalesAreValuesAndNaNStaysInItsExpert) {
    const int64_t T = 12, H = 64, I = 32, E = 4, k = 2;
    HostProblem hp(T, H, I, E, k, Variant{.dtype = DType::kBF16}, 20);
    for (int64_t t = 0; t < T; ++t) hp.set_id(t, 0, t % 2 ? 2 : 0), hp.set_id(t, 1, t % 3 == 0 ? 1 : 3);
    ExpertsProblem p = hp.problem();
    const QuantizedExperts q = quantize_experts(p, QuantFormat::kFp8, 32, 32);
    float* up_scales = static_cast<float*>(p.quant.gate_up.scale_inv.data);  // (E, 2I / 32, H / 32) = (4, 2, 2)
    float* down_scales = static_cast<float*>(p.quant.down.scale_inv.data);   // (E, H / 32, I / 32) = (4, 2, 1)
    up_scales[1 * 4 + 3] = 0.0f;                                             // expert 1: a zero block
    down_scales[3 * 2 + 1] *= -1.0f;                                         // expert 3: a negative block
    up_scales[2 * 4 + 1] = NAN;  // expert 2: gate rows 0-31, H columns 32-63
    std::vector<char> rows(static_cast<size_t>(T));
    for (int64_t t = 0; t < T; ++t) rows[size_t(t)] = t % 2 == 0;  // the rows that never meet expert 2
    const Expected ref = reference_of(p);
    int ran = 0;
    for (const Backend* b : backends()) {
        const auto out = run(*b, p);
        if (!out) continue;
        ++ran;
        EXPECT_TRUE(outputs_close(out->view(), ref, rows)) << b->name();
        for (int64_t t = 1; t < T; t += 2)
            EXPECT_FALSE(std::isfinite(load_as_double(out->view(), t * H))) << b->name() << " row " << t;
        const PlacedProblem placed = place(p, device());
        expect_error([&] { run_backend(*b, placed, RunOptions{.check_finite = true}); }, ErrorCode::kNonFinite,
                     "token row 1 of 12; first cause: expert 2 (slot 0), up projection");
        expect_error([&] { run_backend(*b, placed, RunOptions{.check_finite = true}); }, ErrorCode::kNonFinite,
                     "gate_up_proj_scale_inv[2, 0, 1] = nan");
    }
    if (ran == 0) GTEST_SKIP() << "no backend here takes fp8 experts";
}

// ids in float32 or uint8, of the wrong rank or row count, weights of the wrong shape or dtype.
TEST_P(B6Experts, Row22_RoutingShapeAndDtypeAreNamed) {
    const int64_t T = 5, H = 16, I = 8, E = 4, k = 2;
    const HostProblem hp(T, H, I, E, k, Variant{}, 22);
    struct Case {
        const char* part;
        DType dtype;
        std::vector<int64_t> shape;
        bool ids;
    };
    const Case cases[] = {
        {"top_k_index has dtype float32, expected int32 or int64", DType::kF32, {T, k}, true},
        {"top_k_index has dtype uint8", DType::kU8, {T, k}, true},
        {"top_k_index must have 2 dimensions", DType::kI32, {T * k}, true},
        {"top_k_index has 6 rows but hidden_states has T = 5", DType::kI64, {T + 1, k}, true},
        {"top_k_weights has shape (5, 3), expected (5, 2)", DType::kF32, {T, k + 1}, false},
        {"top_k_weights has shape (4, 2)", DType::kF32, {T - 1, k}, false},
        {"top_k_weights has dtype int32", DType::kI32, {T, k}, false},
        {"top_k_weights has dtype bfloat16, expected float32 or the dtype of hidden_states",
         DType::kBF16,
         {T, k},
         false},
    };
    for (const Case& c : cases) {
        Tensor t(c.dtype, c.shape.data(), int(c.shape.size()));
        std::memset(t.data(), 0, size_t(t.view().nbytes()));
        ExpertsProblem p = hp.problem();
        (c.ids ? p.top_k_index : p.top_k_weights) = t.view();
        const PlacedProblem placed = place(p, device());
        expect_refused(backends(), placed.problem, c.part);
    }
}

// moex takes no group offsets or labels: each backend sorts the ids itself. Routings that break layouts built by
// hand (all rows on one expert, empty experts between busy ones, duplicates, sentinels, a skew of 1 vs 300 rows)
// all match the reference.
TEST_P(B6Experts, Row23_GroupLayoutIsBuiltFromTheIds) {
    const int64_t T = 301, H = 24, I = 16, E = 9, k = 3;
    HostProblem hp(T, H, I, E, k, Variant{.dtype = DType::kBF16}, 23);
    for (int64_t t = 0; t < T; ++t) {
        hp.set_id(t, 0, 7);                        // every row on expert 7
        hp.set_id(t, 1, t == 150 ? 2 : 7);         // expert 2: one row; a duplicate for the others
        hp.set_id(t, 2, t % 4 == 0 ? E + t : -1);  // sentinels only
    }
    const Expected ref = reference_of(hp.problem());
    int ran = 0;
    for (const Backend* b : backends()) {
        if (auto out = run(*b, hp.problem())) {
            EXPECT_TRUE(outputs_close(out->view(), ref)) << b->name();
            ++ran;
        }
    }
    if (ran == 0) GTEST_SKIP() << "no backend ran here";
}

TEST_P(B6Experts, Row24_DtypesMustAgree) {
    const HostProblem hp(5, 16, 8, 4, 2, Variant{.dtype = DType::kBF16}, 24);
    Tensor f32_up(DType::kF32, {4, 16, 16}), f16_down(DType::kF16, {4, 16, 8});
    ExpertsProblem p = hp.problem();
    p.gate_up_proj = f32_up.view();
    expect_refused(backends(), place(p, device()).problem,
                   "gate_up_proj has dtype float32, expected bfloat16 (the dtype of hidden_states)");
    p = hp.problem();
    p.down_proj = f16_down.view();
    expect_refused(backends(), place(p, device()).problem, "down_proj has dtype float16, expected bfloat16");
    // The one mix the contract takes: float32 routing weights with 16-bit activations (Variant's default).
    const Expected ref = reference_of(hp.problem());
    for (const Backend* b : backends())
        if (auto out = run(*b, hp.problem())) EXPECT_TRUE(outputs_close(out->view(), ref)) << b->name();
}

// A view on another device (or GPU index), a padded row stride, and pointers one element off 16-byte alignment.
TEST_P(B6Experts, Row25_DevicesStridesAndAlignment) {
    const int64_t T = 7, H = 40, I = 24, E = 4, k = 2;
    const HostProblem hp(T, H, I, E, k, Variant{.dtype = DType::kBF16, .bias = true}, 25);
    {
        PlacedProblem placed = place(hp.problem(), device());
        placed.problem.top_k_index = hp.problem().top_k_index;  // left on the host
        placed.problem.top_k_index.device = device() == Device::kCPU ? Device::kCUDA : Device::kCPU;
        expect_refused(backends(), placed.problem, "top_k_index is on ");
        PlacedProblem other = place(hp.problem(), device());
        other.problem.down_proj.device_index = 1;
        expect_refused(backends(), other.problem, "down_proj is on " + std::string(device_name(device())) + ":1");
    }
    {
        PlacedProblem placed = place(hp.problem(), device());
        const int64_t shape[2] = {T, H + 8};
        const DeviceTensor padded(DType::kBF16, shape, 2, device());
        placed.problem.hidden_states = padded.view();
        placed.problem.hidden_states.shape[1] = H;  // row stride H + 8
        expect_refused(backends(), placed.problem, "hidden_states must be contiguous");
    }
    // Every tensor and the output one element (2 bytes) past a 16-byte boundary.
    const ExpertsProblem& host = hp.problem();
    std::vector<DeviceTensor> keep;
    const auto shifted = [&](const TensorView& v) {
        Tensor buf(v.dtype, {v.numel() + 1});
        std::memcpy(static_cast<char*>(buf.data()) + dtype_size(v.dtype), v.data, size_t(v.nbytes()));
        keep.push_back(DeviceTensor::from_host(buf.view(), device()));
        TensorView s = v;
        s.data = static_cast<char*>(keep.back().view().data) + dtype_size(v.dtype);
        s.device = device();
        return s;
    };
    ExpertsProblem p = host;
    for (TensorView* v : {&p.hidden_states, &p.top_k_index, &p.top_k_weights, &p.gate_up_proj, &p.down_proj,
                          &p.gate_up_bias, &p.down_bias})
        *v = shifted(*v);
    const Expected ref = reference_of(host);
    for (const Backend* b : backends()) {
        if (b->why_not(p)) continue;
        const int64_t n = T * H + 1;
        DeviceTensor out(DType::kBF16, &n, 1, device());
        out.fill_bytes(0xff);
        TensorView o = TensorView::contiguous(static_cast<char*>(out.view().data) + 2, DType::kBF16, {T, H}, device());
        b->run(p, o, {});
        device_synchronize(device());
        Tensor all(DType::kBF16, {n});
        out.copy_to_host(all.view());
        const TensorView got =
            TensorView::contiguous(static_cast<char*>(all.data()) + 2, DType::kBF16, {T, H}, Device::kCPU);
        EXPECT_TRUE(outputs_close(got, ref)) << b->name() << " with misaligned pointers";
    }
}

// The finite check (RunOptions::check_finite, MOEX_CHECK_FINITE=1) names the first non-finite row, the first expert
// of it that made the value and the stage; a NaN weight on a sentinel slot adds nothing and is never reported.
TEST_P(B6Experts, Row26_FiniteCheckNamesRowExpertAndStage) {
    const int64_t T = 10, H = 16, I = 8, E = 4, k = 2;
    struct Case {
        const char* what;
        DType dtype;
        std::function<void(HostProblem&)> poison;
        std::vector<std::string> parts;  // in the message; empty: no error
    };
    const auto route = [](HostProblem& hp) {
        for (int64_t t = 0; t < T; ++t) hp.set_id(t, 0, t % E), hp.set_id(t, 1, (t + 1) % E);
    };
    const auto element = [](const TensorView& v, std::initializer_list<int64_t> idx, double x) {
        int64_t off = 0, d = 0;
        for (int64_t i : idx) off += i * v.strides[d++];
        store_from_double(v, off, x);
    };
    const Case cases[] = {
        {"input",
         DType::kF32,
         [](HostProblem& hp) { hp.set_hidden(3, 5, NAN); },
         {"out[3, ", "token row 3 of 10", "expert 3 (slot 0), input row: hidden_states[3, 5] = nan"}},
        {"routing weight",
         DType::kF32,
         [](HostProblem& hp) { hp.set_weight(6, 1, INFINITY); },
         {"token row 6", "expert 3 (slot 1), routing weight: top_k_weights[6, 1] = inf"}},
        {"up weight",
         DType::kBF16,
         [&](HostProblem& hp) {
             element(hp.problem().gate_up_proj, {2, 3, 7}, NAN);
         },
         {"token row 1 ", "expert 2 (slot 1), up projection: output 3 = nan: gate_up_proj[2, 3, 7] = nan"}},
        {"activation overflows f16",
         DType::kF16,
         [&](HostProblem& hp) {  // u = 100 * 16 exactly, h = silu(1600) * 1600 = 2.56e6 > 65504
             for (int64_t h = 0; h < H; ++h) hp.set_hidden(0, h, 1.0);
             for (int64_t n = 0; n < 2 * I; ++n) {
                 element(hp.problem().gate_up_bias, {0, n}, 0.0);
                 for (int64_t h = 0; h < H; ++h) element(hp.problem().gate_up_proj, {0, n, h}, 100.0);
             }
         },
         {"token row 0",
          "expert 0 (slot 0), activation: h[0] = silu(gate 1600) x up 1600 = 2.56e+06, beyond the "
          "largest float16"}},
        {"down bias",
         DType::kF32,
         [&](HostProblem& hp) {
             element(hp.problem().down_bias, {1, 9}, -INFINITY);
         },
         {"token row 0", "expert 1 (slot 1), down projection: output 9: down_proj_bias[1, 9] = -inf"}},
        {"NaN weight on a sentinel slot",
         DType::kF32,
         [](HostProblem& hp) { hp.set_id(2, 0, E), hp.set_weight(2, 0, NAN), hp.set_id(5, 1, -1); },
         {}},
    };
    int ran = 0;
    for (const Case& c : cases) {
        HostProblem hp(T, H, I, E, k, Variant{.dtype = c.dtype, .bias = true}, 26);
        route(hp);
        c.poison(hp);
        for (const Backend* b : backends()) {
            const PlacedProblem placed = place(hp.problem(), device());
            if (refusal(*b, placed)) continue;
            ++ran;
            const std::string what = std::string(b->name()) + ", " + c.what;
            EXPECT_NO_THROW(run_backend(*b, placed)) << what << ": the check is off by default";
            if (c.parts.empty()) {
                EXPECT_NO_THROW(run_backend(*b, placed, RunOptions{.check_finite = true})) << what;
                continue;
            }
            for (const std::string& part : c.parts)
                expect_error([&] { run_backend(*b, placed, RunOptions{.check_finite = true}); }, ErrorCode::kNonFinite,
                             part);
            setenv("MOEX_CHECK_FINITE", "1", 1);
            expect_error([&] { run_backend(*b, placed); }, ErrorCode::kNonFinite, c.parts.back());
            setenv("MOEX_CHECK_FINITE", "0", 1);
            EXPECT_NO_THROW(run_backend(*b, placed)) << what << ": MOEX_CHECK_FINITE=0";
            unsetenv("MOEX_CHECK_FINITE");
        }
    }
    if (ran == 0) GTEST_SKIP() << "no backend ran here";
}

// T·k·H and T·k·2I past 2^31 elements (the routed rows and the up projection's output): 64-bit offsets on CUDA,
// checked on rows on either side of the 2^31st element. The CPU kernels index with int64_t throughout, and at these
// sizes they would need ~10 GB and minutes of a CI machine, so only CUDA runs them.
TEST_P(B6Experts, Row27_MoreThan2To31RoutedElements) {
    if (device() == Device::kCPU) GTEST_SKIP() << "CUDA only (the size needs ~10 GB of host memory on the CPU)";
    const int64_t T = 65600, E = 16, k = 8;
    const int64_t sizes[][2] = {{4096, 64}, {64, 2048}};  // {H, I}: S·H = 2^31 + 2^21, then S·2I the same
    for (const auto& s : sizes) {
        const int64_t H = s[0], I = s[1];
        const HostProblem hp(T, H, I, E, k, Variant{.dtype = DType::kBF16}, 27);
        const ExpertsProblem& p = hp.problem();
        const int64_t rows[] = {0, 1, 32767, 65535, 65536, 65537, T - 1};  // 65536·k·H (or 2I) = 2^31
        const int64_t R = int64_t(std::size(rows));
        Tensor x(DType::kBF16, {R, H}), ids(p.top_k_index.dtype, {R, k}), w(p.top_k_weights.dtype, {R, k});
        for (int64_t r = 0; r < R; ++r) {
            std::memcpy(static_cast<char*>(x.data()) + r * H * 2,
                        static_cast<char*>(p.hidden_states.data) + rows[r] * H * 2, size_t(H * 2));
            std::memcpy(static_cast<char*>(ids.data()) + r * k * dtype_size(ids.view().dtype),
                        static_cast<char*>(p.top_k_index.data) + rows[r] * k * dtype_size(ids.view().dtype),
                        size_t(k * dtype_size(ids.view().dtype)));
            std::memcpy(static_cast<char*>(w.data()) + r * k * dtype_size(w.view().dtype),
                        static_cast<char*>(p.top_k_weights.data) + rows[r] * k * dtype_size(w.view().dtype),
                        size_t(k * dtype_size(w.view().dtype)));
        }
        ExpertsProblem sub = p;
        sub.hidden_states = x.view(), sub.top_k_index = ids.view(), sub.top_k_weights = w.view();
        const Expected ref = reference_of(sub);
        const PlacedProblem placed = place(p, device());
        for (const Backend* b : backends()) {
            if (refusal(*b, placed)) continue;
            const Tensor out = run_backend(*b, placed);
            Tensor got(DType::kBF16, {R, H});
            for (int64_t r = 0; r < R; ++r)
                std::memcpy(static_cast<char*>(got.data()) + r * H * 2,
                            static_cast<const char*>(out.view().data) + rows[r] * H * 2, size_t(H * 2));
            EXPECT_TRUE(outputs_close(got.view(), ref)) << b->name() << " H=" << H << " I=" << I;
        }
    }
}

// Every backend on the device, for each activation dtype, each gate and a quantized problem: it runs and matches
// the reference, or run() raises kUnsupported with the reason why_not() gives (refusal() checks both). Never a
// crash, never a silent fallback.
TEST_P(B6Experts, Row29_UnusableBackendsSayWhy) {
    std::vector<ExpertsProblem> problems;
    std::vector<HostProblem> hosts;
    hosts.reserve(16);
    for (DType d : {DType::kF32, DType::kBF16, DType::kF16})
        for (Activation a : {Activation::kSilu, Activation::kGelu, Activation::kGeluTanh, Activation::kRelu})
            problems.push_back(hosts.emplace_back(6, 64, 32, 4, 2, Variant{.dtype = d, .activation = a}, 29).problem());
    ExpertsProblem quantized = hosts.emplace_back(6, 64, 32, 4, 2, Variant{.dtype = DType::kBF16}, 30).problem();
    const QuantizedExperts q = quantize_experts(quantized, QuantFormat::kFp8, 32, 32);
    problems.push_back(quantized);
    for (const std::string& name : builtin_backends()) {
        const Backend& b = ExpertsInterface::global().get(name);
        for (const ExpertsProblem& p : problems) {
            const PlacedProblem placed = place(p, device());
            if (refusal(b, placed)) continue;
            EXPECT_TRUE(outputs_close(run_backend(b, placed).view(), reference_of(p)))
                << name << " " << dtype_name(p.dtype()) << " " << activation_name(p.activation)
                << (p.quant.enabled() ? " fp8" : "");
        }
    }
}

// A backend that synchronizes the host (eager on CUDA) says so, and run under stream capture it raises a
// moex::Error instead of recording a broken graph; the stream works afterwards.
TEST_P(B6Experts, Row30_HostSyncingBackendUnderCapture) {
    if (device() == Device::kCPU) GTEST_SKIP() << "CUDA graphs are CUDA only";
#if MOEX_WITH_CUDA
    const Backend& eager = ExpertsInterface::global().get("eager");
    ASSERT_TRUE(eager.host_synchronizes(Device::kCUDA));
    const HostProblem hp(9, 64, 32, 8, 2, Variant{.dtype = DType::kBF16}, 31);
    const PlacedProblem placed = place(hp.problem(), Device::kCUDA);
    const int64_t shape[2] = {9, 64};
    DeviceTensor out(DType::kBF16, shape, 2, Device::kCUDA);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    RunOptions o;
    o.cuda_stream = stream;
    eager.run(placed.problem, out.view(), o);  // warm-up outside the capture
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    bool threw = false;
    try {
        eager.run(placed.problem, out.view(), o);
    } catch (const Error& e) {
        threw = true;
        EXPECT_EQ(e.code(), ErrorCode::kCuda) << e.what();
    }
    cudaGraph_t graph = nullptr;
    (void)cudaStreamEndCapture(stream, &graph);
    if (graph != nullptr) (void)cudaGraphDestroy(graph);
    (void)cudaGetLastError();
    EXPECT_TRUE(threw) << "eager ran under capture without an error";
    out.fill_bytes(0xff);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    eager.run(placed.problem, out.view(), o);
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    Tensor host(DType::kBF16, {9, 64});
    out.copy_to_host(host.view());
    EXPECT_TRUE(outputs_close(host.view(), reference_of(hp.problem())));
    ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
#endif
}

INSTANTIATE_TEST_SUITE_P(B6, B6Experts, ::testing::Values(Device::kCPU, Device::kCUDA),
                         [](const auto& info) { return std::string(device_name(info.param)); });

}  // namespace
}  // namespace moex::test
