// CudaOps: the Ops of src/model/ops/ops.h on a CUDA device, over the launchers of cuda/model/model_ops.h. It checks every
// view (device, dtype, shape, unit column stride) and passes plain pointers and row strides on. Two kinds of calls
// are held back until the next call, to fuse launches (decode is launch-bound): in-place per-head RMSNorms (q_norm,
// k_norm), so that q-norm + k-norm + the rotary embedding after them run as ONE launch, and the residual add, which
// the RMSNorm of its sum absorbs. Any other call (and synchronize / experts_options) launches what is held first.
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "moex/error.h"
#include "src/model/ops/ops.h"
#if MOEX_WITH_CUDA
#include "cuda/model/model_ops.h"
#endif

namespace moex::model {

#if MOEX_WITH_CUDA
namespace {

namespace cm = cuda::model;
using cuda::ActDType;

[[noreturn]] void bad(const std::string& op, const std::string& what) {
    fail(ErrorCode::kInvalidArgument, "cuda ops: " + op + ": " + what);
}

ActDType act_dtype(DType t, const std::string& op) {
    if (t == DType::kBF16) return ActDType::kBF16;
    if (t == DType::kF32) return ActDType::kF32;
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

const char* byte_ptr(const TensorView& t) { return static_cast<const char*>(t.data); }

struct HeldNorm {  // an in-place per-head RMSNorm not launched yet
    TensorView x, w;
    float eps;
    int64_t ld;
};

struct HeldAdd {  // a residual add not launched yet
    TensorView a, b, out;
    int64_t lda, ldb, ldo;
};

class CudaOps final : public Ops {
   public:
    CudaOps(int device, void* stream) : ctx_(device, stream), dev_(device) {}
    ~CudaOps() override {
        try {
            ctx_.make_current();
            flush();
        } catch (...) {  // nothing can be reported from a destructor; the results were never read
        }
    }

    Device device() const override { return Device::kCUDA; }
    RunOptions experts_options() const override {
        const_cast<CudaOps*>(this)->flush();  // the experts read what the held norms write
        return RunOptions{0, ctx_.stream()};
    }

    void embed(const int32_t* ids, int64_t T, const TensorView& table, const TensorView& out) override {
        begin();
        const int64_t ld = rows_view(out, dev_, "embed", "out");
        rows_view(table, dev_, "embed", "table");
        if (!table.is_contiguous() || table.dtype != out.dtype || table.shape[1] != out.shape[1] || out.shape[0] != T)
            bad("embed", "table " + table.shape_string() + " and out " + out.shape_string() + " do not match");
        for (int64_t t = 0; t < T; ++t)
            if (ids[t] < 0 || ids[t] >= table.shape[0])
                bad("embed", "token id " + std::to_string(ids[t]) + " out of range");
        cm::launch_embed(ctx_, {ids, table.data, out.data, T, out.shape[1], ld, act_dtype(out.dtype, "embed")});
    }

    void rms_norm(const TensorView& x, const TensorView& w, double eps, const TensorView& out) override {
        ctx_.make_current();
        const int64_t ldx = rows_view(x, dev_, "rms_norm", "x"), ldo = rows_view(out, dev_, "rms_norm", "out");
        same_shape(x, out, "rms_norm", "x and out");
        const int64_t G = w.numel(), W = x.shape[1];
        vector_view(w, dev_, G, x.dtype, "rms_norm", "w");
        if (G == 0 || W % G != 0)
            bad("rms_norm", "row width " + std::to_string(W) + " is not a multiple of " + std::to_string(G));
        act_dtype(x.dtype, "rms_norm");
        if (held_add_ && G == W && absorbs(*held_add_, x, ldx)) {  // h = a + b; x = norm(h): one launch
            const HeldAdd h = *held_add_;
            held_add_.reset();
            return cm::launch_add_rms_norm(
                ctx_, {h.a.data, h.b.data, h.out.data, w.data, out.data, x.shape[0], W, h.lda, h.ldb, h.ldo, ldo,
                       float(eps), act_dtype(x.dtype, "rms_norm")});
        }
        const bool in_place = x.data == out.data && ldx == ldo;
        if (in_place && G <= cm::kMaxHeadDim) {  // a q/k head norm: hold it for the rope launch
            const HeldNorm n{x, w, float(eps), ldx};
            if (held_.size() == 1 && pairs(held_[0], n)) return held_.push_back(n);
            flush();
            return held_.push_back(n);
        }
        begin();
        cm::launch_rms_norm(
            ctx_, {x.data, w.data, out.data, x.shape[0], W, G, ldx, ldo, float(eps), act_dtype(x.dtype, "rms_norm")});
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
        eltwise(cm::Eltwise::kClamp, x, x.data, ld, nullptr, 0, x.data, ld, x.shape[1], "clamp", limit, 0);
    }

    void rope(const TensorView& x, int64_t head_dim, int64_t pos0, const RopeTable& rope) override {
        ctx_.make_current();
        const int64_t ld = rows_view(x, dev_, "rope", "x");
        const ActDType dt = act_dtype(x.dtype, "rope");
        if (head_dim <= 0 || x.shape[1] % head_dim != 0) bad("rope", "row width is not a multiple of head_dim");
        if (rope.rotary_dim < 0 || rope.rotary_dim > head_dim || rope.rotary_dim % 2 != 0 ||
            int64_t(rope.inv_freq.size()) != rope.rotary_dim / 2)
            bad("rope", "rotary_dim " + std::to_string(rope.rotary_dim) + " does not fit head_dim or inv_freq");
        cm::HeadNormRopeArgs a{};
        a.x = x.data, a.T = x.shape[0], a.heads = x.shape[1] / head_dim, a.head_dim = head_dim, a.ld = ld;
        a.pos0 = pos0, a.rotary_dim = int32_t(rope.rotary_dim), a.attention_scaling = rope.attention_scaling;
        a.inv_freq = rope.inv_freq.data(), a.dtype = dt;
        if (!absorb_held(x, ld, head_dim, a)) flush();
        held_.clear();
        cm::launch_head_norm_rope(ctx_, a);
    }

    void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
                   const TensorView& v_cache, int64_t pos0, const AttentionShape& s, const TensorView& out) override {
        begin();
        const std::string op = "attention";
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
        cm::launch_attention(ctx_,
                             {q.data, k.data, v.data, k_cache.data, v_cache.data, out.data, ldq, ldk, ldv, ldo, T, pos0,
                              k_cache.shape[0], nq, nkv, D, s.sliding_window, scale, act_dtype(q.dtype, op)});
    }

    void add(const TensorView& a, const TensorView& b, const TensorView& out) override {
        begin();
        const int64_t lda = rows_view(a, dev_, "add", "a"), ldb = rows_view(b, dev_, "add", "b");
        const int64_t ldo = rows_view(out, dev_, "add", "out");
        same_shape(a, b, "add", "a and b");
        same_shape(a, out, "add", "a and out");
        act_dtype(a.dtype, "add");
        held_add_ = HeldAdd{a, b, out, lda, ldb, ldo};  // launched by the next call, or absorbed by rms_norm
    }

    void gated_act(const TensorView& gate_up, Activation act, const TensorView& out) override {
        begin();
        const int64_t ldi = rows_view(gate_up, dev_, "gated_act", "gate_up");
        const int64_t ldo = rows_view(out, dev_, "gated_act", "out");
        if (gate_up.shape[0] != out.shape[0] || gate_up.shape[1] != 2 * out.shape[1] || gate_up.dtype != out.dtype)
            bad("gated_act", "gate_up " + gate_up.shape_string() + " must be (T, 2I) for out " + out.shape_string());
        eltwise(cm::Eltwise::kGatedAct, out, gate_up.data, ldi, nullptr, 0, out.data, ldo, out.shape[1], "gated_act",
                0.0f, int32_t(act));
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
                "sigmoid_gate_add", 0.0f, 0);
    }

    void logits_to_host(const TensorView& row, float* host) override {
        begin();
        if (row.dtype != DType::kF32 || !row.is_contiguous() || row.device != Device::kCUDA)
            bad("logits_to_host", "logits must be a contiguous float32 row on the device");
        cm::copy_to_host_sync(ctx_, row.data, row.nbytes(), host);
    }

    int64_t argmax(const TensorView& row) override {
        begin();
        if (!row.is_contiguous() || row.device != Device::kCUDA || row.numel() < 1)
            bad("argmax", "logits must be a non-empty contiguous row on the device");
        return cm::argmax_to_host(ctx_, row.data, row.numel(), act_dtype(row.dtype, "argmax"));
    }

    void synchronize() override {
        begin();
        ctx_.synchronize();
    }

   private:
    void begin() {
        ctx_.make_current();
        flush();
    }

    void eltwise(cm::Eltwise op, const TensorView& like, const void* a, int64_t lda, const void* b, int64_t ldb,
                 void* out, int64_t ldo, int64_t W, const char* name, float limit, int32_t act) {
        cm::launch_eltwise(ctx_,
                           {op, a, b, out, like.shape[0], W, lda, ldb, ldo, limit, act, act_dtype(like.dtype, name)});
    }

    // b is the norm of the heads right after a's in the same rows (k after q in the fused qkv row).
    static bool pairs(const HeldNorm& a, const HeldNorm& b) {
        const int64_t es = dtype_size(a.x.dtype);
        return a.x.dtype == b.x.dtype && a.x.shape[0] == b.x.shape[0] && (a.x.shape[0] == 1 || a.ld == b.ld) &&
               a.w.numel() == b.w.numel() && a.eps == b.eps && byte_ptr(b.x) == byte_ptr(a.x) + a.x.shape[1] * es;
    }

    // Moves the held norms into `a` when each covers whole heads of the rope's rows.
    bool absorb_held(const TensorView& x, int64_t ld, int64_t head_dim, cm::HeadNormRopeArgs& a) const {
        if (held_.empty()) return true;
        const int64_t es = dtype_size(x.dtype);
        for (size_t i = 0; i < held_.size(); ++i) {
            const HeldNorm& n = held_[i];
            const int64_t off = byte_ptr(n.x) - byte_ptr(x);
            if (n.x.dtype != x.dtype || n.x.shape[0] != x.shape[0] || (x.shape[0] > 1 && n.ld != ld) ||
                n.w.numel() != head_dim || off < 0 || off % (head_dim * es) != 0 ||
                off / es + n.x.shape[1] > x.shape[1])
                return false;
            a.norm_w[i] = n.w.data, a.norm_eps[i] = n.eps;
            a.norm_begin[i] = off / es / head_dim, a.norm_end[i] = a.norm_begin[i] + n.x.shape[1] / head_dim;
        }
        a.num_norms = int32_t(held_.size());
        return true;
    }

    static bool absorbs(const HeldAdd& h, const TensorView& x, int64_t ldx) {
        return x.data == h.out.data && x.dtype == h.out.dtype && x.shape[0] == h.out.shape[0] &&
               x.shape[1] == h.out.shape[1] && (x.shape[0] == 1 || ldx == h.ldo);
    }

    // Launches what is held: the add, or the norms (a q/k pair as one per-head launch, a single one likewise).
    void flush() {
        if (held_add_) {
            const HeldAdd h = *held_add_;
            held_add_.reset();
            eltwise(cm::Eltwise::kAdd, h.out, h.a.data, h.lda, h.b.data, h.ldb, h.out.data, h.ldo, h.out.shape[1],
                    "add", 0.0f, 0);
        }
        if (held_.empty()) return;
        const std::vector<HeldNorm> held = std::move(held_);
        held_.clear();
        const HeldNorm& f = held.front();
        const int64_t G = f.w.numel();
        cm::HeadNormRopeArgs a{};
        a.x = f.x.data, a.T = f.x.shape[0], a.head_dim = G, a.ld = f.ld, a.dtype = act_dtype(f.x.dtype, "rms_norm");
        a.num_norms = int32_t(held.size());
        int64_t heads = 0;
        for (size_t i = 0; i < held.size(); ++i) {
            a.norm_w[i] = held[i].w.data, a.norm_eps[i] = held[i].eps;
            a.norm_begin[i] = heads, heads += held[i].x.shape[1] / G, a.norm_end[i] = heads;
        }
        a.heads = heads;
        cm::launch_head_norm_rope(ctx_, a);
    }

    cm::Context ctx_;
    int dev_;
    std::vector<HeldNorm> held_;       // at most two, adjacent (see pairs)
    std::optional<HeldAdd> held_add_;  // never together with held_ (each hold flushes the other first)
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
