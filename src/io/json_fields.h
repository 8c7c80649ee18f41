// The one checked reader of moex's JSON files (config.json, generation_config.json, the shard index, tokenizer.json):
// every error is a kFormat moex::Error that names the file and the field with its path ("config.json:
// text_config.hidden_size must be an integer, got \"32\"", "tokenizer.json: model.merges[3]: expected a string").
// Two styles over the same rules: JsonFields (the config files: a field that is absent or null reads as absent) and
// path-style accessors over any nlohmann JSON type (tokenizer.json's nested components).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "moex/error.h"

namespace moex::io {

using OrderedJson = nlohmann::ordered_json;  // keeps file order, which sub_config_keys reports

// Size limits of the JSON files a checkpoint holds, checked before a byte is read (docs/design.md, Reliability):
// each is more than 10x the largest file of its kind on the Hugging Face hub, and small enough that parsing one
// (nlohmann keeps ~10 bytes per byte of text) fits in memory.
inline constexpr uint64_t kMaxConfigBytes = uint64_t(16) << 20;      // config.json, generation_config.json (~10 KB)
inline constexpr uint64_t kMaxIndexBytes = uint64_t(256) << 20;      // model.safetensors.index.json (1T models: ~15 MB)
inline constexpr uint64_t kMaxTokenizerBytes = uint64_t(256) << 20;  // tokenizer.json (the largest: ~35 MB)
// Objects and arrays nest at most this deep (Hugging Face files nest under 10): deeper files are refused while
// parsing, so nothing that walks a value (its rendering in a message, a copy) can recurse without bound.
inline constexpr int kMaxJsonDepth = 64;

// The whole of a regular file as a string, after checking its kind and size and before reading: kNotFound when it
// does not exist, kIo when it is not a regular file (a FIFO, a device, a directory) or cannot be read, kFormat when
// it is larger than `max_bytes`.
std::string read_text_file(const std::string& path, uint64_t max_bytes);

// Parses `text` as one JSON object, refusing what nlohmann would accept silently or could not walk safely: a NUL
// byte (nlohmann stops reading there, so anything after it would be ignored), a key twice in one object (nlohmann
// keeps one), nesting deeper than kMaxJsonDepth. kFormat naming `label` (and the key's object), bounded in length.
OrderedJson parse_json_object(std::string_view text, const std::string& label);
// The same checks for any JSON value, as nlohmann::json (tokenizer.json).
nlohmann::json parse_json_value(std::string_view text, const std::string& label);

class JsonFields {
   public:
    // `object` must outlive this. `prefix` is prepended to field names in messages ("text_config.").
    JsonFields(const OrderedJson& object, std::string label, std::string prefix = "")
        : object_(object), label_(std::move(label)), prefix_(std::move(prefix)) {}

    bool has(const std::string& key) const;                                        // present and not null
    bool contains(const std::string& key) const { return object_.contains(key); }  // present, maybe null
    const OrderedJson* get(const std::string& key) const;                          // nullptr when absent or null

    std::optional<int64_t> integer(const std::string& key) const;  // an integer, or a float with an integral value
    std::optional<double> number(const std::string& key) const;
    std::optional<bool> boolean(const std::string& key) const;
    std::optional<std::string> string(const std::string& key) const;
    // An integer or a list of integers (eos_token_id); absent: nullopt.
    std::optional<std::vector<int64_t>> integer_or_list(const std::string& key) const;
    std::optional<std::vector<int64_t>> integer_list(const std::string& key) const;

    int64_t integer_or(const std::string& key, int64_t fallback) const { return integer(key).value_or(fallback); }
    double number_or(const std::string& key, double fallback) const { return number(key).value_or(fallback); }
    bool boolean_or(const std::string& key, bool fallback) const { return boolean(key).value_or(fallback); }

    // "config.json: text_config.hidden_size" for messages.
    std::string where(const std::string& key) const { return label_ + ": " + field(key); }
    std::string field(const std::string& key) const { return prefix_ + key; }
    const std::string& label() const { return label_; }
    [[noreturn]] void fail_type(const std::string& key, const char* expected) const;

   private:
    const OrderedJson& object_;
    std::string label_;
    std::string prefix_;
};

// A short rendering of a JSON value for messages (strings quoted, cut at 60 bytes). It never recurses and stops
// once it has 60 bytes, so a value nested 100,000 deep or megabytes long costs no more than a short one.
std::string json_excerpt(const OrderedJson& value);

// ---- path-style checked reads: `where` is the path of `obj` ("tokenizer.json: model"), extended per field ---------
inline constexpr int kMaxNesting = 16;  // Sequence inside Sequence: deeper files are refused (no deep recursion)

[[noreturn]] inline void format_error(const std::string& where, const std::string& what) {
    fail(ErrorCode::kFormat, where + ": " + what);
}

inline std::string child(const std::string& where, const char* key) { return where + "." + key; }
inline std::string child(const std::string& where, size_t index) { return where + "[" + std::to_string(index) + "]"; }

template <class Json>
const Json* find_field(const Json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

template <class Json>
const Json& require_field(const Json& obj, const char* key, const std::string& where) {
    if (!obj.is_object()) format_error(where, "expected a JSON object");
    const Json* f = find_field(obj, key);
    if (f == nullptr) format_error(where, std::string("missing field \"") + key + "\"");
    return *f;
}

template <class Json>
std::string get_string(const Json& obj, const char* key, const std::string& where) {
    const Json& f = require_field(obj, key, where);
    if (!f.is_string()) format_error(child(where, key), "expected a string");
    return f.template get<std::string>();
}

// Missing or null: nullopt.
template <class Json>
std::optional<std::string> get_optional_string(const Json& obj, const char* key, const std::string& where) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return std::nullopt;
    if (!f->is_string()) format_error(child(where, key), "expected a string or null");
    return f->template get<std::string>();
}

template <class Json>
bool get_bool(const Json& obj, const char* key, bool fallback, const std::string& where) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return fallback;
    if (!f->is_boolean()) format_error(child(where, key), "expected true or false");
    return f->template get<bool>();
}

template <class Json>
int64_t as_int(const Json& v, const std::string& where, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) format_error(where, "expected an integer");
    const int64_t x = v.is_number_unsigned() && v.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                          ? INT64_MAX
                          : v.template get<int64_t>();
    if (x < lo || x > hi) {
        format_error(where, "value " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
    }
    return x;
}

template <class Json>
int64_t get_int(const Json& obj, const char* key, int64_t fallback, const std::string& where, int64_t lo, int64_t hi) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return fallback;
    return as_int(*f, child(where, key), lo, hi);
}

template <class Json>
const Json& require_array(const Json& obj, const char* key, const std::string& where) {
    const Json& f = require_field(obj, key, where);
    if (!f.is_array()) format_error(child(where, key), "expected an array");
    return f;
}

// The "type" tag of a component object.
template <class Json>
std::string type_of(const Json& obj, const std::string& where) {
    return get_string(obj, "type", where);
}

[[noreturn]] inline void unsupported(const std::string& where, const std::string& what) {
    fail(ErrorCode::kUnsupported, where + ": " + what);
}

}  // namespace moex::io
