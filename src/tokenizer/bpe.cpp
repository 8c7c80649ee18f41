// BPE encoding as `tokenizers` does it: one symbol per character (byte fallback or <unk> for characters outside the
// vocabulary), then repeatedly the lowest-ranked adjacent pair is merged, leftmost first, through a heap of
// candidate merges (stale entries are skipped when popped).
#include "src/tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

// Vocabularies with ids this much sparser than their size are refused: the id table would be mostly holes.
constexpr int64_t kMaxIdSlack = 1 << 20;

}  // namespace

std::unique_ptr<BpeModel> BpeModel::parse(const Json& model, const std::string& where) {
    if (!model.is_object()) format_error(where, "expected a JSON object");
    const Json* type = find_field(model, "type");
    if (type != nullptr) {
        if (!type->is_string()) format_error(child(where, "type"), "expected a string");
        const std::string t = type->get<std::string>();
        if (t != "BPE") unsupported(child(where, "type"), "model type \"" + t + "\" is not supported (only BPE)");
    } else if (find_field(model, "merges") == nullptr) {
        unsupported(where, "model without \"type\" and without \"merges\" is not a BPE model (only BPE is supported)");
    }
    auto m = std::make_unique<BpeModel>();
    m->parse_vocab(require_field(model, "vocab", where), child(where, "vocab"));
    m->parse_merges(require_array(model, "merges", where), child(where, "merges"));
    if (const Json* d = find_field(model, "dropout"); d != nullptr && !d->is_null()) {
        if (!d->is_number() || d->get<double>() < 0.0 || d->get<double>() > 1.0) {
            format_error(child(where, "dropout"), "expected null or a number in [0, 1]");
        }
        // Dropout only matters for training; encoding is deterministic, as `tokenizers` is at inference.
    }
    if (auto unk = get_optional_string(model, "unk_token", where)) {
        m->unk_id_ = m->token_to_id(*unk);
        if (!m->unk_id_) format_error(child(where, "unk_token"), "\"" + *unk + "\" is not in the vocabulary");
    }
    m->prefix_ = get_optional_string(model, "continuing_subword_prefix", where).value_or("");
    m->suffix_ = get_optional_string(model, "end_of_word_suffix", where).value_or("");
    m->fuse_unk_ = get_bool(model, "fuse_unk", false, where);
    m->byte_fallback_ = get_bool(model, "byte_fallback", false, where);
    m->ignore_merges_ = get_bool(model, "ignore_merges", false, where);
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof(name), "<0x%02X>", b);
        m->byte_ids_[b] = m->token_to_id(name).value_or(-1);
    }
    return m;
}

void BpeModel::parse_vocab(const Json& vocab, const std::string& where) {
    if (!vocab.is_object()) format_error(where, "expected an object of token -> id");
    int64_t max_id = -1;
    vocab_.reserve(vocab.size());
    for (auto it = vocab.begin(); it != vocab.end(); ++it) {
        const Json& v = it.value();
        const bool plain = v.is_number_unsigned() && v.get<uint64_t>() < static_cast<uint64_t>(INT32_MAX);
        const int64_t id = plain ? static_cast<int64_t>(v.get<uint64_t>())  // the common case, without a message
                                 : as_int(v, where + "[\"" + it.key() + "\"]", 0, INT32_MAX - 1);
        vocab_[it.key()] = static_cast<int32_t>(id);
        max_id = std::max(max_id, id);
    }
    if (max_id + 1 > static_cast<int64_t>(vocab_.size()) + kMaxIdSlack) {
        format_error(where, "ids are too sparse: largest id " + std::to_string(max_id) + " for " +
                                std::to_string(vocab_.size()) + " tokens");
    }
    tokens_.assign(static_cast<size_t>(max_id + 1), std::string());
    has_token_.assign(static_cast<size_t>(max_id + 1), false);
    for (const auto& [token, id] : vocab_) {
        if (has_token_[id]) continue;  // two tokens with one id: keep one, as `tokenizers` does
        tokens_[id] = token;
        has_token_[id] = true;
    }
}

void BpeModel::parse_merges(const Json& merges, const std::string& where) {
    merges_.reserve(merges.size());
    int32_t rank = 0;
    std::string merged;
    for (size_t i = 0; i < merges.size(); ++i) {
        const Json& m = merges[i];
        auto at = [&] { return child(where, i); };  // built only for a message
        std::string a, b;
        if (m.is_string()) {  // "a b"
            const std::string& line = m.get_ref<const std::string&>();
            if (line.rfind("#version", 0) == 0) continue;
            const size_t space = line.find(' ');
            if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
                format_error(at(), "expected \"left right\" (two tokens separated by one space), got \"" + line + "\"");
            }
            a = line.substr(0, space);
            b = line.substr(space + 1);
        } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {  // ["a", "b"]
            a = m[0].get<std::string>();
            b = m[1].get<std::string>();
        } else {
            format_error(at(), "expected \"left right\" or [\"left\", \"right\"]");
        }
        const auto ia = token_to_id(a), ib = token_to_id(b);
        if (!ia) format_error(at(), "token \"" + a + "\" is not in the vocabulary");
        if (!ib) format_error(at(), "token \"" + b + "\" is not in the vocabulary");
        if (b.size() < prefix_.size()) format_error(at(), "token \"" + b + "\" is shorter than the subword prefix");
        merged = a + b.substr(prefix_.size());
        const auto inew = token_to_id(merged);
        if (!inew) format_error(at(), "merged token \"" + merged + "\" is not in the vocabulary");
        merges_[pair_key(*ia, *ib)] = Merge{rank++, *inew};  // a repeated pair keeps its last rank
    }
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
    auto it = vocab_.find(token);
    if (it == vocab_.end()) return std::nullopt;
    return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= tokens_.size() || !has_token_[id]) return nullptr;
    return &tokens_[id];
}

std::vector<int32_t> BpeModel::symbols_of(std::string_view word) const {
    std::vector<int32_t> symbols;
    symbols.reserve(word.size());
    int32_t pending_unk = -1;  // an <unk> not yet added (with fuse_unk, one for a whole run)
    std::string piece;
    size_t i = 0;
    while (i < word.size()) {
        const size_t begin = i;
        next_code_point(word, i);
        piece.clear();
        if (begin > 0) piece += prefix_;
        piece.append(word.substr(begin, i - begin));
        if (i == word.size()) piece += suffix_;
        if (auto id = token_to_id(piece)) {
            if (pending_unk >= 0) symbols.push_back(pending_unk);
            pending_unk = -1;
            symbols.push_back(*id);
            continue;
        }
        if (byte_fallback_ && std::all_of(piece.begin(), piece.end(),
                                          [&](char c) { return byte_ids_[static_cast<unsigned char>(c)] >= 0; })) {
            for (const char c : piece) symbols.push_back(byte_ids_[static_cast<unsigned char>(c)]);
            continue;  // a pending <unk> stays pending, as in `tokenizers`
        }
        if (!unk_id_) continue;  // no unknown token: the character is dropped
        if (pending_unk >= 0 && !fuse_unk_) symbols.push_back(pending_unk);
        pending_unk = *unk_id_;
    }
    if (pending_unk >= 0) symbols.push_back(pending_unk);
    return symbols;
}

void BpeModel::merge(std::vector<int32_t>& ids) const {
    if (ids.size() < 2 || merges_.empty()) return;
    struct Symbol {
        int32_t id, prev, next;
        bool alive;
    };
    struct Candidate {
        int32_t rank, pos, new_id;
        bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const int32_t n = static_cast<int32_t>(ids.size());
    std::vector<Symbol> sym(n);
    std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
    for (int32_t i = 0; i < n; ++i) {
        sym[i] = {ids[i], i - 1, i + 1 < n ? i + 1 : -1, true};
        if (i + 1 < n) {
            auto it = merges_.find(pair_key(ids[i], ids[i + 1]));
            if (it != merges_.end()) heap.push({it->second.rank, i, it->second.new_id});
        }
    }
    auto push_pair = [&](int32_t left) {  // the candidate merge of `left` with its right neighbour
        const int32_t right = sym[left].next;
        if (right < 0) return;
        auto it = merges_.find(pair_key(sym[left].id, sym[right].id));
        if (it != merges_.end()) heap.push({it->second.rank, left, it->second.new_id});
    };
    while (!heap.empty()) {
        const Candidate top = heap.top();
        heap.pop();
        Symbol& s = sym[top.pos];
        if (!s.alive || s.next < 0) continue;
        auto it = merges_.find(pair_key(s.id, sym[s.next].id));
        if (it == merges_.end() || it->second.new_id != top.new_id) continue;  // stale entry
        Symbol& right = sym[s.next];
        s.id = top.new_id;
        right.alive = false;
        s.next = right.next;
        if (s.next >= 0) sym[s.next].prev = top.pos;
        if (s.prev >= 0) push_pair(s.prev);
        push_pair(top.pos);
    }
    ids.clear();
    for (int32_t i = 0; i >= 0; i = sym[i].next) ids.push_back(sym[i].id);
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
    if (word.empty()) return;
    if (ignore_merges_) {
        if (auto id = token_to_id(word)) {
            out.push_back(*id);
            return;
        }
    }
    const bool cacheable = word.size() < kCacheMaxWord;
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        auto it = cache_.find(word);
        if (it != cache_.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
    }
    std::vector<int32_t> ids = symbols_of(word);
    merge(ids);
    out.insert(out.end(), ids.begin(), ids.end());
    if (cacheable) {
        std::lock_guard<std::mutex> lock(cache_mutex_);
        if (cache_.size() < kCacheCapacity) cache_.emplace(std::string(word), std::move(ids));
    }
}

}  // namespace moex::tok
