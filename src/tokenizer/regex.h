// Pattern matching for the tokenizer: a PCRE2 regex compiled with UTF and Unicode properties (PCRE2_UCP), and the
// literal-or-regex Pattern that the Split pre-tokenizer and the Replace normalizer/decoder read from
// {"String": ...} or {"Regex": ...}. Matches are iterated as `tokenizers` (Oniguruma) does.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "src/tokenizer/json.h"

struct pcre2_real_code_8;

namespace moex::tok {

using Span = std::pair<size_t, size_t>;  // [begin, end) byte offsets

class Regex {
   public:
    // kFormat naming `where` when the pattern does not compile. \s, \S, \w and \W are respelled with Oniguruma's
    // meaning (its \s takes U+0085, its \w takes marks), so that the splits are those of `tokenizers`.
    Regex(std::string_view pattern, const std::string& where);
    // Non-overlapping matches, left to right; an empty match right after the previous match is skipped.
    // `text` must be valid UTF-8.
    std::vector<Span> find_all(std::string_view text) const;

   private:
    std::shared_ptr<pcre2_real_code_8> code_;
};

class Pattern {
   public:
    static Pattern parse(const Json& j, const std::string& where);  // {"String": s} or {"Regex": r}
    static Pattern literal(std::string s);
    std::vector<Span> find_all(std::string_view text) const;

   private:
    std::string literal_;
    std::optional<Regex> regex_;
};

// Pieces covering the whole of a text of `size` bytes: each match and each gap between matches, with is_match.
struct Cut {
    size_t begin, end;
    bool is_match;
};
std::vector<Cut> cuts_from_matches(const std::vector<Span>& matches, size_t size);

}  // namespace moex::tok
