// Ops: the dense parts of a decoder layer on one device (CPU or CUDA), so that the forward pass in model.cpp is
// written once. The experts call itself goes through ExpertsInterface with experts_options().
//
// Conventions: tensors are 2-D views on the ops' device with unit column stride; a row stride larger than the width
// is allowed where a comment says "row-strided" (sub-blocks of the fused qkv rows). Activations are in the run dtype
// (f32 | bf16) and every op rounds its result to that dtype once, as the PyTorch modules do; reductions
// (norms, softmax, dot products) accumulate in f32. Ops run asynchronously on the device's stream; only the
// host-returning ops synchronise.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "moex/backend.h"
#include "moex/model_config.h"
#include "moex/tensor.h"

namespace moex::model {

// Rotary embedding: angle(pos, i) = pos * inv_freq[i] (f32), cos/sin scaled by attention_scaling, rotate-half
// convention over the first rotary_dim elements of each head (the rest pass through).
struct RopeTable {
    std::vector<float> inv_freq;  // rotary_dim / 2
    float attention_scaling = 1.0f;
    int64_t rotary_dim = 0;
};

struct AttentionShape {
    int64_t num_heads = 0, num_kv_heads = 0, head_dim = 0;
    int64_t sliding_window = 0;  // 0 = full causal attention; else keys with pos > query_pos - window
    float scale = 0.0f;          // softmax scale, head_dim^-0.5
};

// A forward's first position. A captured decode step reads it from device memory when it runs (device set, CUDA
// only), so one recording serves every position; host is then the value the caller checked against the cache.
struct Position {
    Position(int64_t host_pos = 0, const int64_t* device_pos = nullptr) : host(host_pos), device(device_pos) {}
    int64_t host;
    const int64_t* device;
};

// Ops recorded once and replayed as one unit (a CUDA graph). current() is false once the ops' own scratch was
// reallocated after the recording: record again.
class Recording {
   public:
    virtual ~Recording() = default;
    virtual void replay() = 0;
    virtual bool current() const = 0;
};

class Ops {
   public:
    virtual ~Ops() = default;
    virtual Device device() const = 0;
    virtual RunOptions experts_options() const = 0;  // threads (CPU) or stream (CUDA) for the experts backends

    // out (T, H) = table[ids[t]]; ids are host int32, already checked to be < table rows.
    virtual void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out) = 0;
    // The same with ids (T) int32 in device memory (a captured decode step's token; CUDA only).
    virtual void embed_device(const TensorView& ids, const TensorView& table, const TensorView& out);
    // out = x * rsqrt(mean(x^2) + eps) * w over each group of w.numel() consecutive elements of a row (w (D) on
    // x (T, n*D) is a per-head norm). x and out row-strided; in place allowed.
    virtual void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out) = 0;
    // out (T, N) = x (T, K) · wᵀ + bias; w (N, K) in the run dtype; bias (N) or undefined; out in the run dtype or f32.
    virtual void linear(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) = 0;
    // sum = a + b (elementwise, same shapes; sum may alias a or b), then out = rms_norm(sum) with w over whole rows:
    // a decoder layer's residual add and the norm after it, one launch on CUDA.
    virtual void add_rms_norm(const TensorView& a, const TensorView& b, const TensorView& sum, const TensorView& w,
                              double eps, const TensorView& out) = 0;
    // x = clamp(x, -limit, limit) in place; row-strided.
    virtual void clamp(const TensorView& x, float limit) = 0;
    // In place on qk (T, (q_heads + k_heads) * head_dim), row-strided: the q heads, then the k heads of the fused qkv
    // rows. Each q head is RMS-normed with q_norm (head_dim) and each k head with k_norm when they are defined
    // (Qwen3's per-head q/k norm), then every head of row t gets the rotary embedding at position pos0 + t.
    // One launch on CUDA.
    virtual void qk_norm_rope(const TensorView& qk, int64_t q_heads, int64_t head_dim, const TensorView& q_norm,
                              const TensorView& k_norm, double eps, const Position& pos0, const RopeTable& rope) = 0;
    // Writes k and v (T, nkv*D each, row-strided views into qkv) into the layer's caches (max_len, nkv*D) at rows
    // [pos0, pos0 + T), then causal grouped-query attention of q (T, nq*D, row-strided) at positions pos0 + t over
    // cache rows [0, pos0 + t]; out (T, nq*D) contiguous. Scores and softmax in f32.
    virtual void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                           const TensorView& v_cache, const Position& pos0, const AttentionShape& shape,
                           const TensorView& out) = 0;
    // out (T, I) = act(gate_up[:, :I]) * gate_up[:, I:] for gate_up (T, 2I).
    virtual void gated_act(const TensorView& gate_up, Activation act, const TensorView& out) = 0;
    // Softmax router: p = softmax(logits (T, E), f32); top-k largest first, ties ordered as torch.topk orders them on
    // that device (CPU: torch's partial-sort order; CUDA: lower index first); divided by their sum when normalize;
    // ids (T, k) int32; weights (T, k) in the dtype of `weights` (the run dtype, or f32 for Mixtral).
    virtual void router_topk(const TensorView& logits, int64_t k, bool normalize, const TensorView& ids,
                             const TensorView& weights) = 0;
    // out += sigmoid(gate (T, 1)) * x (T, H) (Qwen2-MoE's shared expert).
    virtual void sigmoid_gate_add(const TensorView& gate, const TensorView& x, const TensorView& out) = 0;
    // Host copies (synchronise): a row of f32 logits, or its argmax (lowest index on ties, NaN never wins).
    virtual void logits_to_host(const TensorView& logits_row, float* host) = 0;
    virtual int64_t argmax(const TensorView& logits_row) = 0;
    virtual void synchronize() = 0;

    // ---- captured decode steps (CUDA; the CPU ops refuse them) ----
    // Greedy tail of a step, without a host sync: id (1) int32 on the device = argmax(logits_row) (as argmax()),
    // pos (1) int64 on the device += 1. last_argmax() waits for the device and returns the id.
    virtual void argmax_step(const TensorView& logits_row, const TensorView& id, const TensorView& pos);
    virtual int64_t last_argmax();
    // Host -> device copy into a device tensor, ordered with the ops; src may be reused when the call returns.
    virtual void upload(const TensorView& dst, const void* src);
    // Records what `body` issues (ops and experts calls on this device's stream) for replay; body must not
    // synchronise or allocate ops scratch (run the same ops once unrecorded first). An exception in body discards
    // the recording and propagates.
    virtual std::unique_ptr<Recording> record(const std::function<void()>& body);
};

std::unique_ptr<Ops> make_cpu_ops(int num_threads);  // src/model/ops/cpu_ops.cpp
std::unique_ptr<Ops> make_cuda_ops(int device_index,
                                   void* stream);  // src/model/ops/cuda_ops.cpp (kUnsupported w/o CUDA)

}  // namespace moex::model

namespace moex::model {
// inv_freq and attention_scaling for a config's rope settings (default, linear, dynamic at its base length, yarn,
// llama3), computed as transformers' rope init functions do, in f32. src/model/ops/rope_table.cpp
RopeTable make_rope_table(const RopeConfig& rope, int64_t head_dim);
}  // namespace moex::model
