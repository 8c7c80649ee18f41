// Model: loading (config, weights, tokenizer, experts state) and the decoder forward pass, written once over Ops.
#include "moex/model.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "moex/backend.h"
#include "moex/error.h"
#include "src/model/model_impl.h"
#include "src/model/ops/views.h"

namespace moex {

using model::column_block;
using model::first_rows;
using model::row_block;

namespace {

DType run_dtype(const ModelConfig& config, const ModelOptions& options) {
    if (options.dtype) {
        MOEX_REQUIRE(*options.dtype == DType::kF32 || *options.dtype == DType::kBF16, ErrorCode::kInvalidArgument,
                     "model dtype " + std::string(dtype_name(*options.dtype)) +
                         " is not supported; use float32 or "
                         "bfloat16");
        return *options.dtype;
    }
    return config.torch_dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;  // f16 checkpoints run in f32
}

std::unique_ptr<model::Ops> make_ops(const ModelOptions& options) {
    if (options.device == Device::kCPU) return model::make_cpu_ops(options.num_threads);
    return model::make_cuda_ops(options.device_index, nullptr);
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;
Model::~Model() = default;

Model Model::from_pretrained(const std::string& dir, const ModelOptions& options) {
    MOEX_REQUIRE(std::filesystem::is_directory(dir), ErrorCode::kNotFound, dir + ": no such model directory");
    auto impl = std::make_unique<Impl>();
    Impl& m = *impl;
    m.config = load_model_config(dir);
    m.options = options;
    m.dtype = run_dtype(m.config, options);
    const ModelConfig& c = m.config;
    // Validate the experts choice before the (long) weight load.
    m.experts.emplace(c.sub_config_keys, c.text_config_key, options.device, options.experts_implementation,
                      c.experts_implementation_in_file);
    m.ops = make_ops(options);
    m.weights = model::load_weights(dir, c, {m.dtype, options.device, options.progress, options.dequantize});
    if (options.load_tokenizer && std::filesystem::exists(std::filesystem::path(dir) / "tokenizer.json"))
        m.tokenizer.emplace(Tokenizer::from_file((std::filesystem::path(dir) / "tokenizer.json").string()));

    m.rope = model::make_rope_table(c.rope, c.head_dim);
    m.attention = {c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.sliding_window,
                   float(1.0 / std::sqrt(double(c.head_dim)))};
    m.qkv_width = (c.num_attention_heads + 2 * c.num_key_value_heads) * c.head_dim;
    int64_t ctx = options.max_context > 0 ? options.max_context : std::min<int64_t>(c.max_position_embeddings, 32768);
    MOEX_REQUIRE(ctx > 0, ErrorCode::kInvalidArgument, "max_context must be positive");
    m.max_context = ctx;
    const int64_t kv_width = c.num_key_value_heads * c.head_dim;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        m.k_cache.push_back(model::buffer(m.dtype, ctx, kv_width, options.device));
        m.v_cache.push_back(model::buffer(m.dtype, ctx, kv_width, options.device));
    }
    return Model(std::move(impl));
}

const ModelConfig& Model::config() const { return impl_->config; }
Device Model::device() const { return impl_->options.device; }
DType Model::dtype() const { return impl_->dtype; }
const Tokenizer* Model::tokenizer() const { return impl_->tokenizer ? &*impl_->tokenizer : nullptr; }
void Model::set_experts_implementation(const ExpertsImplementation& impl) { impl_->experts->set(impl); }
std::map<std::string, std::string> Model::get_experts_implementation() const { return impl_->experts->get(); }
const std::string& Model::experts_backend() const { return impl_->experts->decoder_backend(); }
void Model::set_experts_observer(ExpertsObserver observer) { impl_->observer = std::move(observer); }
void Model::reset() { impl_->cache_length = 0; }
int64_t Model::cache_length() const { return impl_->cache_length; }
int64_t Model::max_context() const { return impl_->max_context; }

std::vector<float> Model::forward(const std::vector<int32_t>& ids) {
    impl_->forward_to_logits(ids, impl_->experts->backend());
    std::vector<float> logits(size_t(impl_->config.vocab_size));
    impl_->ops->logits_to_host(impl_->scratch.logits.view(), logits.data());
    return logits;
}

void Model::Impl::ensure_scratch(int64_t rows) {
    if (rows <= scratch.rows) return;
    const ModelConfig& c = config;
    const Device dev = options.device;
    const int64_t H = c.hidden_size, k = c.num_experts_per_tok;  // > 0: config.json is checked
    const int64_t wide = std::max(
        {2 * c.moe_intermediate_size, 2 * c.intermediate_size, 2 * c.shared_expert_intermediate_size, int64_t(2)});
    Scratch s;
    s.rows = rows;
    s.x = model::buffer(dtype, rows, H, dev);
    s.h = model::buffer(dtype, rows, H, dev);
    s.qkv = model::buffer(dtype, rows, qkv_width, dev);
    s.attn = model::buffer(dtype, rows, c.num_attention_heads * c.head_dim, dev);
    s.tmp = model::buffer(dtype, rows, H, dev);
    s.router_logits = model::buffer(dtype, rows, std::max<int64_t>(c.num_experts, 1), dev);
    s.ids = model::buffer(DType::kI32, rows, k, dev);
    // transformers keeps Mixtral's routing weights in f32; the other families cast them to the run dtype.
    s.weights = model::buffer(c.arch == Architecture::kMixtral ? DType::kF32 : dtype, rows, k, dev);
    s.moe_out = model::buffer(dtype, rows, H, dev);
    s.gate_up = model::buffer(dtype, rows, wide, dev);
    s.act = model::buffer(dtype, rows, wide / 2, dev);
    s.shared_gate = model::buffer(dtype, rows, 1, dev);
    s.logits = model::buffer(DType::kF32, 1, c.vocab_size, dev);
    scratch = std::move(s);
}

namespace {

// The dense gated MLP (qwen dense layers, qwen2_moe's shared expert): down(act(gate(x)) * up(x)).
void gated_mlp(model::Ops& ops, const TensorView& x, const DeviceTensor& gate_up, const DeviceTensor& down,
               Activation act, const DeviceTensor& gu_buf, const DeviceTensor& act_buf, const TensorView& out) {
    const int64_t T = x.shape[0], I = down.view().shape[1];
    const TensorView gu_c = model::packed(gu_buf, T, 2 * I), a = model::packed(act_buf, T, I);
    ops.linear(x, gate_up.view(), {}, gu_c);
    ops.gated_act(gu_c, act, a);
    ops.linear(a, down.view(), {}, out);
}

}  // namespace

// The attention half of decoder layer l: h (the normed residual) -> out (T, H), the KV cache of l extended.
void Model::Impl::attention_block(int64_t l, const TensorView& h, const model::Position& pos0, const TensorView& out) {
    const ModelConfig& c = config;
    const model::LayerWeights& w = weights.layers[size_t(l)];
    model::Ops& o = *ops;
    const int64_t T = h.shape[0], D = c.head_dim;
    const int64_t qw = c.num_attention_heads * D, kw = c.num_key_value_heads * D;
    const TensorView qkv = first_rows(scratch.qkv, T), attn = first_rows(scratch.attn, T);
    const TensorView q = column_block(qkv, 0, qw), k = column_block(qkv, qw, kw), v = column_block(qkv, qw + kw, kw);
    o.linear(h, w.qkv.view(), w.qkv_bias.view(), qkv);
    // q/k norms: qwen3 norms each head (fused into the rope launch), olmoe whole rows; both come before the clip.
    const bool fused_norms = c.qk_norm && c.qk_norm_per_head && !c.clip_qkv;
    if (c.qk_norm && !fused_norms) {
        o.rms_norm(q, w.q_norm.view(), c.rms_norm_eps, q);
        o.rms_norm(k, w.k_norm.view(), c.rms_norm_eps, k);
    }
    if (c.clip_qkv) {
        o.clamp(q, float(*c.clip_qkv));
        o.clamp(k, float(*c.clip_qkv));
        o.clamp(v, float(*c.clip_qkv));
    }
    const TensorView none;
    o.qk_norm_rope(column_block(qkv, 0, qw + kw), c.num_attention_heads, D, fused_norms ? w.q_norm.view() : none,
                   fused_norms ? w.k_norm.view() : none, c.rms_norm_eps, pos0, rope);
    o.attention(q, k, v, k_cache[size_t(l)].view(), v_cache[size_t(l)].view(), pos0, attention, attn);
    o.linear(attn, w.o_proj.view(), {}, out);
}

// The MLP half of decoder layer l: h (the normed residual) -> out (T, H), through the experts backend on MoE layers.
void Model::Impl::mlp_block(int64_t l, const TensorView& h, const Backend& backend, const TensorView& out) {
    const ModelConfig& c = config;
    const model::LayerWeights& w = weights.layers[size_t(l)];
    const Scratch& s = scratch;
    model::Ops& o = *ops;
    const int64_t T = h.shape[0];
    if (!w.is_moe()) return gated_mlp(o, h, w.mlp_gate_up, w.mlp_down, c.hidden_act, s.gate_up, s.act, out);
    const TensorView logits = first_rows(s.router_logits, T);
    const TensorView ids = first_rows(s.ids, T), weights_v = first_rows(s.weights, T);  // (T, k)
    o.linear(h, w.router.view(), {}, logits);
    o.router_topk(logits, c.num_experts_per_tok, c.norm_topk_prob, ids, weights_v);
    ExpertsProblem p;
    p.hidden_states = h;
    p.top_k_index = ids;
    p.top_k_weights = weights_v;
    p.gate_up_proj = w.experts_gate_up.view();
    p.down_proj = w.experts_down.view();
    p.activation = c.hidden_act;
    p.quant = w.experts_quant(weights.experts);  // resident quantized experts: codes + scales, as stored
    if (observer && !decode_graph.recording_now) observer(l, std::string(backend.name()), T);
    backend.run(p, out, o.experts_options());
    if (w.shared_gate_up.view().defined()) {  // qwen2_moe: out += sigmoid(gate(h)) * shared_mlp(h)
        const TensorView tmp = first_rows(s.tmp, T), gate = first_rows(s.shared_gate, T);
        gated_mlp(o, h, w.shared_gate_up, w.shared_down, c.hidden_act, s.gate_up, s.act, tmp);
        o.linear(h, w.shared_gate.view(), {}, gate);
        o.sigmoid_gate_add(gate, tmp, out);
    }
}

void Model::Impl::check_step(const std::vector<int32_t>& ids) const {
    const int64_t T = int64_t(ids.size());
    MOEX_REQUIRE(T > 0, ErrorCode::kInvalidArgument, "forward: no tokens");
    MOEX_REQUIRE(cache_length + T <= max_context, ErrorCode::kInvalidArgument,
                 "the sequence would be " + std::to_string(cache_length + T) +
                     " tokens, longer than the model's context of " + std::to_string(max_context) +
                     " tokens (max_context)");
    for (int32_t id : ids)
        MOEX_REQUIRE(id >= 0 && id < config.vocab_size, ErrorCode::kInvalidArgument,
                     "token id " + std::to_string(id) + " is outside the vocabulary [0, " +
                         std::to_string(config.vocab_size) + ")");
}

void Model::Impl::forward_to_logits(const std::vector<int32_t>& ids, const Backend& backend) {
    check_step(ids);
    const int64_t T = int64_t(ids.size());
    ensure_scratch(T);
    ops->embed(ids.data(), T, weights.embed.view(), first_rows(scratch.x, T));
    decoder(T, cache_length, backend);
    cache_length += T;
}

// Each layer ends with one add_rms_norm: the residual add and the norm of the next layer (the final norm after the
// last layer), so the forward pass names every fusion it relies on.
void Model::Impl::decoder(int64_t T, const model::Position& pos, const Backend& backend) {
    const ModelConfig& c = config;
    model::Ops& o = *ops;
    const double eps = c.rms_norm_eps;
    const TensorView x = first_rows(scratch.x, T), h = first_rows(scratch.h, T);
    const TensorView attn_out = first_rows(scratch.tmp, T), mlp_out = first_rows(scratch.moe_out, T);

    o.rms_norm(x, weights.layers[0].input_norm.view(), eps, h);
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        attention_block(l, h, pos, attn_out);
        o.add_rms_norm(x, attn_out, x, weights.layers[size_t(l)].post_norm.view(), eps, h);
        mlp_block(l, h, backend, mlp_out);
        const bool last = l + 1 == c.num_hidden_layers;
        const DeviceTensor& next_norm = last ? weights.final_norm : weights.layers[size_t(l) + 1].input_norm;
        o.add_rms_norm(x, mlp_out, x, next_norm.view(), eps, h);
    }
    o.linear(row_block(h, T - 1, 1), weights.lm_head.view(), {}, scratch.logits.view());  // the last position only
}

}  // namespace moex
