// TokenStreamer: text while ids arrive. Each push decodes the ids so far and returns what is final: trailing
// <0xNN> byte tokens wait for the token that closes their group (ByteFallback decodes a group as a whole), and a
// trailing run of U+FFFD waits too (byte-level text may still be completing a character).
#include "moex/tokenizer.h"
#include "src/tokenizer/utf8.h"

namespace moex {
namespace {

bool is_byte_token(const std::optional<std::string>& t) {
    return t && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

// Text of `text` from `from`, moved forward to a character boundary (decode is expected to extend what was
// already returned; this keeps a character whole even if it did not).
std::string rest_of(const std::string& text, size_t from) {
    while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
    return from < text.size() ? text.substr(from) : std::string();
}

}  // namespace

TokenStreamer::TokenStreamer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(&tokenizer), skip_special_(skip_special_tokens) {}

std::string TokenStreamer::push(int32_t id) {
    if (id < 0 || id >= tok_->vocab_size() || !tok_->id_to_token(id)) tok_->decode({id});  // raises decode's error
    ids_.push_back(id);
    size_t stable = ids_.size();
    while (stable > 0 && is_byte_token(tok_->id_to_token(ids_[stable - 1]))) --stable;
    if (stable == 0) return {};
    const std::string text = tok_->decode(
        std::vector<int32_t>(ids_.begin(), ids_.begin() + static_cast<std::ptrdiff_t>(stable)), skip_special_);
    size_t end = text.size();
    const std::string_view fffd = tok::kReplacementChar;
    while (end >= emitted_ + fffd.size() && std::string_view(text).substr(end - fffd.size(), fffd.size()) == fffd) {
        end -= fffd.size();
    }
    if (end <= emitted_) return {};
    std::string out = rest_of(text.substr(0, end), emitted_);
    emitted_ = end;
    return out;
}

std::string TokenStreamer::finish() {
    const std::string text = tok_->decode(ids_, skip_special_);
    std::string out = rest_of(text, emitted_);
    ids_.clear();
    emitted_ = 0;
    return out;
}

}  // namespace moex
