// Pre-tokenizers of tokenizer.json: they cut normalized text into the words that BPE sees. Split (regex or string,
// with the five delimiter behaviors and invert), ByteLevel (with or without its GPT-2 regex), Metaspace, Digits,
// and Sequence of these.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/tokenizer/json.h"
#include "src/tokenizer/regex.h"

namespace moex::tok {

struct Piece {
    std::string text;
    bool at_origin = false;  // starts at offset 0 of the input (Metaspace's prepend_scheme "first" asks)
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// The non-empty pieces that `behavior` makes of `piece` given its cuts (as `tokenizers`' NormalizedString::split).
void split_piece(const Piece& piece, std::vector<Cut> cuts, SplitBehavior behavior, std::vector<Piece>& out);

class PreTokenizer {
   public:
    // nullptr for a JSON null; kUnsupported naming an unknown "type".
    static std::unique_ptr<PreTokenizer> parse(const Json& j, const std::string& where);
    // Appends the words of `piece` (non-empty) to `out`.
    void apply(Piece piece, std::vector<Piece>& out) const;

   private:
    enum class Kind { kSplit, kByteLevel, kMetaspace, kDigits };
    enum class Prepend { kAlways, kFirst, kNever };
    struct Step {
        Kind kind;
        std::optional<Pattern> pattern;  // kSplit
        SplitBehavior behavior = SplitBehavior::kIsolated;
        bool invert = false;            // kSplit
        bool add_prefix_space = false;  // kByteLevel
        bool use_regex = true;          // kByteLevel
        std::string replacement;        // kMetaspace (one character)
        Prepend prepend = Prepend::kAlways;
        bool split = true;               // kMetaspace
        bool individual_digits = false;  // kDigits
    };
    void add(const Json& j, const std::string& where, int depth = 0);
    static void run(const Step& step, const Piece& piece, std::vector<Piece>& out);
    std::vector<Step> steps_;
};

}  // namespace moex::tok
