// The CPU Ops: make_cpu_ops, the class that forwards each op to its body in cpu_*.cpp on moex's thread pool, and
// the shared helpers of cpu_ops.h (argument checks, f32 row loads/stores, per-thread scratch).
#include "src/model/ops/cpu_ops.h"

#include <string>

#include "moex/error.h"
#include "src/cpu/problem.h"
#include "src/model/ops/views.h"

namespace moex::model {
namespace cpu_ops {
namespace {

std::string where(const char* op, const char* name) { return std::string("ops.") + op + ": " + name; }

}  // namespace

void require_matrix(const TensorView& t, const char* op, const char* name) {
    MOEX_REQUIRE(t.defined() && t.data != nullptr, ErrorCode::kInvalidArgument, where(op, name) + " is missing");
    MOEX_REQUIRE(t.device == Device::kCPU, ErrorCode::kInvalidArgument, where(op, name) + " is not on the CPU");
    MOEX_REQUIRE(t.ndim == 2, ErrorCode::kInvalidArgument,
                 where(op, name) + " must be 2-D, got " + std::to_string(t.ndim) + "-D " + t.shape_string());
    MOEX_REQUIRE(is_float_activation(t.dtype), ErrorCode::kInvalidArgument,
                 where(op, name) + " must be float32, bfloat16 or float16, got " + std::string(dtype_name(t.dtype)));
    MOEX_REQUIRE(t.shape[0] >= 0 && t.shape[1] >= 0, ErrorCode::kInvalidArgument,
                 where(op, name) + " has a negative size " + t.shape_string());
    MOEX_REQUIRE(t.strides[1] == 1 && (t.shape[0] <= 1 || t.strides[0] >= t.shape[1]), ErrorCode::kInvalidArgument,
                 where(op, name) + " must have unit column stride and a row stride >= its width " + t.shape_string());
}

void require_same_rows(const TensorView& a, const TensorView& b, const char* op, const char* a_name,
                       const char* b_name) {
    MOEX_REQUIRE(a.shape[0] == b.shape[0], ErrorCode::kInvalidArgument,
                 std::string("ops.") + op + ": " + a_name + " " + a.shape_string() + " and " + b_name + " " +
                     b.shape_string() + " have different row counts");
}

int64_t require_vector(const TensorView& t, const char* op, const char* name) {
    MOEX_REQUIRE(t.defined() && t.data != nullptr, ErrorCode::kInvalidArgument, where(op, name) + " is missing");
    MOEX_REQUIRE(t.device == Device::kCPU, ErrorCode::kInvalidArgument, where(op, name) + " is not on the CPU");
    MOEX_REQUIRE(is_float_activation(t.dtype), ErrorCode::kInvalidArgument,
                 where(op, name) + " must be float32, bfloat16 or float16, got " + std::string(dtype_name(t.dtype)));
    const bool row = t.ndim == 1 || (t.ndim == 2 && t.shape[0] == 1);
    MOEX_REQUIRE(row && t.strides[t.ndim - 1] == 1, ErrorCode::kInvalidArgument,
                 where(op, name) + " must be a contiguous vector (n) or (1, n), got " + t.shape_string());
    return t.shape[t.ndim - 1];
}

void load_row(const TensorView& t, int64_t r, int64_t c0, int64_t n, float* dst) {
    cpu::to_f32(element_ptr(t, r, c0), t.dtype, n, dst);
}

void store_row(const float* src, const TensorView& t, int64_t r, int64_t c0, int64_t n) {
    char* p = element_ptr(t, r, c0);
    if (t.dtype == DType::kF32) {
        float* d = reinterpret_cast<float*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = src[i];
    } else if (t.dtype == DType::kBF16) {
        uint16_t* d = reinterpret_cast<uint16_t*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
    } else {
        uint16_t* d = reinterpret_cast<uint16_t*>(p);
        for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
    }
}

float round_to_dtype(float v, DType dt) { return cpu::round_to(v, dt); }

float* scratch(Slot slot, int64_t n) {
    thread_local cpu::FloatBuffer buffers[int(Slot::kCount)];
    return buffers[int(slot)].get(n > 0 ? n : 1);
}

}  // namespace cpu_ops

namespace {

// One CpuOps serves one calling thread at a time (its rope cache is not locked); the ops themselves run on the pool.
class CpuOps final : public Ops {
   public:
    explicit CpuOps(int num_threads) : num_threads_(num_threads), threads_(cpu::resolve_threads(num_threads)) {}

    Device device() const override { return Device::kCPU; }
    RunOptions experts_options() const override { return RunOptions{num_threads_, nullptr}; }

    void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out) override {
        cpu_ops::embed(ids, T, table, out, threads_);
    }
    void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out) override {
        cpu_ops::rms_norm(x, w, eps, out, threads_);
    }
    void linear(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override {
        cpu_ops::linear(x, w, bias, out, threads_);
    }
    void add_rms_norm(const TensorView& a, const TensorView& b, const TensorView& sum, const TensorView& w, double eps,
                      const TensorView& out) override {
        cpu_ops::add(a, b, sum, threads_);
        cpu_ops::rms_norm(sum, w, eps, out, threads_);
    }
    void clamp(const TensorView& x, float limit) override { cpu_ops::clamp(x, limit, threads_); }
    void qk_norm_rope(const TensorView& qk, int64_t q_heads, int64_t head_dim, const TensorView& q_norm,
                      const TensorView& k_norm, double eps, const Position& pos0, const RopeTable& rope) override {
        host_position(pos0, "qk_norm_rope");
        cpu_ops::require_matrix(qk, "qk_norm_rope", "qk");
        const int64_t qw = q_heads * head_dim;
        MOEX_REQUIRE(head_dim > 0 && q_heads >= 0 && qw <= qk.shape[1], ErrorCode::kInvalidArgument,
                     "ops.qk_norm_rope: " + std::to_string(q_heads) + " q heads of " + std::to_string(head_dim) +
                         " do not fit qk " + qk.shape_string());
        const TensorView q = column_block(qk, 0, qw), k = column_block(qk, qw, qk.shape[1] - qw);
        if (q_norm.defined()) cpu_ops::rms_norm(q, q_norm, eps, q, threads_);
        if (k_norm.defined()) cpu_ops::rms_norm(k, k_norm, eps, k, threads_);
        cpu_ops::rope(qk, head_dim, pos0.host, rope, rope_cache_, threads_);
    }
    void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                   const TensorView& v_cache, const Position& pos0, const AttentionShape& shape,
                   const TensorView& out) override {
        host_position(pos0, "attention");
        cpu_ops::attention(q, k, v, k_cache, v_cache, pos0.host, shape, out, threads_);
    }
    void gated_act(const TensorView& gate_up, Activation act, const TensorView& out) override {
        cpu_ops::gated_act(gate_up, act, out, threads_);
    }
    void router_topk(const TensorView& logits, int64_t k, bool normalize, const TensorView& ids,
                     const TensorView& weights) override {
        cpu_ops::router_topk(logits, k, normalize, ids, weights, threads_);
    }
    void sigmoid_gate_add(const TensorView& gate, const TensorView& x, const TensorView& out) override {
        cpu_ops::sigmoid_gate_add(gate, x, out, threads_);
    }
    void logits_to_host(const TensorView& logits_row, float* host) override {
        cpu_ops::logits_to_host(logits_row, host);
    }
    int64_t argmax(const TensorView& logits_row) override { return cpu_ops::argmax(logits_row); }
    void synchronize() override {}  // every CPU op has finished when it returns

   private:
    static void host_position(const Position& p, const char* op) {
        MOEX_REQUIRE(p.device == nullptr, ErrorCode::kUnsupported,
                     std::string("ops.") + op + ": the CPU ops take positions from the host, not device memory");
    }

    int num_threads_;  // as given (0 = all hardware threads), passed on to the experts backends
    int threads_;      // resolved
    cpu_ops::RopeCache rope_cache_;
};

}  // namespace

std::unique_ptr<Ops> make_cpu_ops(int num_threads) {
    MOEX_REQUIRE(
        num_threads >= 0, ErrorCode::kInvalidArgument,
        "make_cpu_ops: num_threads must be >= 0 (0 = all hardware threads), got " + std::to_string(num_threads));
    return std::make_unique<CpuOps>(num_threads);
}

}  // namespace moex::model
