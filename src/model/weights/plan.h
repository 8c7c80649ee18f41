// The load plan of a checkpoint: every model weight the config calls for, as a destination (a DeviceTensor slot of
// ModelWeights and its shape) plus the checkpoint tensors that fill it and where (q/k/v into one qkv, per-expert
// gate/up/down into (E, 2I, H) and (E, H, I), gate rows first). Building the plan resolves every tensor name and
// checks every shape and dtype before a single byte of weights is read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "moex/model_config.h"
#include "src/model/weights/files.h"
#include "src/model/weights/weights.h"

namespace moex::model {

// The block scales of an F8_E4M3 piece (quantization_config fp8): `<name>_scale_inv`, dequantized on load.
struct PieceScales {
    const SafetensorsFile* file = nullptr;
    const SafetensorsInfo* info = nullptr;  // null: the piece is a float tensor
    int64_t block_n = 0, block_k = 0;       // 0 x 0: one scale per tensor (per expert for fused experts)
};

struct PlanPiece {
    const SafetensorsFile* file;
    const SafetensorsInfo* info;
    int64_t offset;  // first destination element
    PieceScales scales = {};
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
};

struct LoadPlan {
    std::vector<PlanTarget> targets;
    bool tie_lm_head = false;  // lm_head shares embed's storage
    uint64_t total_bytes = 0;  // source bytes read
};

// Nothing is allocated for the weights until the plan has found every tensor (a config that claims a billion
// layers fails on the first missing one). Errors: kNotFound for a missing tensor (naming it and what was searched),
// kFormat for a shape or dtype that disagrees with config.json, and whatever CheckpointFiles::find raises.
LoadPlan plan_weights(CheckpointFiles& files, const ModelConfig& config);

}  // namespace moex::model
