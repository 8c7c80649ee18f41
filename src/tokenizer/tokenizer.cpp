// moex::Tokenizer: parses tokenizer.json into its parts (added tokens, normalizer, pre-tokenizer, BPE model,
// post-processor, decoder) and runs them in the order `tokenizers` does.
#include "moex/tokenizer.h"

#include <algorithm>
#include <unordered_set>

#include "moex/error.h"
#include "src/io/json_fields.h"
#include "src/tokenizer/added_tokens.h"
#include "src/tokenizer/bpe.h"
#include "src/tokenizer/decoder.h"
#include "src/tokenizer/normalizer.h"
#include "src/tokenizer/post_processor.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "src/tokenizer/utf8.h"

namespace moex {

struct Tokenizer::Impl {
    std::string label;
    std::unique_ptr<tok::Normalizer> normalizer;
    std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
    std::unique_ptr<tok::BpeModel> model;
    std::unique_ptr<tok::PostProcessor> post_processor;
    std::unique_ptr<tok::Decoder> decoder;
    tok::AddedVocabulary added;
    int64_t vocab_size = 0;
    std::vector<bool> skipped;  // by id: dropped by decode(skip_special_tokens = true)

    void parse(const tok::Json& root);
    const std::string* token_of(int32_t id) const;  // the string the decoder gets
    // The token strings the decoder gets for ids[begin, end).
    std::vector<std::string> token_strings(const std::vector<int32_t>& ids, size_t begin, size_t end,
                                           bool skip_special_tokens) const;
    void encode_text(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const;
};

void Tokenizer::Impl::parse(const tok::Json& root) {
    using namespace tok;
    if (!root.is_object()) format_error(label, "expected a JSON object at the top level");
    const Json null_json;
    auto field = [&](const char* key) -> const Json& {
        const Json* f = find_field(root, key);
        return f != nullptr ? *f : null_json;
    };
    auto at = [&](const char* key) { return label + ": " + key; };  // "tokenizer.json: model.merges[3]"
    model = BpeModel::parse(require_field(root, "model", label), at("model"));
    normalizer = Normalizer::parse(field("normalizer"), at("normalizer"));
    pre_tokenizer = PreTokenizer::parse(field("pre_tokenizer"), at("pre_tokenizer"));
    post_processor = PostProcessor::parse(field("post_processor"), at("post_processor"));
    decoder = Decoder::parse(field("decoder"), at("decoder"));
    added.parse(field("added_tokens"), at("added_tokens"), normalizer.get());
    vocab_size = static_cast<int64_t>(std::max(model->max_id(), added.max_id())) + 1;
    if (post_processor) {
        for (const int32_t id : post_processor->added_ids()) {
            if (id >= vocab_size) {
                format_error(at("post_processor"), "special token id " + std::to_string(id) +
                                                       " is outside the vocabulary (size " +
                                                       std::to_string(vocab_size) + ")");
            }
        }
    }
    // `tokenizers` drops a token when decoding with skip_special_tokens if its string is a special token's.
    std::unordered_set<std::string> special;
    for (const AddedToken& t : added.tokens()) {
        if (t.special) special.insert(t.content);
    }
    skipped.assign(static_cast<size_t>(vocab_size), false);
    if (!special.empty()) {
        for (int32_t id = 0; id < vocab_size; ++id) {
            const std::string* t = token_of(id);
            skipped[id] = t != nullptr && special.count(*t) != 0;
        }
    }
}

const std::string* Tokenizer::Impl::token_of(int32_t id) const {
    if (const tok::AddedToken* a = added.by_id(id)) return &a->matched;
    return model->id_to_token(id);
}

void Tokenizer::Impl::encode_text(std::string_view raw, bool at_origin, std::vector<int32_t>& ids) const {
    const std::string text = normalizer ? normalizer->apply(raw) : std::string(raw);
    std::vector<tok::Piece> words;
    for (const tok::Segment& s : added.split(text, /*normalized=*/true)) {
        if (s.id >= 0) {
            ids.push_back(s.id);
            continue;
        }
        tok::Piece piece{text.substr(s.begin, s.end - s.begin), at_origin && s.begin == 0};
        words.clear();
        if (pre_tokenizer) {
            pre_tokenizer->apply(std::move(piece), words);
        } else if (!piece.text.empty()) {
            words.push_back(std::move(piece));
        }
        for (const tok::Piece& w : words) model->encode_word(w.text, ids);
    }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::string& path) {
    return from_json(io::read_text_file(path, io::kMaxTokenizerBytes), path);
}

Tokenizer Tokenizer::from_json(std::string_view json_text, std::string label) {
    auto impl = std::make_unique<Impl>();
    impl->label = std::move(label);
    // NUL bytes, duplicate keys and deep nesting refused, messages bounded (src/io/json_fields.h).
    const tok::Json root = io::parse_json_value(json_text, impl->label);
    try {
        impl->parse(root);
    } catch (const tok::Json::exception& e) {  // a shape the checked readers missed: still a format error
        fail(ErrorCode::kFormat, impl->label + ": unexpected JSON content: " + e.what());
    }
    return Tokenizer(std::move(impl));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
    const size_t bad = tok::find_invalid_utf8(text);
    MOEX_REQUIRE(bad == std::string_view::npos, ErrorCode::kInvalidArgument,
                 "tokenizer: the text is not valid UTF-8 (byte offset " + std::to_string(bad) + ")");
    std::vector<int32_t> ids;
    for (const tok::Segment& s : impl_->added.split(text, /*normalized=*/false)) {
        if (s.id >= 0) {
            ids.push_back(s.id);
        } else {
            impl_->encode_text(text.substr(s.begin, s.end - s.begin), s.begin == 0, ids);
        }
    }
    if (impl_->post_processor) return impl_->post_processor->apply(std::move(ids), add_special_tokens);
    return ids;
}

std::vector<std::string> Tokenizer::Impl::token_strings(const std::vector<int32_t>& ids, size_t begin, size_t end,
                                                        bool skip_special_tokens) const {
    std::vector<std::string> tokens;
    tokens.reserve(end - begin);
    for (size_t i = begin; i < end; ++i) {
        const int32_t id = ids[i];
        MOEX_REQUIRE(id >= 0, ErrorCode::kInvalidArgument, "tokenizer: negative token id " + std::to_string(id));
        // As `tokenizers` does, ids no token has (past the vocabulary, as a model's padded vocab_size allows, or
        // holes in it) decode to nothing.
        const std::string* t = id < vocab_size ? token_of(id) : nullptr;
        if (t == nullptr) continue;
        if (skip_special_tokens && skipped[id]) continue;
        tokens.push_back(*t);
    }
    return tokens;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
    return decode_piece(ids, 0, ids.size(), skip_special_tokens, false).text;
}

Tokenizer::Piece Tokenizer::decode_piece(const std::vector<int32_t>& ids, size_t begin, size_t end,
                                         bool skip_special_tokens, bool continuation) const {
    std::vector<std::string> tokens = impl_->token_strings(ids, begin, end, skip_special_tokens);
    Piece piece;
    if (tokens.empty()) return piece;
    if (impl_->decoder) {
        const std::string last = tokens.back();
        piece.text = impl_->decoder->decode(std::move(tokens), continuation);
        piece.cut = impl_->decoder->cut_after(last, piece.text);
        return piece;
    }
    for (size_t i = 0; i < tokens.size(); ++i) {  // no decoder: the tokens joined by spaces
        if (i > 0 || continuation) piece.text += ' ';
        piece.text += tokens[i];
    }
    piece.cut = true;
    return piece;
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
    if (auto id = impl_->added.token_to_id(token)) return id;
    return impl_->model->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
    if (const tok::AddedToken* a = impl_->added.by_id(id)) return a->content;
    if (const std::string* t = impl_->model->id_to_token(id)) return *t;
    return std::nullopt;
}

bool Tokenizer::is_special(int32_t id) const {
    const tok::AddedToken* a = impl_->added.by_id(id);
    return a != nullptr && a->special;
}

}  // namespace moex
