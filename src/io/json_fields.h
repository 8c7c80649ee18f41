// Typed reads of the fields of one JSON object of a checkpoint's config files. Every error is a kFormat moex::Error
// that names the file and the field with its path ("config.json: text_config.hidden_size must be an integer, got
// \"32\""); a field that is absent or null reads as absent.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

namespace moex::io {

using OrderedJson = nlohmann::ordered_json;  // keeps file order, which sub_config_keys reports

// The whole file as a string (kNotFound when it does not exist, kIo when it cannot be read).
std::string read_text_file(const std::string& path);

// Parses `text` as a JSON object; kFormat naming `label` when it is not valid JSON or not an object.
OrderedJson parse_json_object(const std::string& text, const std::string& label);

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

// A short rendering of a JSON value for messages (strings quoted, long values cut).
std::string json_excerpt(const OrderedJson& value);

}  // namespace moex::io
