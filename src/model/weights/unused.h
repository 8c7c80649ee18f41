// Every tensor of a checkpoint must be accounted for: used by the load plan, or a known extra that transformers
// ignores too. Anything else means config.json and the weights disagree (more layers or experts than the config
// says, a renamed module) and would otherwise be dropped without a word.
#pragma once

#include <string>

#include "moex/model_config.h"
#include "src/model/weights/files.h"
#include "src/model/weights/plan.h"

namespace moex::model {

// kFormat naming the first unused tensors and how many there are. `decoder_prefix` is the text model's ("model.",
// "model.language_model.", ...): a composite checkpoint's other sub-models (vision tower, projector) lie outside it.
void check_every_tensor_used(CheckpointFiles& files, const LoadPlan& plan, const ModelConfig& config,
                             const std::string& decoder_prefix);

}  // namespace moex::model
