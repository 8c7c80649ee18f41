// Tokenizer: the two tokenizer.json forms the supported checkpoints ship (Hugging Face `tokenizers` format):
//  - byte-level BPE with a split-regex pre-tokenizer (Qwen2/Qwen3, OLMoE: GPT-2 byte-to-unicode map, PCRE2 regex with
//    Unicode classes, NFC normalizer when present);
//  - BPE with byte fallback (Mixtral/Llama: "▁" space replacement/prepend, <0xNN> byte tokens, Fuse/Strip decoders).
// Added/special tokens are matched before the model runs, as `tokenizers` does. Errors are moex::Error naming the path
// and the field that is wrong; nothing in a malformed file crashes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace moex {

class Tokenizer {
   public:
    // Parses tokenizer.json (kNotFound when missing, kFormat / kUnsupported naming the field otherwise).
    static Tokenizer from_file(const std::string& path);
    static Tokenizer from_json(std::string_view json_text, std::string label = "<memory>");

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Token ids of `text` (UTF-8; invalid UTF-8 is a kInvalidArgument error). add_special_tokens applies the
    // post-processor (e.g. Mixtral's BOS) when the file has one.
    std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;
    // Text of `ids`; skip_special_tokens drops added tokens marked special. Ids outside the vocabulary are an error.
    std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;

    int64_t vocab_size() const;  // model vocabulary plus added tokens (largest id + 1)
    std::optional<int32_t> token_to_id(std::string_view token) const;
    std::optional<std::string> id_to_token(int32_t id) const;
    bool is_special(int32_t id) const;

   private:
    friend class TokenStreamer;
    // What ids[begin, end) add to the text of ids[0, begin) when `continuation` (else their own text), and whether
    // the text of ids[0, end) may be cut after end: decode(ids[0, m)) == decode(ids[0, end)) + the piece of
    // [end, m) for every m (the streamer's checkpoint).
    struct Piece {
        std::string text;
        bool cut = false;
    };
    Piece decode_piece(const std::vector<int32_t>& ids, size_t begin, size_t end, bool skip_special_tokens,
                       bool continuation) const;
    struct Impl;
    explicit Tokenizer(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Streams text while tokens arrive: push() returns the text that is complete so far (never half a UTF-8 character,
// never a byte-fallback sequence cut in two), finish() returns the rest. Each push decodes only the ids since the
// last point where the text can be cut (Tokenizer::decode_piece), so streaming n ids costs O(n) amortised.
class TokenStreamer {
   public:
    TokenStreamer(const Tokenizer& tokenizer, bool skip_special_tokens = true);
    std::string push(int32_t id);
    std::string finish();

   private:
    const Tokenizer* tok_;
    bool skip_special_;
    std::vector<int32_t> ids_;
    size_t emitted_ = 0;  // bytes of decode(ids_) already returned
    size_t cut_ = 0;      // ids_[0, cut_) decode to the first base_ bytes, whatever follows
    size_t base_ = 0;
};

}  // namespace moex
