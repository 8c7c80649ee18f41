// Checked reads of tokenizer.json fields: every accessor names the path of the field (e.g.
// "tokenizer.json: model.merges[3]") in the moex::Error it raises, so a malformed file never reaches nlohmann's
// unchecked access.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "moex/error.h"

namespace moex::tok {

using Json = nlohmann::json;

inline constexpr int kMaxNesting = 16;  // Sequence inside Sequence: deeper files are refused (no deep recursion)

[[noreturn]] inline void format_error(const std::string& where, const std::string& what) {
    fail(ErrorCode::kFormat, where + ": " + what);
}

inline std::string child(const std::string& where, const char* key) { return where + "." + key; }
inline std::string child(const std::string& where, size_t index) { return where + "[" + std::to_string(index) + "]"; }

inline const Json* find_field(const Json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    auto it = obj.find(key);
    return it == obj.end() ? nullptr : &*it;
}

inline const Json& require_field(const Json& obj, const char* key, const std::string& where) {
    if (!obj.is_object()) format_error(where, "expected a JSON object");
    const Json* f = find_field(obj, key);
    if (f == nullptr) format_error(where, std::string("missing field \"") + key + "\"");
    return *f;
}

inline std::string get_string(const Json& obj, const char* key, const std::string& where) {
    const Json& f = require_field(obj, key, where);
    if (!f.is_string()) format_error(child(where, key), "expected a string");
    return f.get<std::string>();
}

// Missing or null: nullopt.
inline std::optional<std::string> get_optional_string(const Json& obj, const char* key, const std::string& where) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return std::nullopt;
    if (!f->is_string()) format_error(child(where, key), "expected a string or null");
    return f->get<std::string>();
}

inline bool get_bool(const Json& obj, const char* key, bool fallback, const std::string& where) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return fallback;
    if (!f->is_boolean()) format_error(child(where, key), "expected true or false");
    return f->get<bool>();
}

inline int64_t as_int(const Json& v, const std::string& where, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) format_error(where, "expected an integer");
    const int64_t x =
        v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : v.get<int64_t>();
    if (x < lo || x > hi) {
        format_error(where, "value " + std::to_string(x) + " is outside [" + std::to_string(lo) + ", " +
                                std::to_string(hi) + "]");
    }
    return x;
}

inline int64_t get_int(const Json& obj, const char* key, int64_t fallback, const std::string& where, int64_t lo,
                       int64_t hi) {
    const Json* f = find_field(obj, key);
    if (f == nullptr || f->is_null()) return fallback;
    return as_int(*f, child(where, key), lo, hi);
}

inline const Json& require_array(const Json& obj, const char* key, const std::string& where) {
    const Json& f = require_field(obj, key, where);
    if (!f.is_array()) format_error(child(where, key), "expected an array");
    return f;
}

// The "type" tag of a component object.
inline std::string type_of(const Json& obj, const std::string& where) { return get_string(obj, "type", where); }

[[noreturn]] inline void unsupported(const std::string& where, const std::string& what) {
    fail(ErrorCode::kUnsupported, where + ": " + what);
}

}  // namespace moex::tok
