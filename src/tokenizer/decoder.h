// Decoders of tokenizer.json: they turn the token strings of ids back into text. ByteLevel, ByteFallback, Fuse,
// Strip, Replace, Metaspace, and Sequence of these, each working on the list of token strings as `tokenizers` does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/json.h"
#include "src/tokenizer/regex.h"

namespace moex::tok {

class Decoder {
   public:
    // nullptr for a JSON null; kUnsupported naming an unknown "type".
    static std::unique_ptr<Decoder> parse(const Json& j, const std::string& where);
    std::string decode(std::vector<std::string> tokens) const;

   private:
    enum class Kind { kByteLevel, kByteFallback, kFuse, kStrip, kReplace, kMetaspace };
    struct Step {
        Kind kind;
        std::optional<Pattern> pattern;  // kReplace
        std::string text;                // kReplace: content
        char32_t ch = 0;                 // kStrip: content, kMetaspace: replacement
        int64_t start = 0, stop = 0;     // kStrip
        bool strip_first = true;         // kMetaspace: prepend_scheme is not "never"
    };
    void add(const Json& j, const std::string& where, int depth = 0);
    static void run(const Step& step, std::vector<std::string>& tokens);
    std::vector<Step> steps_;
};

}  // namespace moex::tok
