// Row-wise CPU ops: embed, rms_norm, clamp, add, gated_act, sigmoid_gate_add. Each computes in f32 and rounds where
// the PyTorch modules round: an op's result once, plus the intermediate tensors those modules materialise (the
// normalised x before the weight multiply, act(gate) before the product, sigmoid(gate) before the scaling).
#include <cmath>
#include <cstring>
#include <string>

#include "moex/error.h"
#include "src/cpu/kernels.h"
#include "src/model/ops/cpu_ops.h"

namespace moex::model::cpu_ops {
namespace {

void require_same_shape(const TensorView& a, const TensorView& b, const char* op, const char* a_name,
                        const char* b_name) {
    MOEX_REQUIRE(a.shape[0] == b.shape[0] && a.shape[1] == b.shape[1], ErrorCode::kInvalidArgument,
                 std::string("ops.") + op + ": " + a_name + " " + a.shape_string() + " and " + b_name + " " +
                     b.shape_string() + " must have the same shape");
}

}  // namespace

void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out, int threads) {
    require_matrix(table, "embed", "table");
    require_matrix(out, "embed", "out");
    const int64_t V = table.shape[0], H = table.shape[1];
    MOEX_REQUIRE(
        out.shape[0] == T && out.shape[1] == H, ErrorCode::kInvalidArgument,
        "ops.embed: out " + out.shape_string() + " must be (" + std::to_string(T) + ", " + std::to_string(H) + ")");
    MOEX_REQUIRE(T == 0 || ids != nullptr, ErrorCode::kInvalidArgument, "ops.embed: ids is null");
    for (int64_t t = 0; t < T; ++t)
        MOEX_REQUIRE(
            ids[t] >= 0 && ids[t] < V, ErrorCode::kInvalidArgument,
            "ops.embed: token id " + std::to_string(ids[t]) + " is outside the table's " + std::to_string(V) + " rows");
    for_row_blocks(T, H, threads, [&](int64_t t0, int64_t t1) {
        for (int64_t t = t0; t < t1; ++t) {
            if (table.dtype == out.dtype) {
                std::memcpy(element_ptr(out, t, 0), element_ptr(table, ids[t], 0), size_t(H * dtype_size(out.dtype)));
            } else {
                float* row = scratch(Slot::kTaskA, H);
                load_row(table, ids[t], 0, H, row);
                store_row(row, out, t, 0, H);
            }
        }
    });
}

// Qwen3MoeRMSNorm (and Mixtral's, OLMoE's, Qwen2-MoE's): in f32, x * rsqrt(mean(x^2) + eps), cast to x's dtype, then
// weight * that. The sum of squares is accumulated in double (torch's f32 cascade sum is within a few ulp of it).
void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out, int threads) {
    require_matrix(x, "rms_norm", "x");
    require_matrix(out, "rms_norm", "out");
    require_same_shape(x, out, "rms_norm", "x", "out");
    const int64_t D = require_vector(w, "rms_norm", "w"), C = x.shape[1];
    MOEX_REQUIRE(
        D > 0 && C % D == 0, ErrorCode::kInvalidArgument,
        "ops.rms_norm: the width of x " + x.shape_string() + " is not a multiple of the weight's " + std::to_string(D));
    float* wf = scratch(Slot::kCallerA, D);
    cpu::to_f32(w.data, w.dtype, D, wf);
    const float feps = float(eps);
    for_row_blocks(x.shape[0], C, threads, [&](int64_t t0, int64_t t1) {
        float* row = scratch(Slot::kTaskA, C);
        for (int64_t t = t0; t < t1; ++t) {
            load_row(x, t, 0, C, row);
            for (int64_t g = 0; g < C; g += D) {
                float* v = row + g;
                double ss = 0.0;
                for (int64_t i = 0; i < D; ++i) ss += double(v[i]) * double(v[i]);
                const float r = 1.0f / std::sqrt(float(ss / double(D)) + feps);
                for (int64_t i = 0; i < D; ++i) v[i] = wf[i] * round_to_dtype(v[i] * r, x.dtype);
            }
            store_row(row, out, t, 0, C);
        }
    });
}

void clamp(const TensorView& x, float limit, int threads) {
    require_matrix(x, "clamp", "x");
    MOEX_REQUIRE(!(limit < 0.0f), ErrorCode::kInvalidArgument,
                 "ops.clamp: limit must be >= 0, got " + std::to_string(limit));
    const int64_t C = x.shape[1];
    for_row_blocks(x.shape[0], C, threads, [&](int64_t t0, int64_t t1) {
        float* row = scratch(Slot::kTaskA, C);
        for (int64_t t = t0; t < t1; ++t) {
            load_row(x, t, 0, C, row);
            for (int64_t i = 0; i < C; ++i) {  // NaN stays NaN, as torch.clamp
                const float v = row[i];
                row[i] = v < -limit ? -limit : (v > limit ? limit : v);
            }
            store_row(row, x, t, 0, C);
        }
    });
}

void add(const TensorView& a, const TensorView& b, const TensorView& out, int threads) {
    require_matrix(a, "add", "a");
    require_matrix(b, "add", "b");
    require_matrix(out, "add", "out");
    require_same_shape(a, b, "add", "a", "b");
    require_same_shape(a, out, "add", "a", "out");
    const int64_t C = a.shape[1];
    for_row_blocks(a.shape[0], C, threads, [&](int64_t t0, int64_t t1) {
        float* ra = scratch(Slot::kTaskA, C);
        float* rb = scratch(Slot::kTaskB, C);
        for (int64_t t = t0; t < t1; ++t) {
            load_row(a, t, 0, C, ra);
            load_row(b, t, 0, C, rb);
            for (int64_t i = 0; i < C; ++i) ra[i] += rb[i];
            store_row(ra, out, t, 0, C);
        }
    });
}

// act_fn(gate) * up: the activation is a tensor of gate_up's dtype (rounded), then the product is rounded again.
// The activation is the experts path's gate kernel (vector silu/relu, libm gelu), run ungated.
void gated_act(const TensorView& gate_up, Activation act, const TensorView& out, int threads) {
    require_matrix(gate_up, "gated_act", "gate_up");
    require_matrix(out, "gated_act", "out");
    require_same_rows(gate_up, out, "gated_act", "gate_up", "out");
    const int64_t I = out.shape[1];
    MOEX_REQUIRE(
        gate_up.shape[1] == 2 * I, ErrorCode::kInvalidArgument,
        "ops.gated_act: gate_up " + gate_up.shape_string() + " must be twice as wide as out " + out.shape_string());
    const cpu::GateOp op{false, GateKind::kDefault, act, 1.702f, 7.0f, gate_up.dtype};
    const cpu::KernelTable& kt = cpu::kernels();
    for_row_blocks(out.shape[0], 2 * I, threads, [&](int64_t t0, int64_t t1) {
        float* g = scratch(Slot::kTaskA, I);
        float* u = scratch(Slot::kTaskB, I);
        float* h = scratch(Slot::kTaskC, I);
        for (int64_t t = t0; t < t1; ++t) {
            load_row(gate_up, t, 0, I, g);
            load_row(gate_up, t, I, I, u);
            kt.gate_row(op, nullptr, g, I, h);  // h = round(act(g)), ungated
            for (int64_t i = 0; i < I; ++i) h[i] *= u[i];
            store_row(h, out, t, 0, I);
        }
    });
}

// Qwen2-MoE's shared expert: out + sigmoid(gate) * x, with sigmoid(gate) and the product each a tensor of its dtype.
void sigmoid_gate_add(const TensorView& gate, const TensorView& x, const TensorView& out, int threads) {
    require_matrix(gate, "sigmoid_gate_add", "gate");
    require_matrix(x, "sigmoid_gate_add", "x");
    require_matrix(out, "sigmoid_gate_add", "out");
    require_same_shape(x, out, "sigmoid_gate_add", "x", "out");
    require_same_rows(gate, x, "sigmoid_gate_add", "gate", "x");
    MOEX_REQUIRE(gate.shape[1] == 1, ErrorCode::kInvalidArgument,
                 "ops.sigmoid_gate_add: gate must be (T, 1), got " + gate.shape_string());
    const int64_t C = x.shape[1];
    for_row_blocks(x.shape[0], C, threads, [&](int64_t t0, int64_t t1) {
        float* rx = scratch(Slot::kTaskA, C);
        float* ro = scratch(Slot::kTaskB, C);
        for (int64_t t = t0; t < t1; ++t) {
            float g = 0.0f;
            load_row(gate, t, 0, 1, &g);
            const float s = round_to_dtype(1.0f / (1.0f + std::exp(-g)), gate.dtype);
            load_row(x, t, 0, C, rx);
            load_row(out, t, 0, C, ro);
            for (int64_t i = 0; i < C; ++i) ro[i] += round_to_dtype(s * rx[i], x.dtype);
            store_row(ro, out, t, 0, C);
        }
    });
}

}  // namespace moex::model::cpu_ops
