// The shared test harness: random problems (fresh data, never zeros), host/CUDA placement through DeviceTensor with
// poisoned outputs, the per-dtype tolerances (in ONE place, tolerance_for) and a comparison that reports
// max abs/rel error and the first bad index. Every backend test goes through here.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "common/shapes.h"
#include "moex/backend.h"
#include "moex/device.h"
#include "moex/error.h"
#include "tests/reference.h"

namespace moex::test {

// One point of the layout space. The defaults are a Mixtral-style float32 SwiGLU.
struct Variant {
    DType dtype = DType::kF32;
    bool has_gate = true;
    GateKind gate = GateKind::kDefault;
    Activation activation = Activation::kSilu;
    bool concatenated = true;  // false: interleaved columns [g0, u0, g1, u1, ...]
    bool transposed = false;
    bool bias = false;
    bool ids_i64 = false;
    bool weights_f32 = true;   // false: top_k_weights in the activation dtype
    std::string name() const;  // gtest-safe, e.g. "bf16_interleaved_transposed_bias_gptoss_i64_wact"
};

// A random problem that owns its host tensors. Values ~ N(0, scale) re-drawn until nonzero in their dtype:
// hidden_states scale 1, W_up 1/sqrt(H), W_down 1/sqrt(I) (so every stage stays O(1)), biases 0.5, routing
// weights 0.5. The gpt_oss variant uses swiglu_limit 1 so that both clamps fire on ~30% of the values.
// Each token gets k distinct random experts when k <= E. Draw order is data first, then ids and weights, so two
// problems with the same sizes and seed hold the same data even when their k differ.
class HostProblem {
   public:
    HostProblem(int64_t T, int64_t H, int64_t I, int64_t E, int64_t k, const Variant& v, uint64_t seed);
    HostProblem(const shapes::ExpertsShape& s, int64_t T, const Variant& v, uint64_t seed)
        : HostProblem(T, s.H, s.I, s.E, s.k, v, seed) {}

    const ExpertsProblem& problem() const { return p_; }
    int64_t id(int64_t t, int64_t j) const { return expert_id(p_.top_k_index, t, j); }
    void set_id(int64_t t, int64_t j, int64_t id);  // stored in the ids' dtype (int32 ids wrap as int32 does)
    void set_weight(int64_t t, int64_t j, double w);
    void set_hidden(int64_t t, int64_t h, double v);
    void fill_expert(int64_t e, double v);  // every weight and bias of expert e (e.g. NaN for "never read")

   private:
    Tensor hidden_, ids_, weights_, up_, down_, up_bias_, down_bias_;
    ExpertsProblem p_;
};

// Writes v, rounded to t's dtype, at element `offset` of a host tensor.
void store_from_double(const TensorView& t, int64_t offset, double v);

std::vector<Device> devices_under_test();  // CPU, plus CUDA when this build and machine have a device

// A copy of a host problem's tensors on `device` (a fresh host copy for kCPU), owning the copies.
struct PlacedProblem {
    std::vector<DeviceTensor> buffers;
    ExpertsProblem problem;
};
PlacedProblem place(const ExpertsProblem& host, Device device);

// Runs `backend` on the placed problem into a (T, H) output poisoned with 0xff bytes (NaN in bf16, f16 and f32)
// and returns that output on the host. Throws what run() throws.
Tensor run_backend(const Backend& backend, const PlacedProblem& placed, const RunOptions& options = {});

// The reference of host problem `p`, rounding h as the backends do for 16-bit dtypes (see ReferenceOptions), and
// per output the slack a 16-bit backend may add by rounding each slot's weighted term w·(y + b) to the dtype before
// the sum, as torch's bf16 experts do: u·Σ_slots |w·(y + b)| (u the unit
// roundoff, the most one rounding moves a value: 2^-8 bf16, 2^-11 f16; 0 in f32). Where slot terms cancel, that
// rounding exceeds any bound made of the rms and |out| alone (measured: 153 of 378 bf16 cases; RESULTS N).
struct Expected {
    std::vector<double> out, slack;
    operator const std::vector<double>&() const { return out; }  // NOLINT: reads as the reference values
};
Expected reference_of(const ExpertsProblem& p);

// |got - ref| <= atol * rms(ref) + rtol * |ref| element-wise; NaN or Inf in got always fails.
// Quantized activations may also leave a few outliers: at most outlier_fraction of the values may miss atol/rtol
// if each stays within outlier_atol * rms (one e4m3 step of one input, see tolerance_for(problem)).
struct Tolerance {
    double atol, rtol;
    double outlier_fraction = 0, outlier_atol = 0;
};
Tolerance tolerance_for(DType dtype);
// The tolerance of a problem: its dtype's, widened where activations are quantized (see test_support.cpp).
Tolerance tolerance_for(const ExpertsProblem& p);

// Compares a host (T, H) output to the reference with tolerance_for(got.dtype). rows, when given, selects the
// rows to check (rows[t] != 0). The failure message names max abs/rel error, the count and the first bad index.
::testing::AssertionResult outputs_close(const TensorView& got, const std::vector<double>& ref,
                                         const std::vector<char>& rows = {},
                                         std::optional<Tolerance> tolerance = std::nullopt);
// The same against an Expected: each element's slack is added to its bound.
::testing::AssertionResult outputs_close(const TensorView& got, const Expected& ref, const std::vector<char>& rows = {},
                                         std::optional<Tolerance> tolerance = std::nullopt);

bool bitwise_equal(const Tensor& a, const Tensor& b);

// When the backend refuses the placed problem (why_not), checks that the refusal is sound — a CUDA-only backend
// asked for CPU says "CUDA only", and run() then throws moex::Error instead of running — and returns the reason.
std::optional<std::string> refusal(const Backend& backend, const PlacedProblem& placed);

// Every registered backend on every device under test, read when gtest registers the tests: a new backend in
// the registry is tested with no edit here.
struct BackendOnDevice {
    std::string backend;
    Device device;
};
std::vector<BackendOnDevice> backends_on_devices();
std::string param_name(const BackendOnDevice& bd);          // "eager_cpu"
void PrintTo(const BackendOnDevice& bd, std::ostream* os);  // how gtest shows the parameter
std::string gtest_safe(std::string s);                      // non-alphanumerics -> '_'

// A path in a per-process temporary folder that is removed when the test program exits.
std::string temp_path(const std::string& stem);

// Why the AMX kernel tests cannot run here (no AMX-TILE + AMX-BF16, or the OS refuses the tile state), null when they
// can.
const char* amx_skip();

// f() with the environment variable `name` set to `value` (a pipeline's A/B switch, for a twin run), unset after it,
// also when f throws.
template <class F>
auto with_env(const char* name, const char* value, F&& f) {
    struct Unset {
        const char* name;
        ~Unset() { unsetenv(name); }
    } unset{name};
    setenv(name, value, 1);
    return f();
}

// Runs f, expecting a moex::Error with `code` whose message contains `part`.
template <class F>
void expect_error(F&& f, ErrorCode code, const std::string& part) {
    try {
        f();
        ADD_FAILURE() << "no error; expected one containing: " << part;
    } catch (const Error& e) {
        EXPECT_EQ(int(e.code()), int(code)) << e.what();
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "message: " << e.what();
    }
}

}  // namespace moex::test

// Skips the current test with the backend's reason when it refuses the placed problem.
#define MOEX_SKIP_IF_REFUSED(backend, placed)                              \
    do {                                                                   \
        if (auto moex_why_ = ::moex::test::refusal((backend), (placed))) { \
            GTEST_SKIP() << *moex_why_;                                    \
        }                                                                  \
    } while (0)
