// TokenStreamer: text while ids arrive. Each push decodes the ids since the last cut (a point after which the text
// of every longer prefix only grows: Tokenizer::decode_piece) and returns what is final: trailing <0xNN> byte tokens
// wait for the token that closes their group (ByteFallback decodes a group as a whole), and a trailing run of U+FFFD
// waits too (byte-level text may still be completing a character). The text is that of decoding every prefix again,
// which cost O(n^2) for n ids (6,295 ids took 0.63 s).
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

// Positions are those of the whole text decode(ids_[0, stable)); the piece holds its bytes from base_ on, and
// emitted_ >= base_ always (a cut is made only where everything before it was returned).
std::string TokenStreamer::push(int32_t id) {
    if (id < 0 || id >= tok_->vocab_size() || !tok_->id_to_token(id)) tok_->decode({id});  // raises decode's error
    ids_.push_back(id);
    size_t stable = ids_.size();
    while (stable > cut_ && is_byte_token(tok_->id_to_token(ids_[stable - 1]))) --stable;
    if (stable == cut_) return {};
    const Tokenizer::Piece piece = tok_->decode_piece(ids_, cut_, stable, skip_special_, cut_ > 0);
    const std::string& text = piece.text;
    size_t end = base_ + text.size();
    const std::string_view fffd = tok::kReplacementChar;
    while (end >= emitted_ + fffd.size() &&
           std::string_view(text).substr(end - base_ - fffd.size(), fffd.size()) == fffd) {
        end -= fffd.size();
    }
    std::string out;
    if (end > emitted_) {
        out = rest_of(text.substr(0, end - base_), emitted_ - base_);
        emitted_ = end;
    }
    if (piece.cut && emitted_ == base_ + text.size()) cut_ = stable, base_ = emitted_;
    return out;
}

std::string TokenStreamer::finish() {
    const std::string text = tok_->decode_piece(ids_, cut_, ids_.size(), skip_special_, cut_ > 0).text;
    std::string out = rest_of(text, emitted_ - base_);
    ids_.clear();
    emitted_ = cut_ = base_ = 0;
    return out;
}

}  // namespace moex
