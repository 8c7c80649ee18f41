// The decoder's weights on the run device, in the run dtype, loaded from a checkpoint directory
// (model.safetensors or shards listed by model.safetensors.index.json), memory-mapped and converted on the way.
// Per-expert tensors (experts.N.gate_proj/up_proj/down_proj, Mixtral's w1/w3/w2) are fused on load into
// gate_up (E, 2I, H) with gate rows before up rows, and down (E, H, I); checkpoints that already hold the fused
// 3-D tensors (experts.gate_up_proj, experts.down_proj, as transformers 5 can save) are taken as they are.
// q/k/v are fused into one (q rows, then k, then v) projection so that attention input is one GEMM.
// Pre-quantized checkpoints: the routed experts stay encoded (codes + scales, fused the same way) unless loaded with
// dequantize; every other quantized linear is decoded into the run dtype on load.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "moex/device.h"
#include "moex/model_config.h"

namespace moex::model {

// How the routed experts are held: in the run dtype (kNone), or resident as the checkpoint encodes them.
struct ExpertsStorage {
    QuantFormat format = QuantFormat::kNone;
    int64_t block_n = 0, block_k = 0;                      // fp8 (0 x 0: one scale per expert)
    ActivationQuant activations = ActivationQuant::kNone;  // fp8's activation_scheme; none for FP4
};

struct LayerWeights {
    DeviceTensor input_norm;      // (H)
    DeviceTensor qkv;             // ((nq + 2 nkv) D, H)
    DeviceTensor qkv_bias;        // ((nq + 2 nkv) D) or empty (attention_bias)
    DeviceTensor q_norm, k_norm;  // qwen3_moe: (D); olmoe: (nq D) and (nkv D); empty otherwise
    DeviceTensor o_proj;          // (H, nq D)
    DeviceTensor post_norm;       // (H)
    // MoE layers
    DeviceTensor router;           // (E, H)
    DeviceTensor experts_gate_up;  // (E, 2I, H); resident quantized: e4m3 codes, or (E, 2I, H / 2) e2m1 pairs
    DeviceTensor experts_down;     // (E, H, I);  likewise
    // Resident quantized experts' companions (moex/quant.h's ProjectionQuant): scales, nvfp4 globals (E),
    // fp8 static activation scales (E).
    DeviceTensor experts_gate_up_scale, experts_down_scale;
    DeviceTensor experts_gate_up_global, experts_down_global;
    DeviceTensor experts_gate_up_act_scale, experts_down_act_scale;
    DeviceTensor shared_gate_up;  // (2 Is, H)  qwen2_moe shared expert (gate rows, then up rows)
    DeviceTensor shared_down;     // (H, Is)
    DeviceTensor shared_gate;     // (1, H)     its sigmoid gate
    // dense-MLP layers (qwen mlp_only_layers / decoder_sparse_step)
    DeviceTensor mlp_gate_up;  // (2 I, H)
    DeviceTensor mlp_down;     // (H, I)
    bool is_moe() const { return experts_gate_up.view().defined(); }
    // ExpertsProblem::quant for these experts (views into the tensors above); disabled for kNone storage.
    ExpertsQuant experts_quant(const ExpertsStorage& storage) const;
};

struct ModelWeights {
    DeviceTensor embed;  // (V, H)
    std::vector<LayerWeights> layers;
    DeviceTensor final_norm;  // (H)
    DeviceTensor lm_head;     // (V, H); a tied checkpoint shares embed's storage
    ExpertsStorage experts;
};

struct LoadOptions {
    DType dtype = DType::kBF16;  // run dtype: f32 | bf16
    Device device = Device::kCPU;
    bool progress = true;     // a progress bar on stderr, only when stderr is a terminal
    bool dequantize = false;  // decode pre-quantized routed experts into `dtype` too (plan_weights)
};

// Loads every tensor the config calls for. Errors (moex::Error) name the file and the tensor: a missing
// model.safetensors / index / shard (kNotFound), a shard path that leaves the directory (kInvalidArgument),
// a missing tensor (kNotFound), a shape or dtype that disagrees with config.json (kFormat, naming both),
// corrupt safetensors (the reader's kFormat / kOverflow). Tensors the config does not use are ignored.
ModelWeights load_weights(const std::string& dir, const ModelConfig& config, const LoadOptions& options);

}  // namespace moex::model
