// Post-processor parsing: every supported processor reduces, for one sequence, to ids placed before and after it.
#include "src/tokenizer/post_processor.h"

namespace moex::tok {
namespace {

// The ids of a TemplateProcessing special token entry: {"id": name, "ids": [...], "tokens": [...]}.
std::vector<int32_t> special_ids(const Json& specials, const std::string& name, const std::string& where) {
    const Json* entry = find_field(specials, name.c_str());
    if (entry == nullptr) format_error(where, "special token \"" + name + "\" is not in special_tokens");
    const std::string at = where + "[\"" + name + "\"]";
    const Json& ids = require_array(*entry, "ids", at);
    std::vector<int32_t> out;
    for (size_t i = 0; i < ids.size(); ++i) {
        out.push_back(static_cast<int32_t>(as_int(ids[i], child(child(at, "ids"), i), 0, INT32_MAX - 1)));
    }
    return out;
}

// Bert/Roberta's "cls"/"sep": ["[CLS]", 101].
int32_t pair_id(const Json& j, const char* key, const std::string& where) {
    const Json& f = require_field(j, key, where);
    if (!f.is_array() || f.size() != 2 || !f[0].is_string()) format_error(child(where, key), "expected [token, id]");
    return static_cast<int32_t>(as_int(f[1], child(where, key), 0, INT32_MAX - 1));
}

}  // namespace

std::unique_ptr<PostProcessor> PostProcessor::parse(const Json& j, const std::string& where) {
    if (j.is_null()) return nullptr;
    auto p = std::make_unique<PostProcessor>();
    p->add(j, where);
    return p;
}

void PostProcessor::add(const Json& j, const std::string& where, int depth) {
    const std::string type = type_of(j, where);
    if (depth > kMaxNesting) format_error(where, "Sequence nested more than " + std::to_string(kMaxNesting) + " deep");
    if (type == "Sequence") {
        const Json& list = require_array(j, "processors", where);
        for (size_t i = 0; i < list.size(); ++i) add(list[i], child(child(where, "processors"), i), depth + 1);
    } else if (type == "TemplateProcessing") {
        add_template(j, where);
    } else if (type == "BertProcessing" || type == "RobertaProcessing") {
        steps_.push_back({{pair_id(j, "cls", where)}, {pair_id(j, "sep", where)}});
    } else if (type == "ByteLevel") {
        // Only offsets change; ids stay as they are.
    } else {
        unsupported(child(where, "type"), "post-processor \"" + type +
                                              "\" is not supported (supported: TemplateProcessing, BertProcessing, "
                                              "RobertaProcessing, ByteLevel, Sequence)");
    }
}

void PostProcessor::add_template(const Json& j, const std::string& where) {
    const Json& single = require_array(j, "single", where);
    const Json& specials = require_field(j, "special_tokens", where);
    const std::string specials_at = child(where, "special_tokens");
    Template t;
    bool seen_sequence = false;
    for (size_t i = 0; i < single.size(); ++i) {
        const std::string at = child(child(where, "single"), i);
        const Json& piece = single[i];
        std::string special;      // empty: the sequence
        if (piece.is_string()) {  // "$A", "$A:0", "<s>", "<s>:1"
            std::string s = piece.get<std::string>();
            if (const size_t colon = s.rfind(':'); colon != std::string::npos && colon > 0) s.resize(colon);
            if (s == "$B" || s == "$b") format_error(at, "the single-sequence template refers to sequence B");
            if (s.empty() || s[0] != '$') special = s;  // "$", "$A", "$1" (a type id) all stand for sequence A
        } else if (const Json* seq = find_field(piece, "Sequence")) {
            if (get_string(*seq, "id", at) != "A")
                format_error(at, "the single-sequence template refers to sequence B");
        } else if (const Json* tok = find_field(piece, "SpecialToken")) {
            special = get_string(*tok, "id", child(at, "SpecialToken"));
        } else {
            format_error(at, "expected {\"Sequence\": ...} or {\"SpecialToken\": ...}");
        }
        if (special.empty()) {
            if (seen_sequence) format_error(at, "the sequence appears twice in the template");
            seen_sequence = true;
            continue;
        }
        auto ids = special_ids(specials, special, specials_at);
        auto& side = seen_sequence ? t.after : t.before;
        side.insert(side.end(), ids.begin(), ids.end());
    }
    if (!seen_sequence) format_error(child(where, "single"), "the template has no $A");
    steps_.push_back(std::move(t));
}

std::vector<int32_t> PostProcessor::added_ids() const {
    std::vector<int32_t> out;
    for (const Template& t : steps_) {
        out.insert(out.end(), t.before.begin(), t.before.end());
        out.insert(out.end(), t.after.begin(), t.after.end());
    }
    return out;
}

std::vector<int32_t> PostProcessor::apply(std::vector<int32_t> ids, bool add_special_tokens) const {
    if (!add_special_tokens) return ids;
    for (const Template& t : steps_) {
        std::vector<int32_t> out;
        out.reserve(t.before.size() + ids.size() + t.after.size());
        out.insert(out.end(), t.before.begin(), t.before.end());
        out.insert(out.end(), ids.begin(), ids.end());
        out.insert(out.end(), t.after.begin(), t.after.end());
        ids = std::move(out);
    }
    return ids;
}

}  // namespace moex::tok
