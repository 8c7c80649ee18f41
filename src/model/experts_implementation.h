// The experts_implementation state of a model, with transformers' semantics (hf-experts-reference.md §3):
// a map {"": top level, "<sub_config>": value, ...}, the config setter's recursive rule, name validation against
// ExpertsInterface::global() (user backends included), the device check, the megamoe guard and the decode-stage map.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "moex/model.h"

namespace moex::model {

inline constexpr const char* kDefaultExpertsImplementation = "grouped_mm";

class ExpertsImplementationState {
   public:
    // sub_config_keys: every sub-config of the top-level config; decoder_key: the one whose value the MoE layers
    // read ("" for a plain model). requested (or, when empty, the file's value) is applied as from_pretrained does.
    ExpertsImplementationState(std::vector<std::string> sub_config_keys, std::string decoder_key, Device device,
                               const ExpertsImplementation& requested,
                               const std::vector<std::pair<std::string, std::string>>& in_file);

    void set(const ExpertsImplementation& impl);                // Model::set_experts_implementation
    void restore(const std::map<std::string, std::string>& m);  // set() of a snapshot (no megamoe guard on equal)
    const std::map<std::string, std::string>& get() const { return values_; }
    const std::string& decoder_backend() const { return values_.at(decoder_key_); }

   private:
    std::string checked(const std::string& name) const;  // validated name (errors list the valid ones)

    std::vector<std::string> keys_;  // "" first, then the sub-config keys
    std::string decoder_key_;
    Device device_;
    std::map<std::string, std::string> values_;
};

}  // namespace moex::model
