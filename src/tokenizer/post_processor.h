// Post-processors of tokenizer.json for one sequence: TemplateProcessing (e.g. Mixtral's "<s> $A"), Bert/Roberta
// ([CLS] $A [SEP]), ByteLevel (ids unchanged) and Sequence of these.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/json.h"

namespace moex::tok {

class PostProcessor {
   public:
    // nullptr for a JSON null; kUnsupported naming an unknown "type".
    static std::unique_ptr<PostProcessor> parse(const Json& j, const std::string& where);
    // The ids with the special tokens of the single-sequence template added (nothing when !add_special_tokens).
    std::vector<int32_t> apply(std::vector<int32_t> ids, bool add_special_tokens) const;
    std::vector<int32_t> added_ids() const;  // every id a template adds (checked against the vocabulary)

   private:
    // One template: ids before and after the sequence.
    struct Template {
        std::vector<int32_t> before, after;
    };
    void add(const Json& j, const std::string& where, int depth = 0);
    void add_template(const Json& j, const std::string& where);
    std::vector<Template> steps_;
};

}  // namespace moex::tok
