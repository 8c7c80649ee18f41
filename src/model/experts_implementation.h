// The experts_implementation state of a model, with transformers' semantics (docs/design.md, "The model runtime"):
// a map {"": top level, "<sub_config>": value, ...}, the config setter's recursive rule, name validation against
// ExpertsInterface::global() (user backends included), the device check, the load-time guard and the decode phase.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "moex/backend.h"
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

    void set(const ExpertsImplementation& impl);  // Model::set_experts_implementation

    // generate()'s decode phase: while it lasts, get() reports the decode map (transformers' switch: on a non-CPU
    // device every grouped_mm entry runs batched_mm) and backend() is the decoder's entry of it. The values set()
    // chose are never rewritten, so ending the phase cannot fail.
    class DecodePhase {
       public:
        explicit DecodePhase(ExpertsImplementationState& s) : s_(s) { s_.decoding_ = true; }
        ~DecodePhase() { s_.decoding_ = false; }
        DecodePhase(const DecodePhase&) = delete;
        DecodePhase& operator=(const DecodePhase&) = delete;

       private:
        ExpertsImplementationState& s_;
    };

    const std::map<std::string, std::string>& get() const { return decoding_ ? decode_values_ : values_; }
    const std::string& decoder_backend() const { return get().at(decoder_key_); }
    const Backend& backend() const;  // the registry's backend of decoder_backend()

   private:
    std::string checked(const std::string& name) const;  // validated name (errors list the valid ones)
    void assign(std::map<std::string, std::string> values);

    std::vector<std::string> keys_;  // "" first, then the sub-config keys
    std::string decoder_key_;
    Device device_;
    std::map<std::string, std::string> values_, decode_values_;
    bool decoding_ = false;
};

}  // namespace moex::model
