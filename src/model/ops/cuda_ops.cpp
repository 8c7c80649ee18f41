// CudaOps: the Ops of src/model/ops/ops.h on a CUDA device, over the launchers of cuda/model/model_ops.h. It checks
// every view (device, dtype, shape, unit column stride) and passes plain pointers and row strides on; each op is one
// launch, the named fusions (add_rms_norm, qk_norm_rope) included.
#include <cmath>
#include <string>
#include <utility>

#include "moex/error.h"
#include "src/model/ops/ops.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#include "cuda/model/model_ops.h"
#endif

namespace moex::model {

#if MOEX_WITH_CUDA
namespace {

namespace cm = cuda::model;

[[noreturn]] void bad(const std::string& op, const std::string& what) {
    fail(ErrorCode::kInvalidArgument, "cuda ops: " + op + ": " + what);
}

DType act_dtype(DType t, const std::string& op) {
    if (t == DType::kBF16) return DType::kBF16;
    if (t == DType::kF32) return DType::kF32;
    fail(ErrorCode::kUnsupported,
         "cuda ops: " + op + ": activations must be bfloat16 or float32, not " + std::string(dtype_name(t)));
}

// A 2-D view on `dev` with unit column stride; returns its row stride (the width for a single row).
int64_t rows_view(const TensorView& t, int dev, const std::string& op, const char* name) {
    if (!t.defined() || t.ndim != 2) bad(op, std::string(name) + " must be a 2-D tensor");
    if (t.device != Device::kCUDA || t.device_index != dev)
        bad(op, std::string(name) + " is not on cuda:" + std::to_string(dev));
    if (t.shape[1] > 1 && t.strides[1] != 1) bad(op, std::string(name) + " needs unit column stride");
    if (t.shape[0] > 1 && t.strides[0] < t.shape[1]) bad(op, std::string(name) + " rows overlap");
    return t.shape[0] > 1 ? t.strides[0] : t.shape[1];
}

void vector_view(const TensorView& t, int dev, int64_t n, DType dt, const std::string& op, const char* name) {
    if (!t.defined() || t.numel() != n || !t.is_contiguous() || t.device != Device::kCUDA || t.device_index != dev ||
        t.dtype != dt)
        bad(op, std::string(name) + " must be a contiguous " + std::string(dtype_name(dt)) + " tensor of " +
                    std::to_string(n) + " elements on cuda:" + std::to_string(dev) + ", got " + t.shape_string());
}

void same_shape(const TensorView& a, const TensorView& b, const std::string& op, const char* what) {
    if (a.shape[0] != b.shape[0] || a.shape[1] != b.shape[1] || a.dtype != b.dtype)
        bad(op, std::string(what) + " differ in shape or dtype: " + a.shape_string() + " vs " + b.shape_string());
}

class CudaOps final : public Ops {
   public:
    CudaOps(int device, void* stream) : ctx_(device, stream), dev_(device) {}

    Device device() const override { return Device::kCUDA; }
    RunOptions experts_options() const override { return RunOptions{0, ctx_.stream()}; }

    void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out) override {
        begin();
        const int64_t ld = rows_view(out, dev_, "embed", "out");
        rows_view(table, dev_, "embed", "table");
        if (!table.is_contiguous() || table.dtype != out.dtype || table.shape[1] != out.shape[1] || out.shape[0] != T)
            bad("embed", "table " + table.shape_string() + " and out " + out.shape_string() + " do not match");
        for (int64_t t = 0; t < T; ++t)
            if (ids[t] < 0 || ids[t] >= table.shape[0])
                bad("embed", "token id " + std::to_string(ids[t]) + " out of range");
        cm::launch_embed(ctx_,
                         {ids, nullptr, table.data, out.data, T, out.shape[1], ld, act_dtype(out.dtype, "embed")});
    }

    void embed_device(const TensorView& ids, const TensorView& table, const TensorView& out) override {
        begin();
        const int64_t ld = rows_view(out, dev_, "embed_device", "out");
        rows_view(table, dev_, "embed_device", "table");
        const int64_t T = out.shape[0];
        vector_view(ids, dev_, T, DType::kI32, "embed_device", "ids");
        if (!table.is_contiguous() || table.dtype != out.dtype || table.shape[1] != out.shape[1])
            bad("embed_device", "table " + table.shape_string() + " and out " + out.shape_string() + " do not match");
        // The ids come from argmax_step or upload(), which the caller checked against the vocabulary.
        cm::launch_embed(ctx_, {nullptr, ids.ptr<int32_t>(), table.data, out.data, T, out.shape[1], ld,
                                act_dtype(out.dtype, "embed_device")});
    }

    void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out) override {
        begin();
        const int64_t ldx = rows_view(x, dev_, "rms_norm", "x"), ldo = rows_view(out, dev_, "rms_norm", "out");
        same_shape(x, out, "rms_norm", "x and out");
        const int64_t G = w.numel(), W = x.shape[1];
        vector_view(w, dev_, G, x.dtype, "rms_norm", "w");
        if (G == 0 || W % G != 0)
            bad("rms_norm", "row width " + std::to_string(W) + " is not a multiple of " + std::to_string(G));
        cm::launch_rms_norm(
            ctx_, {x.data, w.data, out.data, x.shape[0], W, G, ldx, ldo, float(eps), act_dtype(x.dtype, "rms_norm")});
    }

    void add_rms_norm(const TensorView& a, const TensorView& b, const TensorView& sum, const TensorView& w, double eps,
                      const TensorView& out) override {
        begin();
        const std::string op = "add_rms_norm";
        const int64_t lda = rows_view(a, dev_, op, "a"), ldb = rows_view(b, dev_, op, "b");
        const int64_t lds = rows_view(sum, dev_, op, "sum"), ldo = rows_view(out, dev_, op, "out");
        same_shape(a, b, op, "a and b");
        same_shape(a, sum, op, "a and sum");
        same_shape(a, out, op, "a and out");
        const int64_t W = a.shape[1];
        vector_view(w, dev_, W, a.dtype, op, "w");
        cm::launch_add_rms_norm(ctx_, {a.data, b.data, sum.data, w.data, out.data, a.shape[0], W, lda, ldb, lds, ldo,
                                       float(eps), act_dtype(a.dtype, op)});
    }

    void linear(const TensorView& x, const TensorView& w, const TensorView& bias, const TensorView& out) override {
        begin();
        const int64_t ldx = rows_view(x, dev_, "linear", "x"), ldo = rows_view(out, dev_, "linear", "out");
        rows_view(w, dev_, "linear", "w");
        const int64_t T = x.shape[0], K = x.shape[1], N = w.shape[0];
        if (!w.is_contiguous() || w.shape[1] != K || w.dtype != x.dtype)
            bad("linear", "w " + w.shape_string() + " does not match x " + x.shape_string());
        if (out.shape[0] != T || out.shape[1] != N || (out.dtype != x.dtype && out.dtype != DType::kF32))
            bad("linear", "out " + out.shape_string() + " must be (T, N) in the run dtype or float32");
        if (bias.defined()) vector_view(bias, dev_, N, x.dtype, "linear", "bias");
        cm::launch_linear(ctx_, {x.data, w.data, bias.defined() ? bias.data : nullptr, out.data, T, N, K, ldx, ldo,
                                 act_dtype(x.dtype, "linear"), out.dtype != x.dtype});
    }

    void clamp(const TensorView& x, float limit) override {
        begin();
        const int64_t ld = rows_view(x, dev_, "clamp", "x");
        eltwise(cm::Eltwise::kClamp, x, x.data, ld, nullptr, 0, x.data, ld, x.shape[1], "clamp", limit,
                Activation::kSilu);
    }

    void qk_norm_rope(const TensorView& qk, int64_t q_heads, int64_t head_dim, const TensorView& q_norm,
                      const TensorView& k_norm, double eps, const Position& pos0, const RopeTable& rope) override {
        begin();
        const std::string op = "qk_norm_rope";
        const int64_t ld = rows_view(qk, dev_, op, "qk");
        if (head_dim <= 0 || qk.shape[1] % head_dim != 0) bad(op, "row width is not a multiple of head_dim");
        const int64_t heads = qk.shape[1] / head_dim;
        if (q_heads < 0 || q_heads > heads)
            bad(op, std::to_string(q_heads) + " q heads, qk holds " + std::to_string(heads));
        if (head_dim > cm::kMaxHeadDim) bad(op, "head_dim past " + std::to_string(cm::kMaxHeadDim));
        if (rope.rotary_dim < 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2 != 0 ||
            int64_t(rope.inv_freq.size()) != rope.rotary_dim / 2 || rope.rotary_dim / 2 > cm::kMaxRotaryHalf)
            bad(op, "rotary_dim " + std::to_string(rope.rotary_dim) + " does not fit head_dim or inv_freq");
        cm::HeadNormRopeArgs a{};
        a.x = qk.data, a.T = qk.shape[0], a.heads = heads, a.head_dim = head_dim, a.ld = ld;
        const std::pair<const TensorView*, std::pair<int64_t, int64_t>> norms[2] = {{&q_norm, {0, q_heads}},
                                                                                    {&k_norm, {q_heads, heads}}};
        for (const auto& [w, range] : norms) {
            if (!w->defined()) continue;
            vector_view(*w, dev_, head_dim, qk.dtype, op, w == &q_norm ? "q_norm" : "k_norm");
            a.norm_w[a.num_norms] = w->data, a.norm_eps[a.num_norms] = float(eps);
            a.norm_begin[a.num_norms] = range.first, a.norm_end[a.num_norms] = range.second;
            ++a.num_norms;
        }
        a.pos0 = pos0.host, a.pos_device = pos0.device, a.rotary_dim = int32_t(rope.rotary_dim),
        a.attention_scaling = rope.attention_scaling;
        a.inv_freq = rope.inv_freq.data(), a.dtype = act_dtype(qk.dtype, op);
        cm::launch_head_norm_rope(ctx_, a);
    }

    void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                   const TensorView& v_cache, const Position& pos, const AttentionShape& s,
                   const TensorView& out) override {
        begin();
        const std::string op = "attention";
        const int64_t pos0 = pos.host;
        const int64_t ldq = rows_view(q, dev_, op, "q"), ldk = rows_view(k, dev_, op, "k");
        const int64_t ldv = rows_view(v, dev_, op, "v"), ldo = rows_view(out, dev_, op, "out");
        rows_view(k_cache, dev_, op, "k_cache");
        rows_view(v_cache, dev_, op, "v_cache");
        const int64_t T = q.shape[0], D = s.head_dim, nq = s.num_heads, nkv = s.num_kv_heads;
        if (D <= 0 || nkv <= 0 || nq % nkv != 0) bad(op, "num_heads must be a positive multiple of num_kv_heads");
        if (q.shape[1] != nq * D || out.shape[1] != nq * D || out.shape[0] != T || k.shape[1] != nkv * D ||
            k.shape[0] != T)
            bad(op, "q " + q.shape_string() + ", k " + k.shape_string() + ", out " + out.shape_string() +
                        " do not match the heads");
        same_shape(k, v, op, "k and v");
        same_shape(k_cache, v_cache, op, "k_cache and v_cache");
        if (k_cache.shape[1] != nkv * D || !k_cache.is_contiguous() || !v_cache.is_contiguous())
            bad(op, "caches must be contiguous (max_len, num_kv_heads * head_dim)");
        if (q.dtype != k.dtype || q.dtype != k_cache.dtype || q.dtype != out.dtype) bad(op, "dtypes differ");
        if (pos0 < 0 || pos0 + T > k_cache.shape[0]) bad(op, "rows [pos0, pos0 + T) exceed the KV cache");
        const float scale = s.scale > 0.0f ? s.scale : float(1.0 / std::sqrt(double(D)));
        cm::AttentionArgs a{};
        a.q = q.data, a.k = k.data, a.v = v.data, a.k_cache = k_cache.data, a.v_cache = v_cache.data, a.out = out.data;
        a.ld_q = ldq, a.ld_k = ldk, a.ld_v = ldv, a.ld_out = ldo, a.T = T, a.pos0 = pos0, a.pos_device = pos.device;
        a.max_len = k_cache.shape[0], a.nq = nq, a.nkv = nkv, a.D = D, a.window = s.sliding_window, a.scale = scale;
        a.dtype = act_dtype(q.dtype, op);
        cm::launch_attention(ctx_, a);
    }

    void gated_act(const TensorView& gate_up, Activation act, const TensorView& out) override {
        begin();
        const int64_t ldi = rows_view(gate_up, dev_, "gated_act", "gate_up");
        const int64_t ldo = rows_view(out, dev_, "gated_act", "out");
        if (gate_up.shape[0] != out.shape[0] || gate_up.shape[1] != 2 * out.shape[1] || gate_up.dtype != out.dtype)
            bad("gated_act", "gate_up " + gate_up.shape_string() + " must be (T, 2I) for out " + out.shape_string());
        eltwise(cm::Eltwise::kGatedAct, out, gate_up.data, ldi, nullptr, 0, out.data, ldo, out.shape[1], "gated_act",
                0.0f, act);
    }

    void router_topk(const TensorView& logits, int64_t k, bool normalize, const TensorView& ids,
                     const TensorView& weights) override {
        begin();
        const int64_t ld = rows_view(logits, dev_, "router_topk", "logits");
        const int64_t T = logits.shape[0], E = logits.shape[1];
        if (k < 1 || k > E) bad("router_topk", "k must be in [1, " + std::to_string(E) + "]");
        vector_view(ids, dev_, T * k, DType::kI32, "router_topk", "ids");
        if (!weights.defined() || weights.numel() != T * k || !weights.is_contiguous() ||
            weights.device != Device::kCUDA)
            bad("router_topk", "weights must be a contiguous (T, k) tensor on the device");
        cm::launch_router_topk(ctx_, {logits.data, ids.ptr<int32_t>(), weights.data, T, E, k, ld, normalize,
                                      act_dtype(logits.dtype, "router_topk"), act_dtype(weights.dtype, "router_topk")});
    }

    void sigmoid_gate_add(const TensorView& gate, const TensorView& x, const TensorView& out) override {
        begin();
        const int64_t ldg = rows_view(gate, dev_, "sigmoid_gate_add", "gate");
        const int64_t ldx = rows_view(x, dev_, "sigmoid_gate_add", "x");
        const int64_t ldo = rows_view(out, dev_, "sigmoid_gate_add", "out");
        same_shape(x, out, "sigmoid_gate_add", "x and out");
        if (gate.shape[0] != x.shape[0] || gate.shape[1] != 1 || gate.dtype != x.dtype)
            bad("sigmoid_gate_add", "gate must be (T, 1) in the run dtype, got " + gate.shape_string());
        eltwise(cm::Eltwise::kSigmoidGateAdd, out, x.data, ldx, gate.data, ldg, out.data, ldo, x.shape[1],
                "sigmoid_gate_add", 0.0f, Activation::kSilu);
    }

    void logits_to_host(const TensorView& row, float* host) override {
        begin();
        if (row.dtype != DType::kF32 || !row.is_contiguous() || row.device != Device::kCUDA)
            bad("logits_to_host", "logits must be a contiguous float32 row on the device");
        cm::copy_to_host_sync(ctx_, row.data, row.nbytes(), host);
    }

    int64_t argmax(const TensorView& row) override {
        begin();
        logits_row(row, "argmax");
        return cm::argmax_to_host(ctx_, row.data, row.numel(), act_dtype(row.dtype, "argmax"));
    }

    void synchronize() override {
        begin();
        ctx_.synchronize();
    }

    void argmax_step(const TensorView& row, const TensorView& id, const TensorView& pos) override {
        begin();
        logits_row(row, "argmax_step");
        vector_view(id, dev_, 1, DType::kI32, "argmax_step", "id");
        vector_view(pos, dev_, 1, DType::kI64, "argmax_step", "pos");
        cm::launch_argmax(ctx_, row.data, row.numel(), act_dtype(row.dtype, "argmax_step"), id.ptr<int32_t>(),
                          pos.ptr<int64_t>());
    }

    int64_t last_argmax() override {
        begin();
        return cm::last_argmax(ctx_);
    }

    void upload(const TensorView& dst, const void* src) override {
        begin();
        if (!dst.defined() || !dst.is_contiguous() || dst.device != Device::kCUDA || dst.device_index != dev_)
            bad("upload", "the destination must be a contiguous tensor on cuda:" + std::to_string(dev_));
        // From pageable memory the copy is staged before the call returns, so `src` may be reused.
        cuda::copy_async(dst.data, src, size_t(dst.nbytes()), /*to_device=*/true, ctx_.stream());
    }

    std::unique_ptr<Recording> record(const std::function<void()>& body) override {
        begin();
        return std::make_unique<GraphRecording>(ctx_, body);
    }

   private:
    class GraphRecording final : public Recording {
       public:
        GraphRecording(cm::Context& ctx, const std::function<void()>& body) : graph_(ctx, body) {}
        void replay() override { graph_.replay(); }
        bool current() const override { return graph_.current(); }

       private:
        cm::StreamGraph graph_;
    };

    void begin() { ctx_.make_current(); }

    // The logits row of argmax and argmax_step.
    void logits_row(const TensorView& row, const char* op) const {
        if (!row.is_contiguous() || row.device != Device::kCUDA || row.device_index != dev_ || row.numel() < 1)
            bad(op, "logits must be a non-empty contiguous row on cuda:" + std::to_string(dev_));
    }

    // act matters for kGatedAct only.
    void eltwise(cm::Eltwise op, const TensorView& like, const void* a, int64_t lda, const void* b, int64_t ldb,
                 void* out, int64_t ldo, int64_t W, const char* name, float limit, Activation act) {
        cm::launch_eltwise(ctx_,
                           {op, a, b, out, like.shape[0], W, lda, ldb, ldo, limit, act, act_dtype(like.dtype, name)});
    }

    cm::Context ctx_;
    int dev_;
};

}  // namespace

std::unique_ptr<Ops> make_cuda_ops(int device_index, void* stream) {
    MOEX_REQUIRE(device_index >= 0 && device_index < cuda::device_count(), ErrorCode::kUnsupported,
                 "cuda ops: no CUDA device " + std::to_string(device_index));
    return std::make_unique<CudaOps>(device_index, stream);
}

#else

std::unique_ptr<Ops> make_cuda_ops(int, void*) {
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
}

#endif

}  // namespace moex::model
