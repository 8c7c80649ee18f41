// The BPE model of tokenizer.json: vocabulary, merges ranked by their order (keyed by the pair of ids), byte
// fallback to <0xNN> tokens, the unknown token (optionally fused), ignore_merges, continuing-subword prefix and
// end-of-word suffix. Words already seen are cached.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "src/tokenizer/json.h"

namespace moex::tok {

// Transparent (lookups by string_view). Deliberately not noexcept: libstdc++ then keeps each node's hash instead of
// rehashing neighbours while probing (loading a 150k-token file went from 1.6 s to 1.35 s, 0.7 s of it JSON).
struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TokenMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

class BpeModel {
   public:
    // `model` is the "model" object; kUnsupported for another model type, kFormat naming the field otherwise.
    static std::unique_ptr<BpeModel> parse(const Json& model, const std::string& where);

    // Appends the ids of one pre-tokenized word.
    void encode_word(std::string_view word, std::vector<int32_t>& out) const;
    std::optional<int32_t> token_to_id(std::string_view token) const;
    const std::string* id_to_token(int32_t id) const;  // nullptr when no token has this id
    int32_t max_id() const { return static_cast<int32_t>(tokens_.size()) - 1; }

   private:
    struct Merge {
        int32_t rank;
        int32_t new_id;
    };
    static uint64_t pair_key(int32_t a, int32_t b) {
        return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
    }
    void parse_vocab(const Json& vocab, const std::string& where);
    void parse_merges(const Json& merges, const std::string& where);
    std::vector<int32_t> symbols_of(std::string_view word) const;  // one id per character, before merges
    void merge(std::vector<int32_t>& symbols) const;

    TokenMap vocab_;
    std::vector<std::string> tokens_;  // by id; empty string where the id is unused
    std::vector<bool> has_token_;
    std::unordered_map<uint64_t, Merge> merges_;
    std::optional<int32_t> unk_id_;
    std::string prefix_, suffix_;  // continuing_subword_prefix, end_of_word_suffix
    bool fuse_unk_ = false, byte_fallback_ = false, ignore_merges_ = false;
    int32_t byte_ids_[256];  // id of <0xNN>, -1 when absent

    static constexpr size_t kCacheCapacity = 100000;
    static constexpr size_t kCacheMaxWord = 256;  // bytes; longer words are not cached (as `tokenizers`)
    mutable std::mutex cache_mutex_;
    mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace moex::tok
