// Edge cases for every backend on every device, in each activation dtype it accepts: T = 0, sentinel ids, duplicate
// ids, k = E, k = 1, one hot expert, experts with no tokens, odd sizes, NaN confinement to its own token, large T.
#include <cmath>
#include <cstdint>
#include <limits>

#include "moex/error.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

class EdgeCases : public ::testing::TestWithParam<BackendOnDevice> {
   protected:
    const Backend& backend() const { return ExpertsInterface::global().get(GetParam().backend); }

    // Places and runs the host problem; nullopt (reason kept) when the backend refuses it.
    std::optional<Tensor> run(const ExpertsProblem& host) {
        const PlacedProblem placed = place(host, GetParam().device);
        if (auto why = refusal(backend(), placed)) {
            refused_ += *why + "; ";
            return std::nullopt;
        }
        ++ran_;
        return run_backend(backend(), placed);
    }
    // Runs and compares with the reference (restricted to `rows` when given).
    void expect_matches(const HostProblem& hp, const std::string& what, const std::vector<char>& rows = {}) {
        const auto out = run(hp.problem());
        if (!out) return;
        EXPECT_TRUE(outputs_close(out->view(), reference_of(hp.problem()), rows)) << what;
    }
    std::string refused_;
    int ran_ = 0;
};

// Ends a test that found nothing the backend would run with a recorded skip.
#define MOEX_SKIP_IF_NOTHING_RAN()    \
    do {                              \
        if (ran_ == 0) {              \
            GTEST_SKIP() << refused_; \
        }                             \
    } while (0)

const DType kDtypes[] = {DType::kF32, DType::kBF16, DType::kF16};

Variant with_dtype(DType d) {
    Variant v;
    v.dtype = d;
    return v;
}

TEST_P(EdgeCases, EmptyBatch) {
    for (DType d : kDtypes) {
        const HostProblem hp(0, 37, 19, 6, 2, with_dtype(d), 1);
        std::optional<Tensor> out;
        EXPECT_NO_THROW(out = run(hp.problem())) << dtype_name(d);
        if (out) {
            EXPECT_EQ(out->view().numel(), 0);
        }
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

// Slots with ids outside [0, E) — -1, E, E + 5, INT32_MAX, INT32_MIN, and with int64 ids 2^32 (0 if truncated to
// int32), 2^40, INT64_MAX/MIN — carry NaN or Inf weights. Experts 0 and E - 1 (where a clamping kernel would land)
// are never routed and hold NaN. The output must equal the problem with those slots removed (id 1, weight 0), be
// finite everywhere, and be exactly 0 for the token whose every slot is a sentinel.
TEST_P(EdgeCases, SentinelIdsContributeExactlyZero) {
    const int64_t T = 24, H = 40, I = 24, E = 8, k = 4;
    for (DType d : kDtypes) {
        for (bool i64 : {false, true}) {
            Variant v = with_dtype(d);
            v.ids_i64 = i64, v.bias = true;
            std::vector<int64_t> sentinels = {-1, E, E + 5, INT32_MAX, INT32_MIN};
            if (i64) sentinels.insert(sentinels.end(), {int64_t(1) << 32, int64_t(1) << 40, INT64_MAX, INT64_MIN});
            HostProblem with(T, H, I, E, k, v, 2), removed(T, H, I, E, k, v, 2);
            for (HostProblem* hp : {&with, &removed}) hp->fill_expert(0, NAN), hp->fill_expert(E - 1, NAN);
            int s = 0;
            for (int64_t t = 0; t < T; ++t) {
                for (int64_t j = 0; j < k; ++j) {
                    const int64_t valid = 1 + with.id(t, j) % (E - 2);  // in [1, E - 2]
                    with.set_id(t, j, valid), removed.set_id(t, j, valid);
                    if (t != 5 && (t + j) % 3 != 0) continue;  // token 5: all sentinels
                    with.set_id(t, j, sentinels[size_t(s) % sentinels.size()]);
                    with.set_weight(t, j, s++ % 2 ? NAN : INFINITY);
                    removed.set_id(t, j, 1), removed.set_weight(t, j, 0.0);
                }
            }
            const Expected ref = reference_of(removed.problem());
            ASSERT_EQ(reference_of(with.problem()).out, ref.out) << "the reference itself leaks a sentinel slot";
            const auto out = run(with.problem());
            if (!out) continue;
            const std::string what = std::string(dtype_name(d)) + (i64 ? " int64" : " int32") + " ids";
            EXPECT_TRUE(outputs_close(out->view(), ref)) << what;
            for (int64_t h = 0; h < H; ++h)
                ASSERT_EQ(load_as_double(out->view(), 5 * H + h), 0.0) << what << ": all-sentinel token, h=" << h;
        }
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

TEST_P(EdgeCases, DuplicateIdsCountTwice) {
    for (DType d : kDtypes) {
        HostProblem hp(19, 37, 19, 6, 4, with_dtype(d), 3);
        for (int64_t t = 0; t < 19; ++t) {  // patterns e e e' e, e e e e, ...
            const int64_t e = t % 6, e2 = (t + 1 + t % 5) % 6;
            hp.set_id(t, 0, e), hp.set_id(t, 1, e), hp.set_id(t, 2, t % 2 ? e : e2), hp.set_id(t, 3, e);
        }
        expect_matches(hp, std::string(dtype_name(d)));
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

TEST_P(EdgeCases, TopKEqualsNumExperts) {
    for (DType d : kDtypes) {
        Variant v = with_dtype(d);
        v.transposed = true;
        expect_matches(HostProblem(21, 37, 19, 6, 6, v, 4), std::string(dtype_name(d)));  // each token: all experts
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

// k > 32: the CUDA gathers walk a token's slots 32 at a time (one lane each), so slots 32..35 take a second pass; one
// of them is a sentinel.
TEST_P(EdgeCases, TopKPastOneWarp) {
    for (DType d : kDtypes) {
        HostProblem hp(9, 40, 24, 40, 36, with_dtype(d), 8);
        hp.set_id(4, 33, 40);
        expect_matches(hp, std::string(dtype_name(d)));
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

TEST_P(EdgeCases, TopKOne) {
    for (DType d : kDtypes) expect_matches(HostProblem(33, 40, 24, 8, 1, with_dtype(d), 5), std::string(dtype_name(d)));
    MOEX_SKIP_IF_NOTHING_RAN();
}

TEST_P(EdgeCases, AllTokensOnOneExpert) {
    for (DType d : kDtypes) {
        HostProblem hp(70, 40, 24, 8, 2, with_dtype(d), 6);
        for (int64_t t = 0; t < 70; ++t) hp.set_id(t, 0, 7), hp.set_id(t, 1, 7);
        expect_matches(hp, std::string(dtype_name(d)));
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

// 16 experts, tokens only on experts 2 and 11; the 14 idle experts hold NaN, which must never reach the output.
TEST_P(EdgeCases, IdleExpertsAreNeverRead) {
    for (DType d : kDtypes) {
        HostProblem hp(10, 40, 24, 16, 2, with_dtype(d), 7);
        for (int64_t t = 0; t < 10; ++t) hp.set_id(t, 0, t % 2 ? 2 : 11), hp.set_id(t, 1, t % 2 ? 11 : 2);
        for (int64_t e = 0; e < 16; ++e)
            if (e != 2 && e != 11) hp.fill_expert(e, NAN);
        expect_matches(hp, std::string(dtype_name(d)));
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

// Sizes that are not multiples of 8 (or of anything): vector tails in H and I, N = 2I odd halves.
TEST_P(EdgeCases, OddSizes) {
    const int64_t sizes[][4] = {{37, 19, 5, 2}, {1, 1, 3, 2}, {3, 2, 2, 2}, {9, 7, 3, 3}, {17, 33, 4, 1}};
    int n = 0;
    for (DType d : kDtypes) {
        for (const auto& s : sizes) {
            Variant v = with_dtype(d);
            v.transposed = n % 2, v.concatenated = n % 3 != 0, v.bias = n % 2 == 0;
            const HostProblem hp(11 + n, s[0], s[1], s[2], s[3], v, uint64_t(8 + n));
            expect_matches(hp, v.name() + " H=" + std::to_string(s[0]) + " I=" + std::to_string(s[1]));
            ++n;
        }
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

// A NaN in token 13's input, an Inf in token 20's, and a NaN routing weight on a valid slot of token 30: those rows
// are free, every other row must be finite and match.
TEST_P(EdgeCases, NonFiniteStaysInItsToken) {
    const int64_t T = 48, H = 40;
    for (DType d : kDtypes) {
        HostProblem hp(T, H, 24, 8, 2, with_dtype(d), 9);
        hp.set_hidden(13, 5, NAN), hp.set_hidden(20, 0, INFINITY), hp.set_weight(30, 1, NAN);
        std::vector<char> rows(T, 1);
        rows[13] = rows[20] = rows[30] = 0;
        expect_matches(hp, std::string(dtype_name(d)), rows);
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

TEST_P(EdgeCases, LargeTokenCount) {
    for (DType d : {DType::kF32, DType::kBF16}) {
        Variant v = with_dtype(d);
        v.bias = true;
        expect_matches(HostProblem(3000, 24, 16, 8, 2, v, 10), std::string(dtype_name(d)));
        // one expert with all the rows: split into row blocks of kMc (config.h) that share its prepared rows
        expect_matches(HostProblem(2100, 40, 24, 1, 1, v, 11), std::string(dtype_name(d)) + " one expert");
    }
    MOEX_SKIP_IF_NOTHING_RAN();
}

INSTANTIATE_TEST_SUITE_P(All, EdgeCases, ::testing::ValuesIn(backends_on_devices()),
                         [](const auto& info) { return param_name(info.param); });

}  // namespace
}  // namespace moex::test
