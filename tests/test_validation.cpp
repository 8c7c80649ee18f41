// Bad inputs: wrong shapes, dtypes, ranks, strides, devices, flags and sizes. validate() and every registered
// backend's run() must throw moex::Error whose message names the offending tensor or flag; never crash.
#include <cmath>
#include <functional>

#include "moex/error.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

constexpr int64_t T = 5, H = 10, I = 6, E = 4, k = 2;  // 2I != H, so no layout is ambiguous

// A valid problem to break one thing at a time; `keep` owns the replacement buffers.
struct Subject {
    HostProblem base;
    ExpertsProblem p;
    Tensor out_buffer;
    TensorView out;
    std::vector<Tensor> keep;

    Subject() : base(T, H, I, E, k, variant(), 12), p(base.problem()), out_buffer(DType::kF32, {T, H}) {
        out = out_buffer.view();
    }
    static Variant variant() {
        Variant v;
        v.bias = true;
        return v;
    }
    TensorView make(DType d, std::initializer_list<int64_t> shape) { return keep.emplace_back(d, shape).view(); }
    // A view of `shape` whose row stride is padded by 3 elements (so it is not contiguous).
    TensorView padded(DType d, int64_t rows, int64_t cols) {
        TensorView v = make(d, {rows, cols + 3});
        v.shape[1] = cols;
        return v;
    }
};

struct BadCase {
    const char* name;
    const char* expect;  // a substring the message must contain
    std::function<void(Subject&)> mutate;
};

const std::vector<BadCase>& bad_cases() {
    using D = DType;
    // One line per case reads as a table.
    // clang-format off
    static const std::vector<BadCase> cases = {
        {"hidden_rank1", "hidden_states", [](Subject& s) { s.p.hidden_states = s.make(D::kF32, {T * H}); }},
        {"hidden_absent", "hidden_states", [](Subject& s) { s.p.hidden_states = TensorView{}; }},
        {"hidden_H0", "hidden_states", [](Subject& s) { s.p.hidden_states = s.make(D::kF32, {T, 0}); }},
        {"hidden_int32", "hidden_states", [](Subject& s) { s.p.hidden_states = s.make(D::kI32, {T, H}); }},
        {"hidden_f64", "hidden_states", [](Subject& s) { s.p.hidden_states = s.make(D::kF64, {T, H}); }},
        {"hidden_strided", "hidden_states", [](Subject& s) { s.p.hidden_states = s.padded(D::kF32, T, H); }},
        {"ids_rows", "top_k_index", [](Subject& s) { s.p.top_k_index = s.make(D::kI32, {T + 1, k}); }},
        {"ids_rank1", "top_k_index", [](Subject& s) { s.p.top_k_index = s.make(D::kI32, {T * k}); }},
        {"ids_float", "top_k_index", [](Subject& s) { s.p.top_k_index = s.make(D::kF32, {T, k}); }},
        {"ids_strided", "top_k_index", [](Subject& s) { s.p.top_k_index = s.padded(D::kI64, T, k); }},
        {"weights_cols", "top_k_weights", [](Subject& s) { s.p.top_k_weights = s.make(D::kF32, {T, k + 1}); }},
        {"weights_rows", "top_k_weights", [](Subject& s) { s.p.top_k_weights = s.make(D::kF32, {T - 1, k}); }},
        {"weights_int", "top_k_weights", [](Subject& s) { s.p.top_k_weights = s.make(D::kI32, {T, k}); }},
        {"weights_bf16", "top_k_weights", [](Subject& s) { s.p.top_k_weights = s.make(D::kBF16, {T, k}); }},
        {"weights_absent", "top_k_weights", [](Subject& s) { s.p.top_k_weights = TensorView{}; }},
        {"up_rows", "gate_up_proj", [](Subject& s) { s.p.gate_up_proj = s.make(D::kF32, {E, 2 * I + 1, H}); }},
        {"up_cols", "gate_up_proj", [](Subject& s) { s.p.gate_up_proj = s.make(D::kF32, {E, 2 * I, H + 1}); }},
        {"up_bf16", "gate_up_proj", [](Subject& s) { s.p.gate_up_proj = s.make(D::kBF16, {E, 2 * I, H}); }},
        {"up_rank2", "gate_up_proj", [](Subject& s) { s.p.gate_up_proj = s.make(D::kF32, {2 * I, H}); }},
        {"up_not_transposed", "gate_up_proj",
         [](Subject& s) {
             s.p.is_transposed = true;
             s.p.down_proj = s.make(D::kF32, {E, I, H});
         }},
        {"up_strided", "gate_up_proj",
         [](Subject& s) {
             TensorView v = s.p.gate_up_proj;  // (E, 2I, H) read as its transpose's strides
             std::swap(v.strides[1], v.strides[2]);
             s.p.gate_up_proj = v;
         }},
        {"ungated_up_2I", "up_proj", [](Subject& s) { s.p.has_gate = false; }},
        {"down_experts", "down_proj", [](Subject& s) { s.p.down_proj = s.make(D::kF32, {E + 1, H, I}); }},
        {"down_H", "down_proj", [](Subject& s) { s.p.down_proj = s.make(D::kF32, {E, H + 1, I}); }},
        {"down_f16", "down_proj", [](Subject& s) { s.p.down_proj = s.make(D::kF16, {E, H, I}); }},
        {"down_rank2", "down_proj", [](Subject& s) { s.p.down_proj = s.make(D::kF32, {H, I}); }},
        {"down_absent", "down_proj", [](Subject& s) { s.p.down_proj = TensorView{}; }},
        {"down_null", "down_proj", [](Subject& s) { s.p.down_proj.data = nullptr; }},
        {"down_strided", "down_proj",
         [](Subject& s) {
             TensorView v = s.make(D::kF32, {E + 1, H, I});
             v.shape[0] = E, v.strides[0] = 2 * H * I;  // every other expert of a larger buffer
             s.p.down_proj = v;
         }},
        {"up_bias_shape", "gate_up_proj_bias", [](Subject& s) { s.p.gate_up_bias = s.make(D::kF32, {E, 2 * I + 1}); }},
        {"up_bias_bf16", "gate_up_proj_bias", [](Subject& s) { s.p.gate_up_bias = s.make(D::kBF16, {E, 2 * I}); }},
        {"up_bias_rank3", "gate_up_proj_bias", [](Subject& s) { s.p.gate_up_bias = s.make(D::kF32, {E, 2 * I, 1}); }},
        {"down_bias_shape", "down_proj_bias", [](Subject& s) { s.p.down_bias = s.make(D::kF32, {E, H + 1}); }},
        {"down_bias_f16", "down_proj_bias", [](Subject& s) { s.p.down_bias = s.make(D::kF16, {E, H}); }},
        {"gptoss_ungated", "has_gate",
         [](Subject& s) {
             s.p.has_gate = false, s.p.gate = GateKind::kGptOss;
             s.p.gate_up_proj = s.make(D::kF32, {E, I, H}), s.p.gate_up_bias = s.make(D::kF32, {E, I});
         }},
        {"interleaved_ungated", "is_concatenated",
         [](Subject& s) {
             s.p.has_gate = false, s.p.is_concatenated = false;
             s.p.gate_up_proj = s.make(D::kF32, {E, I, H}), s.p.gate_up_bias = s.make(D::kF32, {E, I});
         }},
        {"gptoss_limit0", "swiglu_limit", [](Subject& s) { s.p.gate = GateKind::kGptOss, s.p.swiglu_limit = 0; }},
        {"gptoss_alphanan", "swiglu_alpha", [](Subject& s) { s.p.gate = GateKind::kGptOss, s.p.swiglu_alpha = NAN; }},
        {"E0", "E = 0",
         [](Subject& s) {
             s.p.gate_up_proj = s.make(D::kF32, {0, 2 * I, H}), s.p.down_proj = s.make(D::kF32, {0, H, I});
             s.p.gate_up_bias = s.make(D::kF32, {0, 2 * I}), s.p.down_bias = s.make(D::kF32, {0, H});
         }},
        {"I0", "down_proj",
         [](Subject& s) {
             s.p.gate_up_proj = s.make(D::kF32, {E, 0, H}), s.p.down_proj = s.make(D::kF32, {E, H, 0});
             s.p.gate_up_bias = s.make(D::kF32, {E, 0});
         }},
        {"weights_on_cuda", "top_k_weights", [](Subject& s) { s.p.top_k_weights.device = Device::kCUDA; }},
        {"down_on_gpu1", "down_proj", [](Subject& s) { s.p.down_proj.device_index = 1; }},
        {"out_shape", "out", [](Subject& s) { s.out = s.make(D::kF32, {T, H + 1}); }},
        {"out_rows", "out", [](Subject& s) { s.out = s.make(D::kF32, {T + 1, H}); }},
        {"out_bf16", "out", [](Subject& s) { s.out = s.make(D::kBF16, {T, H}); }},
        {"out_rank1", "out", [](Subject& s) { s.out = s.make(D::kF32, {T * H}); }},
        {"out_strided", "out", [](Subject& s) { s.out = s.padded(D::kF32, T, H); }},
        {"out_on_cuda", "out", [](Subject& s) { s.out.device = Device::kCUDA; }},
    };
    // clang-format on
    return cases;
}

void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class Validation : public ::testing::TestWithParam<BadCase> {};

TEST_P(Validation, NamesTheOffender) {
    const BadCase& c = GetParam();
    Subject s;
    ASSERT_NO_THROW(s.p.validate());
    ASSERT_NO_THROW(s.p.validate_output(s.out));
    c.mutate(s);
    try {
        s.p.validate();
        s.p.validate_output(s.out);
        ADD_FAILURE() << c.name << ": validate() accepted it";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << e.what();
        EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
            << c.name << ": message does not name `" << c.expect << "`: " << e.what();
    }
    for (const std::string& name : ExpertsInterface::global().names()) {
        try {
            ExpertsInterface::global().run(name, s.p, s.out);
            ADD_FAILURE() << name << " ran a problem with " << c.name;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos)
                << name << ", " << c.name << ": message does not name `" << c.expect << "`: " << e.what();
        } catch (const std::exception& e) {
            ADD_FAILURE() << name << ", " << c.name << ": threw a non-moex exception: " << e.what();
        }
    }
}

INSTANTIATE_TEST_SUITE_P(All, Validation, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace moex::test
