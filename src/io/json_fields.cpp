// Typed JSON field reads for config.json / generation_config.json with errors that name the file and the field.
#include "src/io/json_fields.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "moex/error.h"

namespace moex::io {

std::string read_text_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in.good()) {
        const int err = errno;
        fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path + ": cannot open: " + std::strerror(err));
    }
    std::ostringstream s;
    s << in.rdbuf();
    MOEX_REQUIRE(!in.bad(), ErrorCode::kIo, path + ": read failed");
    return s.str();
}

OrderedJson parse_json_object(const std::string& text, const std::string& label) {
    OrderedJson j;
    try {
        j = OrderedJson::parse(text);
    } catch (const OrderedJson::parse_error& e) {
        fail(ErrorCode::kFormat, label + ": not valid JSON: " + e.what());
    }
    MOEX_REQUIRE(j.is_object(), ErrorCode::kFormat, label + ": expected a JSON object, got " + json_excerpt(j));
    return j;
}

std::string json_excerpt(const OrderedJson& value) {
    constexpr size_t kMax = 60;
    std::string s = value.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
    if (s.size() > kMax) s = s.substr(0, kMax) + "...";
    return s;
}

bool JsonFields::has(const std::string& key) const { return get(key) != nullptr; }

const OrderedJson* JsonFields::get(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
}

void JsonFields::fail_type(const std::string& key, const char* expected) const {
    const OrderedJson* v = get(key);
    fail(ErrorCode::kFormat,
         where(key) + " must be " + expected + ", got " + (v == nullptr ? std::string("null") : json_excerpt(*v)));
}

namespace {

std::optional<int64_t> as_integer(const OrderedJson& v) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
        return v.get<int64_t>();
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        // 2^63 is exactly representable; anything at or above it does not fit.
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2233720368547758e18) return int64_t(d);
    }
    return std::nullopt;
}

}  // namespace

std::optional<int64_t> JsonFields::integer(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    std::optional<int64_t> i = as_integer(*v);
    if (!i) fail_type(key, "an integer");
    return i;
}

std::optional<double> JsonFields::number(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail_type(key, "a number");
    return v->get<double>();
}

std::optional<bool> JsonFields::boolean(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail_type(key, "true or false");
    return v->get<bool>();
}

std::optional<std::string> JsonFields::string(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail_type(key, "a string");
    return v->get<std::string>();
}

std::optional<std::vector<int64_t>> JsonFields::integer_list(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) fail_type(key, "a list of integers");
    std::vector<int64_t> out;
    for (const auto& item : *v) {
        std::optional<int64_t> i = as_integer(item);
        if (!i) fail_type(key, "a list of integers");
        out.push_back(*i);
    }
    return out;
}

std::optional<std::vector<int64_t>> JsonFields::integer_or_list(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_array()) return integer_list(key);
    std::optional<int64_t> i = as_integer(*v);
    if (!i) fail_type(key, "an integer or a list of integers");
    return std::vector<int64_t>{*i};
}

}  // namespace moex::io
