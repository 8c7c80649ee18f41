// Added-token matching, following `tokenizers`' AddedVocabulary::find_matches: non-overlapping leftmost-longest
// matches; a single_word token must not touch word characters; lstrip/rstrip take the neighbouring white space in.
#include "src/tokenizer/added_tokens.h"

#include <algorithm>

#include "src/tokenizer/normalizer.h"
#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

char32_t last_code_point(std::string_view s) {
    size_t start = s.size() - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
    return next_code_point(s, start);
}

// Start of the white space that ends `s` (s.size() when none).
size_t white_space_run_start(std::string_view s) {
    size_t e = s.size();
    while (e > 0) {
        size_t start = e - 1;
        while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
        size_t i = start;
        if (!is_white_space(next_code_point(s, i))) break;
        e = start;
    }
    return e;
}

// Length of the white space that starts `s`.
size_t white_space_run_length(std::string_view s) {
    size_t i = 0;
    while (i < s.size()) {
        size_t j = i;
        if (!is_white_space(next_code_point(s, j))) break;
        i = j;
    }
    return i;
}

}  // namespace

void AddedVocabulary::parse(const Json& list, const std::string& where, const Normalizer* normalizer) {
    if (list.is_null()) return;
    if (!list.is_array()) format_error(where, "expected an array");
    for (size_t i = 0; i < list.size(); ++i) {
        const std::string at = child(where, i);
        const Json& j = list[i];
        AddedToken t;
        t.id = static_cast<int32_t>(as_int(require_field(j, "id", at), child(at, "id"), 0, INT32_MAX - 1));
        t.content = get_string(j, "content", at);
        t.single_word = get_bool(j, "single_word", false, at);
        t.lstrip = get_bool(j, "lstrip", false, at);
        t.rstrip = get_bool(j, "rstrip", false, at);
        t.special = get_bool(j, "special", false, at);
        t.normalized = get_bool(j, "normalized", !t.special, at);
        if (t.content.empty()) continue;  // `tokenizers` ignores empty tokens
        if (find_invalid_utf8(t.content) != std::string::npos) format_error(child(at, "content"), "invalid UTF-8");
        t.matched = t.normalized && normalizer != nullptr ? normalizer->apply(t.content) : t.content;
        if (index_of_id_.count(t.id) != 0) format_error(child(at, "id"), "id " + std::to_string(t.id) + " is repeated");
        index_of_id_[t.id] = tokens_.size();
        id_of_content_[t.content] = t.id;
        max_id_ = std::max(max_id_, t.id);
        tokens_.push_back(std::move(t));
    }
    build_matchers();
}

void AddedVocabulary::build_matchers() {
    for (size_t i = 0; i < tokens_.size(); ++i) {
        const AddedToken& t = tokens_[i];
        if (t.matched.empty()) continue;
        Matcher& m = t.normalized ? normalized_ : raw_;
        m.by_first_byte[static_cast<unsigned char>(t.matched[0])].push_back(i);
        m.empty = false;
    }
    for (Matcher* m : {&raw_, &normalized_}) {
        for (auto& list : m->by_first_byte) {
            std::stable_sort(list.begin(), list.end(),
                             [&](size_t a, size_t b) { return tokens_[a].matched.size() > tokens_[b].matched.size(); });
        }
    }
}

std::vector<Segment> AddedVocabulary::split(std::string_view text, bool normalized) const {
    const Matcher& m = normalized ? normalized_ : raw_;
    std::vector<Segment> out;
    if (m.empty || text.empty()) {
        if (!text.empty()) out.push_back({0, text.size(), -1});
        return out;
    }
    size_t start_offset = 0;  // end of the previous kept match
    size_t pos = 0;           // where the search for the next match starts
    while (pos < text.size()) {
        const AddedToken* hit = nullptr;
        for (const size_t i : m.by_first_byte[static_cast<unsigned char>(text[pos])]) {
            const std::string& p = tokens_[i].matched;
            if (text.compare(pos, p.size(), p) == 0) {
                hit = &tokens_[i];
                break;
            }
        }
        if (hit == nullptr) {
            ++pos;
            continue;
        }
        size_t start = pos, stop = pos + hit->matched.size();
        pos = stop;  // the search goes on after the match as found, whatever the rules below make of it
        if (hit->single_word) {
            const bool space_before = start == 0 || !is_word_char(last_code_point(text.substr(0, start)));
            size_t after = stop;
            const bool space_after = stop == text.size() || !is_word_char(next_code_point(text, after));
            if (!space_before || !space_after) continue;
        }
        if (hit->lstrip) start = std::max(white_space_run_start(text.substr(0, start)), start_offset);
        if (hit->rstrip) stop += white_space_run_length(text.substr(stop));
        if (start_offset < start) out.push_back({start_offset, start, -1});
        out.push_back({start, stop, hit->id});
        start_offset = stop;
    }
    if (start_offset < text.size()) out.push_back({start_offset, text.size(), -1});
    return out;
}

const AddedToken* AddedVocabulary::by_id(int32_t id) const {
    auto it = index_of_id_.find(id);
    return it == index_of_id_.end() ? nullptr : &tokens_[it->second];
}

std::optional<int32_t> AddedVocabulary::token_to_id(std::string_view content) const {
    auto it = id_of_content_.find(content);
    if (it == id_of_content_.end()) return std::nullopt;
    return it->second;
}

}  // namespace moex::tok
