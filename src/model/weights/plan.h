// The load plan of a checkpoint: every model weight the config calls for, as a destination (a DeviceTensor slot of
// ModelWeights and its shape) plus the checkpoint tensors that fill it and where (q/k/v into one qkv, per-expert
// gate/up/down into (E, 2I, H) and (E, H, I), gate rows first). Building the plan resolves every tensor name and
// checks every shape and dtype before a single byte of weights is read. Pre-quantized linears bring their companions
// (quant.h); the routed experts' codes and scales become targets of their own when they stay resident.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "moex/model_config.h"
#include "src/model/weights/files.h"
#include "src/model/weights/quant.h"
#include "src/model/weights/weights.h"

namespace moex::model {

struct PlanPiece {
    const SafetensorsFile* file;
    const SafetensorsInfo* info;
    int64_t offset;                   // first destination element
    PieceQuant quant = {};            // an encoded weight: decoded into the run dtype (targets without `stored`)
    std::vector<int64_t> shape = {};  // its decoded shape (an FP4 tensor stores half of K)
};

// Where a destination lives in ModelWeights: a model-level member, or a member of layers[layer].
struct WeightSlot {
    int64_t layer = -1;                            // -1: model-level
    DeviceTensor ModelWeights::*model = nullptr;   // when layer == -1
    DeviceTensor LayerWeights::*member = nullptr;  // when layer >= 0
    DeviceTensor& in(ModelWeights& w) const { return layer < 0 ? w.*model : w.layers[size_t(layer)].*member; }
};

struct PlanTarget {
    WeightSlot slot;
    std::vector<int64_t> shape;     // of the destination
    std::vector<PlanPiece> pieces;  // cover the destination exactly, in order
    // Set: the pieces' bytes are copied as they are into a destination of this dtype (resident expert codes and
    // their scales); unset: converted or decoded into the run dtype.
    std::optional<DType> stored;
};

struct LoadPlan {
    std::vector<PlanTarget> targets;
    bool tie_lm_head = false;  // lm_head shares embed's storage
    uint64_t total_bytes = 0;  // source bytes read
    ExpertsStorage experts;    // how the routed experts are held
};

// Nothing is allocated for the weights until the plan has found every tensor (a config that claims a billion
// layers fails on the first missing one). Errors: kNotFound for a missing tensor (naming it and what was searched),
// kFormat for a shape or dtype that disagrees with config.json, and whatever CheckpointFiles::find raises.
// With `dequantize` the routed experts of a pre-quantized checkpoint are decoded into the run dtype like every other
// linear; without it they stay encoded when the backends can take them as stored (whole FP8 blocks, kUnsupported
// naming the dimension otherwise).
LoadPlan plan_weights(CheckpointFiles& files, const ModelConfig& config, bool dequantize = false);

}  // namespace moex::model
