// Normalizers of tokenizer.json, applied to the text between added tokens before pre-tokenization: NFC/NFD/NFKC/
// NFKD (utf8proc), Lowercase, Replace, Prepend, Strip, and Sequence of these.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "src/tokenizer/json.h"
#include "src/tokenizer/regex.h"

namespace moex::tok {

class Normalizer {
   public:
    // nullptr for a JSON null; kUnsupported naming an unknown "type".
    static std::unique_ptr<Normalizer> parse(const Json& j, const std::string& where);
    std::string apply(std::string_view text) const;  // `text` valid UTF-8

   private:
    enum class Kind { kNfc, kNfd, kNfkc, kNfkd, kLowercase, kReplace, kPrepend, kStrip };
    struct Step {
        Kind kind;
        std::optional<Pattern> pattern;    // kReplace
        std::string text;                  // kReplace: content, kPrepend: prefix
        bool left = false, right = false;  // kStrip
    };
    void add(const Json& j, const std::string& where, int depth = 0);
    std::vector<Step> steps_;
};

}  // namespace moex::tok
