// experts_implementation: parsing, validation and the set/get/decode rules of transformers, on a plain map.
#include "src/model/experts_implementation.h"

#include <algorithm>

#include "moex/backend.h"
#include "moex/error.h"

namespace moex {

ExpertsImplementation ExpertsImplementation::parse(const std::string& text) {
    MOEX_REQUIRE(!text.empty(), ErrorCode::kInvalidArgument, "experts implementation: empty value");
    if (text.find('=') == std::string::npos) return name(text);
    ExpertsImplementation out;
    size_t start = 0;
    while (start <= text.size()) {
        const size_t comma = std::min(text.find(',', start), text.size());
        const std::string item = text.substr(start, comma - start);
        const size_t eq = item.find('=');
        MOEX_REQUIRE(eq != std::string::npos && eq + 1 < item.size(), ErrorCode::kInvalidArgument,
                     "experts implementation `" + text +
                         "`: expected NAME or KEY=NAME,... (KEY empty for the top "
                         "level), got item `" +
                         item + "`");
        const std::string key = item.substr(0, eq);
        MOEX_REQUIRE(!out.per_config.count(key), ErrorCode::kInvalidArgument,
                     "experts implementation `" + text + "`: key `" + key + "` given twice");
        out.per_config[key] = item.substr(eq + 1);
        start = comma + 1;
    }
    return out;
}

std::map<std::string, std::string> decode_experts_implementation(const std::map<std::string, std::string>& current,
                                                                 Device device) {
    if (device == Device::kCPU) return current;
    std::map<std::string, std::string> out = current;
    for (auto& [key, value] : out)
        if (value == "grouped_mm") value = "batched_mm";
    return out;
}

}  // namespace moex

namespace moex::model {
namespace {

bool load_time_only(const std::string& name) {
    const Backend* b = ExpertsInterface::global().find(name);
    return b != nullptr && b->load_time_only();
}

}  // namespace

ExpertsImplementationState::ExpertsImplementationState(std::vector<std::string> sub_config_keys,
                                                       std::string decoder_key, Device device,
                                                       const ExpertsImplementation& requested,
                                                       const std::vector<std::pair<std::string, std::string>>& in_file)
    : decoder_key_(std::move(decoder_key)), device_(device) {
    keys_.push_back("");
    for (auto& k : sub_config_keys)
        if (!k.empty() && std::find(keys_.begin(), keys_.end(), k) == keys_.end()) keys_.push_back(k);
    MOEX_REQUIRE(std::find(keys_.begin(), keys_.end(), decoder_key_) != keys_.end(), ErrorCode::kInvalidArgument,
                 "the decoder's sub-config `" + decoder_key_ + "` is not among the config's sub-configs");
    // The config setter: a string reaches every sub-config; a map gives each key its value (absent: unset).
    std::map<std::string, std::string> wanted;
    if (!requested.empty()) {
        for (const auto& key : keys_) {
            if (requested.all)
                wanted[key] = *requested.all;
            else if (auto it = requested.per_config.find(key); it != requested.per_config.end())
                wanted[key] = it->second;
        }
        for (const auto& [key, value] : requested.per_config)
            MOEX_REQUIRE(
                std::find(keys_.begin(), keys_.end(), key) != keys_.end(), ErrorCode::kInvalidArgument,
                "experts implementation: `" + key + "` is not a sub-config of this model; valid keys: \"\"" + [&] {
                    std::string s;
                    for (size_t i = 1; i < keys_.size(); ++i) s += ", " + keys_[i];
                    return s;
                }());
    } else {
        for (const auto& [key, value] : in_file)
            if (std::find(keys_.begin(), keys_.end(), key) != keys_.end()) wanted[key] = value;
        if (auto it = wanted.find(""); it != wanted.end() && in_file.size() == 1)  // a plain string in config.json
            for (const auto& key : keys_) wanted[key] = it->second;
    }
    std::map<std::string, std::string> values;
    for (const auto& key : keys_) {
        auto it = wanted.find(key);
        values[key] = checked(it == wanted.end() ? kDefaultExpertsImplementation : it->second);
    }
    assign(std::move(values));
}

void ExpertsImplementationState::assign(std::map<std::string, std::string> values) {
    decode_values_ = decode_experts_implementation(values, device_);
    values_ = std::move(values);
}

const Backend& ExpertsImplementationState::backend() const { return ExpertsInterface::global().get(decoder_backend()); }

std::string ExpertsImplementationState::checked(const std::string& name) const {
    const auto& registry = ExpertsInterface::global();
    const Backend* backend = registry.find(name);
    MOEX_REQUIRE(backend != nullptr, ErrorCode::kInvalidArgument,
                 "Specified experts_implementation=\"" + name +
                     "\" is not supported. The only possible arguments are: " + registry.valid_names_text());
    if (auto why = backend->unavailable(device_))
        fail(ErrorCode::kUnsupported, "experts_implementation=\"" + name + "\" cannot run on " +
                                          std::string(device_name(device_)) + ": " + *why);
    return name;
}

void ExpertsImplementationState::set(const ExpertsImplementation& impl) {
    const std::string& top = values_.at("");
    std::string requested_top = top;
    if (impl.all)
        requested_top = *impl.all;
    else if (auto it = impl.per_config.find(""); it != impl.per_config.end())
        requested_top = it->second;
    for (const auto& [key, value] : impl.per_config)
        MOEX_REQUIRE(std::find(keys_.begin(), keys_.end(), key) != keys_.end(), ErrorCode::kInvalidArgument,
                     "set_experts_implementation: `" + key + "` is not a sub-config of this model");
    // The load-time guard (deepgemm_megamoe): never switched into or out of at run time.
    auto next = values_;
    next[""] = requested_top;
    for (size_t i = 1; i < keys_.size(); ++i) {
        const auto& key = keys_[i];
        if (impl.all)
            next[key] = *impl.all;
        else if (auto it = impl.per_config.find(key); it != impl.per_config.end())
            next[key] = it->second;
    }
    for (const auto& [key, value] : next) {
        const std::string& now = values_.at(key);
        if (value == now) continue;
        for (const std::string* name : {&now, &value})
            MOEX_REQUIRE(!load_time_only(*name), ErrorCode::kUnsupported,
                         *name + " is chosen at load time: switching " + (name == &now ? "out of" : "into") +
                             " it at run time is not supported (load the model again with the backend you want)");
    }
    for (auto& [key, value] : next) value = checked(value);
    assign(std::move(next));
}

}  // namespace moex::model
