// Model::Impl: what a loaded model holds (config, weights, ops, KV cache, scratch, experts state), shared by
// model.cpp (loading, forward) and generate.cpp (sampling, the decode phase).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moex/backend.h"
#include "moex/device.h"
#include "moex/model.h"
#include "src/model/experts_implementation.h"
#include "src/model/ops/ops.h"
#include "src/model/weights/weights.h"

namespace moex {

struct Model::Impl {
    ModelConfig config;
    ModelOptions options;
    DType dtype = DType::kF32;
    model::ModelWeights weights;
    std::unique_ptr<model::Ops> ops;
    std::optional<Tokenizer> tokenizer;
    std::optional<model::ExpertsImplementationState> experts;
    ExpertsObserver observer;
    model::RopeTable rope;
    model::AttentionShape attention;
    int64_t qkv_width = 0;  // (nq + 2 nkv) * head_dim

    // KV cache: one (max_context, nkv * head_dim) pair per layer.
    std::vector<DeviceTensor> k_cache, v_cache;
    int64_t cache_length = 0;
    int64_t max_context = 0;

    // Scratch rows for one forward of up to scratch_rows tokens (grown on demand, never per token).
    struct Scratch {
        int64_t rows = 0;
        DeviceTensor x, h, qkv, attn, tmp, router_logits, ids, weights, moe_out, gate_up, act, shared_gate, logits;
    } scratch;

    void ensure_scratch(int64_t rows);
    // Runs ids through the decoder with `backend` in the MoE layers, leaves the last position's f32 logits in
    // scratch.logits (1, vocab).
    void forward_to_logits(const std::vector<int32_t>& ids, const Backend& backend);
    void attention_block(int64_t layer, const TensorView& h, int64_t pos0, const TensorView& out);
    void mlp_block(int64_t layer, const TensorView& h, const Backend& backend, const TensorView& out);
};

}  // namespace moex
