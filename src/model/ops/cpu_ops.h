// Internals of the CPU Ops (cpu_*.cpp): argument checks, f32 row loads/stores in any float dtype, per-thread
// scratch, a row-blocked parallel loop on moex's pool, and the op bodies the CpuOps class forwards to.
#pragma once

#include <cstdint>
#include <vector>

#include "src/cpu/parallel.h"
#include "src/model/ops/ops.h"

namespace moex::model::cpu_ops {

// ---- checks (moex::Error kInvalidArgument naming the op and the tensor) -------------------------------------------
// A 2-D CPU view with unit column stride and row stride >= its width, in `dtype` when given, else any float dtype.
void require_matrix(const TensorView& t, const char* op, const char* name);
void require_same_rows(const TensorView& a, const TensorView& b, const char* op, const char* a_name,
                       const char* b_name);
// A defined 1-D or (1, n) contiguous CPU float vector; returns its length.
int64_t require_vector(const TensorView& t, const char* op, const char* name);

// ---- rows as f32 ---------------------------------------------------------------------------------------------------
inline char* element_ptr(const TensorView& t, int64_t r, int64_t c) {
    return static_cast<char*>(t.data) + (r * t.strides[0] + c) * dtype_size(t.dtype);
}
// dst[i] = t(r, c0 + i) as f32 for i < n (t bf16 | f16 | f32).
void load_row(const TensorView& t, int64_t r, int64_t c0, int64_t n, float* dst);
// t(r, c0 + i) = src[i] rounded to t's dtype (round-to-nearest-even) for i < n.
void store_row(const float* src, const TensorView& t, int64_t r, int64_t c0, int64_t n);
float round_to_dtype(float v, DType dt);  // the value an f32 result takes once stored in dt

// ---- scratch and threads -------------------------------------------------------------------------------------------
// Per-thread buffers, grow-only. Caller-level slots hold whole operands while tasks run on the pool (the calling thread
// runs tasks too), task-level slots are used inside one task.
enum class Slot : int { kCallerA, kCallerC, kTaskA, kTaskB, kTaskC, kCount };
float* scratch(Slot slot, int64_t n);

// f(r0, r1) over row blocks of [0, rows) on up to `threads` threads; one block when the work (rows * cols elements)
// is too small to pay for waking the pool.
template <class F>
void for_row_blocks(int64_t rows, int64_t cols, int threads, F&& f) {
    constexpr int64_t kMinParallel = int64_t(1) << 15, kBlockElems = int64_t(1) << 13;
    if (threads <= 1 || rows <= 1 || rows * cols < kMinParallel) {
        f(int64_t(0), rows);
        return;
    }
    int64_t block = kBlockElems / (cols > 0 ? cols : 1);
    block = block < 1 ? 1 : block;
    const int64_t blocks = (rows + block - 1) / block;
    cpu::parallel_for(blocks, threads, [&](int64_t b) {
        const int64_t r0 = b * block, r1 = r0 + block < rows ? r0 + block : rows;
        f(r0, r1);
    });
}

// ---- op bodies
// -------------------------------------------------------------------------------------------------------
void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out, int threads);
void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out, int threads);
void clamp(const TensorView& x, float limit, int threads);
void add(const TensorView& a, const TensorView& b, const TensorView& out, int threads);
void gated_act(const TensorView& gate_up, Activation act, const TensorView& out, int threads);
void sigmoid_gate_add(const TensorView& gate, const TensorView& x, const TensorView& out, int threads);
void linear(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out, int threads);
void router_topk(const TensorView& logits, int64_t k, bool normalize, const TensorView& ids, const TensorView& weights,
                 int threads);
void logits_to_host(const TensorView& logits_row, float* host);
int64_t argmax(const TensorView& logits_row);

// cos/sin of one call's positions, already scaled and rounded to the activation dtype; layers of one forward share
// them (same table, positions and dtype), so the cache is recomputed once per forward, not once per rope call.
struct RopeCache {
    std::vector<float> inv_freq;
    float attention_scaling = 0.0f;
    DType dtype = DType::kF32;
    int64_t pos0 = -1, T = 0;
    std::vector<float> cos, sin;  // (T, rotary_dim / 2)
};
void rope(const TensorView& x, int64_t head_dim, int64_t pos0, const RopeTable& table, RopeCache& cache, int threads);

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
               const TensorView& v_cache, int64_t pos0, const AttentionShape& shape, const TensorView& out,
               int threads);

}  // namespace moex::model::cpu_ops
