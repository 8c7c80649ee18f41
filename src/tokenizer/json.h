// The tokenizer's names for the checked JSON reader of src/io/json_fields.h: tokenizer.json is parsed as
// nlohmann::json and every field read names its path ("tokenizer.json: model.merges[3]") in the error it raises.
#pragma once

#include <nlohmann/json.hpp>

#include "src/io/json_fields.h"

namespace moex::tok {

using Json = nlohmann::json;
using io::as_int;
using io::child;
using io::find_field;
using io::format_error;
using io::get_bool;
using io::get_int;
using io::get_optional_string;
using io::get_string;
using io::kMaxNesting;
using io::require_array;
using io::require_field;
using io::type_of;
using io::unsupported;

}  // namespace moex::tok
