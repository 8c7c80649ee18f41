// config.json's rotary-embedding settings: `rope_theta` + `rope_scaling` (transformers 4.x) or `rope_parameters`
// (5.x), read with the precedence of transformers' convert_rope_params_to_dict / standardize_rope_params.
#include <cmath>

#include "moex/error.h"
#include "src/model/config/internal.h"

namespace moex::model {

namespace {

bool known_rope_type(const std::string& t) {
    return t == "default" || t == "linear" || t == "dynamic" || t == "yarn" || t == "llama3";
}

// yarn's attention factor when the file gives mscale and mscale_all_dim but no attention_factor (DeepSeek style).
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

void require_positive(const JsonFields& f, const std::string& key, double value) {
    MOEX_REQUIRE(std::isfinite(value) && value > 0, ErrorCode::kFormat,
                 f.where(key) + " must be a positive number, got " + std::to_string(value));
}

}  // namespace

RopeConfig parse_rope_config(const JsonFields& fields, double default_theta, int64_t max_position_embeddings) {
    RopeConfig rope;
    // rope_scaling wins when it is a non-null object, as `rope_scaling or rope_parameters` does in transformers.
    std::string key = fields.has("rope_scaling") ? "rope_scaling" : "rope_parameters";
    const OrderedJson* params = fields.get(key);
    if (params != nullptr && !params->is_object()) fields.fail_type(key, "an object");
    static const OrderedJson kEmpty = OrderedJson::object();
    const JsonFields p(params != nullptr ? *params : kEmpty, fields.label(), fields.field(key) + ".");

    rope.theta = p.number("rope_theta").value_or(fields.number_or("rope_theta", default_theta));
    require_positive(p.has("rope_theta") ? p : fields, "rope_theta", rope.theta);
    rope.partial_rotary_factor =
        p.number("partial_rotary_factor").value_or(fields.number_or("partial_rotary_factor", 1.0));
    MOEX_REQUIRE(rope.partial_rotary_factor > 0 && rope.partial_rotary_factor <= 1, ErrorCode::kFormat,
                 fields.label() + ": partial_rotary_factor must be in (0, 1], got " +
                     std::to_string(rope.partial_rotary_factor));

    rope.type = p.string("rope_type").value_or(p.string("type").value_or("default"));
    if (!known_rope_type(rope.type))
        fail(ErrorCode::kUnsupported, p.where("rope_type") + " `" + rope.type +
                                          "` is not supported; moex runs default, linear, dynamic, yarn, llama3");
    if (rope.type == "default") return rope;

    rope.original_max_position_embeddings =
        p.integer("original_max_position_embeddings")
            .value_or(fields.integer_or("original_max_position_embeddings", max_position_embeddings));
    MOEX_REQUIRE(rope.original_max_position_embeddings > 0, ErrorCode::kFormat,
                 p.where("original_max_position_embeddings") + " must be > 0, got " +
                     std::to_string(rope.original_max_position_embeddings));
    if (rope.type == "yarn" && !p.has("factor")) {
        rope.factor = double(max_position_embeddings) / double(rope.original_max_position_embeddings);
    } else {
        std::optional<double> factor = p.number("factor");
        MOEX_REQUIRE(factor.has_value(), ErrorCode::kFormat,
                     p.where("factor") + " is required for rope type `" + rope.type + "`");
        rope.factor = *factor;
    }
    require_positive(p, "factor", rope.factor);

    if (rope.type == "yarn") {
        rope.beta_fast = p.number_or("beta_fast", rope.beta_fast);
        rope.beta_slow = p.number_or("beta_slow", rope.beta_slow);
        const std::optional<double> mscale = p.number("mscale"), mscale_all = p.number("mscale_all_dim");
        if (p.has("attention_factor")) {
            rope.attention_factor = *p.number("attention_factor");
            require_positive(p, "attention_factor", rope.attention_factor);
        } else if (mscale && mscale_all && *mscale != 0 && *mscale_all != 0) {
            rope.attention_factor = yarn_mscale(rope.factor, *mscale) / yarn_mscale(rope.factor, *mscale_all);
        }
    }
    if (rope.type == "llama3") {
        rope.low_freq_factor = p.number_or("low_freq_factor", rope.low_freq_factor);
        rope.high_freq_factor = p.number_or("high_freq_factor", rope.high_freq_factor);
        require_positive(p, "low_freq_factor", rope.low_freq_factor);
        MOEX_REQUIRE(rope.high_freq_factor > rope.low_freq_factor, ErrorCode::kFormat,
                     p.where("high_freq_factor") + " must exceed low_freq_factor, got " +
                         std::to_string(rope.high_freq_factor) + " <= " + std::to_string(rope.low_freq_factor));
    }
    return rope;
}

}  // namespace moex::model
