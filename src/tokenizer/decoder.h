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
    // continuation: the tokens follow others whose text is already known, so no step treats them as the text's
    // start (Metaspace's first token, a Strip's leading characters after a Fuse or ByteLevel).
    std::string decode(std::vector<std::string> tokens, bool continuation = false) const;
    // Whether the text of tokens a ++ b is decode(a) + decode(b, true) for every b, given a's last token and
    // decode(a) (or the continuation text a piece of it added): the chain is one whose steps see across a token
    // boundary only in ways this can check (streamable_), a does not end inside a <0xNN> group, and its text is
    // non-empty (a leading Strip has finished) and does not end in U+FFFD (ByteLevel bytes are not mid-character).
    bool cut_after(const std::string& last_token, const std::string& text) const;

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
    // joined: a ByteLevel or Fuse ran before, so `tokens` is the whole text as one token.
    static void run(const Step& step, std::vector<std::string>& tokens, bool continuation, bool joined);
    static bool joins(const Step& step) { return step.kind == Kind::kByteLevel || step.kind == Kind::kFuse; }
    bool streamable() const;
    std::vector<Step> steps_;
};

}  // namespace moex::tok
