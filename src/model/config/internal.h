// Internal pieces of config.json parsing shared by config.cpp and the weight loader: the rope settings (both the
// transformers 4.x and 5.x spellings), the range checks, and the config field names each family uses (for messages).
#pragma once

#include <cstdint>
#include <string>

#include "moex/model_config.h"
#include "src/io/json_fields.h"

namespace moex::model {

using io::json_excerpt;
using io::JsonFields;
using io::OrderedJson;
using io::parse_json_object;
using io::read_text_file;

// The field names a family's config.json uses for the expert count and the per-expert intermediate size.
struct ExpertFieldNames {
    const char* num_experts;          // "num_experts" | "num_local_experts"
    const char* expert_intermediate;  // "moe_intermediate_size" | "intermediate_size"
};
ExpertFieldNames expert_field_names(Architecture arch);

// rope_scaling (4.x, wins when non-null, as in transformers) or rope_parameters (5.x), with rope_theta and
// partial_rotary_factor falling back to the top-level fields, then to the family's default theta.
RopeConfig parse_rope_config(const JsonFields& fields, double default_theta, int64_t max_position_embeddings);

// Range checks of a parsed config; kFormat naming the field (as `fields` spells it) and its value.
void check_model_config(const ModelConfig& config, const JsonFields& fields);

// Reads generation_config.json's eos/bos/pad ids and sampling defaults into `config`.
void apply_generation_config(const JsonFields& fields, ModelConfig& config);

// quantization_config (top level, as transformers writes it) -> CheckpointQuant; absent: not quantized.
// src/model/config/quant_config.cpp
CheckpointQuant quantization_of(const JsonFields& top);

// A token id field value as int32 (kFormat when it does not fit).
int32_t token_id(const JsonFields& fields, const std::string& key, int64_t value);

}  // namespace moex::model
