// Launchers of the model runtime's dense ops on CUDA (src/model/ops/cuda_ops.cpp is the caller): a Context that owns
// the per-Ops device state, one plain Args struct per launcher (no TensorView, no CUDA types), and the pure
// kernel-choice functions (inline, so host tests use them without nvcc). Activations are bf16 or f32; every launcher
// throws moex::Error(kCuda) when a CUDA call fails. Row strides (ld_*) are in elements; columns are always unit-stride.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>

#include "cuda/common/align.h"
#include "cuda/common/host_device.h"
#include "moex/activation.h"
#include "moex/dtype.h"

// The pure choice functions below run on the host and, where a kernel reads its position from device memory, on the
// device too (MOEX_HOST_DEVICE).

namespace moex::cuda::model {

// The stream, the cuBLASLt handle and its workspace, the linear plans, grow-only scratch buffers (attention partials,
// argmax partials, token ids) and a pinned host word. Scratch grows on first use of a larger size (that call
// synchronises the stream once); afterwards no call allocates, so a warmed-up step can be captured in a CUDA graph.
class Context {
   public:
    Context(int device, void* stream);  // makes `device` current
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    void* stream() const;
    int device() const;
    void make_current() const;  // cudaSetDevice(device) when another device is current
    void synchronize() const;   // the stream

    struct Impl;  // cuda/model/context.h
    Impl& impl() const { return *impl_; }

   private:
    std::unique_ptr<Impl> impl_;
};

// ---- embedding -----------------------------------------------------------------------------------------------------
struct EmbedArgs {
    const int32_t* ids;         // (T) HOST, each < V; unused when ids_device is set
    const int32_t* ids_device;  // (T) on the device, each < V (a captured decode step's token), or nullptr
    const void* table;          // (V, H)
    void* out;                  // (T, H) row-strided
    int64_t T, H, ld_out;
    DType dtype;
};
void launch_embed(Context& ctx, const EmbedArgs& a);

// ---- RMSNorm over groups of `group` columns -------------------------------------------------------------------------
// out = w * round(x * rsqrt(mean(x^2) + eps))
struct RmsNormArgs {
    const void* x;  // (T, width) row-strided, width = n * group
    const void* w;  // (group)
    void* out;      // (T, width) row-strided; may be x
    int64_t T, width, group, ld_x, ld_out;
    float eps;
    DType dtype;
};
void launch_rms_norm(Context& ctx, const RmsNormArgs& a);

// ---- residual add + RMSNorm of the sum, one launch ------------------------------------------------------------------
// sum = a + b; out = rms_norm(sum) over the whole row
struct AddRmsNormArgs {
    const void* a;  // (T, W) row-strided
    const void* b;  // (T, W) row-strided
    void* sum;      // (T, W) row-strided; may be a or b
    const void* w;  // (W)
    void* out;      // (T, W) row-strided
    int64_t T, W, ld_a, ld_b, ld_sum, ld_out;
    float eps;
    DType dtype;
};
void launch_add_rms_norm(Context& ctx, const AddRmsNormArgs& a);

// ---- per-head RMSNorm and/or rotary embedding, in place, one launch for q and k heads ------------------------------
inline constexpr int kMaxRotaryHalf = 256;  // inv_freq travels in the kernel parameters (<= 1 KiB)
inline constexpr int kMaxHeadDim = 512;
struct HeadNormRopeArgs {
    void* x;  // (T, heads * head_dim) row-strided, in place
    int64_t T, heads, head_dim, ld;
    // RMSNorm with weight norm_w[i] (head_dim) on heads [norm_begin[i], norm_end[i]), for i < num_norms.
    int32_t num_norms;
    const void* norm_w[2];
    int64_t norm_begin[2], norm_end[2];
    float norm_eps[2];
    // Rotary embedding of every head, row t at position pos0 + t; rotary_dim 0 = none. pos_device, when set, is
    // read by the kernel instead of pos0 (a captured decode step replays at every position).
    int64_t pos0;
    const int64_t* pos_device;
    int32_t rotary_dim;
    float attention_scaling;
    const float* inv_freq;  // (rotary_dim / 2) HOST; copied into the launch
    DType dtype;
};
void launch_head_norm_rope(Context& ctx, const HeadNormRopeArgs& a);

// ---- linear: out (T, N) = x (T, K) · w (N, K)ᵀ + bias ------------------------------------------------------------
struct LinearArgs {
    const void* x;     // (T, K) row-strided, dtype
    const void* w;     // (N, K) contiguous, dtype
    const void* bias;  // (N) dtype, or nullptr
    void* out;         // (T, N) row-strided, dtype or f32 (out_f32)
    int64_t T, N, K, ld_x, ld_out;
    DType dtype;
    bool out_f32;
};
void launch_linear(Context& ctx, const LinearArgs& a);

enum class LinearKernel { kGemv, kCublasLt };
inline constexpr int64_t kGemvMaxRows = 4;
// The warp-per-output-row GEMV streams the weights with 16-byte loads (decode, lm_head); it needs 16-byte aligned
// rows of x and w. Everything else goes to cuBLASLt.
inline LinearKernel choose_linear_kernel(const LinearArgs& a) {
    const int64_t es = dtype_size(a.dtype);
    const bool ok = a.T >= 1 && a.T <= kGemvMaxRows && (a.K * es) % 16 == 0 && (a.ld_x * es) % 16 == 0 &&
                    is_aligned16(a.x) && is_aligned16(a.w);
    return ok ? LinearKernel::kGemv : LinearKernel::kCublasLt;
}

// ---- attention: cache rows [pos0, pos0 + T) <- k, v; causal GQA of q over cache rows [0, pos0 + t] -----------------
struct AttentionArgs {
    const void* q;  // (T, nq * D) row-strided
    const void* k;  // (T, nkv * D) row-strided
    const void* v;  // (T, nkv * D) row-strided
    void* k_cache;  // (max_len, nkv * D) contiguous
    void* v_cache;  // (max_len, nkv * D) contiguous
    void* out;      // (T, nq * D) row-strided
    int64_t ld_q, ld_k, ld_v, ld_out;
    int64_t T, pos0, max_len, nq, nkv, D;
    int64_t window;  // 0 = full causal; else keys j > pos - window
    float scale;
    DType dtype;
    // When set, the kernel reads pos0 from device memory when it runs (a captured decode step); pos0 is then the
    // value the host checked. Only the decode kernel takes it (kUnsupported otherwise).
    const int64_t* pos_device = nullptr;
};
void launch_attention(Context& ctx, const AttentionArgs& a);

enum class AttentionKernel {
    kDecode,   // split-K over the cache (flash-decoding), cache write and combine fused: one launch
    kFlash,    // bf16, D = 128: mma.sync flash attention, 64 queries x 64 keys per step, after a cache-write launch
    kGeneric,  // anything else (f32 prefill, other head sizes): one warp per (query, head), after a cache write
};
inline constexpr int64_t kDecodeMaxRows = 16;  // T * (nq / nkv) query rows per kv head in the decode kernel
inline AttentionKernel choose_attention_kernel(const AttentionArgs& a) {
    const int64_t es = dtype_size(a.dtype), G = a.nkv > 0 ? a.nq / a.nkv : 0;
    const bool vec = is_aligned16(a.q) && is_aligned16(a.k) && is_aligned16(a.v) && is_aligned16(a.k_cache) &&
                     is_aligned16(a.v_cache) && is_aligned16(a.out) && (a.D * es) % 16 == 0 &&
                     (a.ld_q * es) % 16 == 0 && (a.ld_k * es) % 16 == 0 && (a.ld_v * es) % 16 == 0 &&
                     (a.ld_out * es) % 16 == 0;
    if (vec && (a.D == 64 || a.D == 128 || a.D == 256) && a.T * G <= kDecodeMaxRows) return AttentionKernel::kDecode;
    if (vec && a.dtype == DType::kBF16 && a.D == 128) return AttentionKernel::kFlash;
    return AttentionKernel::kGeneric;
}

// Key ranges of the decode kernel: about one CTA per SM over all kv heads (enough to stream the cache with every SM,
// few enough partials for a cheap merge), whole chunks per split, at most max_splits.
struct DecodeSplit {
    int64_t splits, keys_per_split;
};
MOEX_HOST_DEVICE inline DecodeSplit choose_decode_split(int64_t keys, int64_t nkv, int64_t sm_count, int64_t chunk,
                                                        int64_t max_splits) {
    const int64_t chunks = keys > 0 ? (keys + chunk - 1) / chunk : 1;
    int64_t want = nkv > 0 ? (sm_count + nkv - 1) / nkv : 1;
    want = want < 1 ? 1 : want;
    want = want < chunks ? want : chunks;
    want = want < max_splits ? want : max_splits;
    const int64_t per = (chunks + want - 1) / want;
    return {(chunks + per - 1) / per, per * chunk};
}

// ---- elementwise ops on (T, W) row-strided views ---------------------------------------------------------------
enum class Eltwise : int32_t {
    kAdd = 0,             // out = a + b
    kClamp = 1,           // out = clamp(a, -limit, limit)            (out may be a)
    kGatedAct = 2,        // out = act(a[:, :W]) * a[:, W:2W]          a (T, 2W)
    kSigmoidGateAdd = 3,  // out += sigmoid(b[t, 0]) * a               b (T, 1)
};
struct EltwiseArgs {
    Eltwise op;
    const void* a;  // see Eltwise
    const void* b;  // kAdd: (T, W); kSigmoidGateAdd: (T, 1); else nullptr
    void* out;      // (T, W)
    int64_t T, W, ld_a, ld_b, ld_out;
    float limit;            // kClamp
    Activation activation;  // kGatedAct
    DType dtype;
};
void launch_eltwise(Context& ctx, const EltwiseArgs& a);

// ---- router: softmax (f32) over E logits, top-k ---------------------------------------------------------------------
// Lower index first on ties; optional renormalisation of the k weights.
struct RouterTopkArgs {
    const void* logits;  // (T, E) row-strided, logits_dtype
    int32_t* ids;        // (T, k) contiguous
    void* weights;       // (T, k) contiguous, weights_dtype
    int64_t T, E, k, ld_logits;
    bool normalize;
    DType logits_dtype, weights_dtype;
};
void launch_router_topk(Context& ctx, const RouterTopkArgs& a);

// ---- argmax ------------------------------------------------------------------------------------------------------
// Index of the largest of n values (lowest index on ties; NaN never wins; 0 when every value is NaN), written to the
// Context's pinned host word by the kernel itself, to *id when id is set, and *advance += 1 when advance is set: the
// greedy tail of a captured decode step. No host synchronisation; last_argmax() waits for the stream and reads it.
void launch_argmax(Context& ctx, const void* x, int64_t n, DType dtype, int32_t* id, int64_t* advance);
int64_t last_argmax(Context& ctx);

// ---- host-returning ops (they synchronise the stream) ------------------------------------------------------------
int64_t argmax_to_host(Context& ctx, const void* x, int64_t n, DType dtype);  // launch_argmax + last_argmax
void copy_to_host_sync(Context& ctx, const void* src, int64_t bytes, void* host);

// ---- CUDA graphs ----------------------------------------------------------------------------------------------------
// The work `body` queues on the Context's stream, captured (thread-local mode) into a CUDA graph and instantiated
// once, then replayed on that stream. body must not synchronise or grow the Context's scratch (run it once uncaptured
// first); an exception in body ends the capture and propagates. current() is false once a scratch buffer the graph
// may point into has been reallocated: record again.
class StreamGraph {
   public:
    StreamGraph(Context& ctx, const std::function<void()>& body);
    ~StreamGraph();
    StreamGraph(const StreamGraph&) = delete;
    StreamGraph& operator=(const StreamGraph&) = delete;
    void replay();
    bool current() const;

   private:
    Context& ctx_;
    void* exec_ = nullptr;  // cudaGraphExec_t
    uint64_t epoch_ = 0;
};

}  // namespace moex::cuda::model
