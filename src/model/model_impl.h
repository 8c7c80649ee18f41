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

    // The recorded decode step (src/model/decode_step.cpp): its token and position in device memory, and the
    // recording with what it was recorded for (a different backend or reallocated scratch records again).
    struct DecodeGraph {
        DeviceTensor id, pos;              // (1) int32, (1) int64 on the device
        std::optional<int32_t> device_id;  // what id holds, when the host knows it
        std::optional<int64_t> device_pos;
        std::unique_ptr<model::Recording> recording;
        const Backend* backend = nullptr;  // of the recording, or of the unrecorded warm-up step before it
        const void* scratch = nullptr;     // scratch.x's storage at that time
        bool recording_now = false;        // the experts observer is called per replay, not while recording
        std::string broken;                // why recording failed on this model: it runs unrecorded from then on
    } decode_graph;

    void ensure_scratch(int64_t rows);
    // Runs ids through the decoder with `backend` in the MoE layers, leaves the last position's f32 logits in
    // scratch.logits (1, vocab).
    void forward_to_logits(const std::vector<int32_t>& ids, const Backend& backend);
    // The same for one token `last` through the recorded step (a CUDA graph), its greedy argmax left for
    // recorded_argmax(); false (nothing run) where the step cannot be recorded (ModelOptions::decode_graph).
    bool decode_recorded(int32_t last, const Backend& backend);
    int32_t recorded_argmax();                               // waits for the step
    void check_step(const std::vector<int32_t>& ids) const;  // the context and vocabulary checks of a forward
    // From the embedded rows scratch.x (T, H) at positions pos + t to the logits of the last row.
    void decoder(int64_t T, const model::Position& pos, const Backend& backend);
    void attention_block(int64_t layer, const TensorView& h, const model::Position& pos, const TensorView& out);
    void mlp_block(int64_t layer, const TensorView& h, const Backend& backend, const TensorView& out);
};

}  // namespace moex
