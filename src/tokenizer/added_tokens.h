// Added tokens (tokenizer.json "added_tokens"): matched in the text before the model runs, leftmost-longest, with
// their single_word / lstrip / rstrip rules. Tokens with normalized=false match the raw text; those with
// normalized=true match the normalized text, in their normalized form.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/bpe.h"
#include "src/tokenizer/json.h"

namespace moex::tok {

class Normalizer;

struct AddedToken {
    int32_t id = 0;
    std::string content;
    std::string matched;  // what is matched and decoded: content, normalized when `normalized`
    bool single_word = false, lstrip = false, rstrip = false, normalized = true, special = false;
};

struct Segment {
    size_t begin, end;  // byte range of the text
    int32_t id;         // the added token, or -1 for text between tokens
};

class AddedVocabulary {
   public:
    // `list` is tokenizer.json's "added_tokens" array (or null).
    void parse(const Json& list, const std::string& where, const Normalizer* normalizer);
    // `text` cut around the added tokens whose `normalized` flag equals `normalized`; covers the whole text.
    std::vector<Segment> split(std::string_view text, bool normalized) const;

    const AddedToken* by_id(int32_t id) const;
    std::optional<int32_t> token_to_id(std::string_view content) const;
    int32_t max_id() const { return max_id_; }
    const std::vector<AddedToken>& tokens() const { return tokens_; }

   private:
    // Patterns grouped by their first byte, longest first, so that the first hit at a position is the longest.
    struct Matcher {
        std::vector<std::vector<size_t>> by_first_byte = std::vector<std::vector<size_t>>(256);  // token indices
        bool empty = true;
    };
    void build_matchers();
    std::vector<AddedToken> tokens_;
    std::unordered_map<int32_t, size_t> index_of_id_;
    TokenMap id_of_content_;
    Matcher raw_, normalized_;
    int32_t max_id_ = -1;
};

}  // namespace moex::tok
