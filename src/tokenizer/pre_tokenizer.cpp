// Pre-tokenizer steps. Each step maps every current piece to its sub-pieces; empty pieces are dropped at every
// step, as `tokenizers` does.
#include "src/tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "src/tokenizer/byte_level.h"
#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

// GPT-2's split regex, the one the ByteLevel pre-tokenizer applies when use_regex is true.
const Regex& gpt2_regex() {
    static const Regex re(R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)",
                          "ByteLevel regex");
    return re;
}

SplitBehavior parse_behavior(const Json& j, const std::string& where) {
    const std::string b = get_string(j, "behavior", where);
    if (b == "Removed") return SplitBehavior::kRemoved;
    if (b == "Isolated") return SplitBehavior::kIsolated;
    if (b == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (b == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (b == "Contiguous") return SplitBehavior::kContiguous;
    format_error(child(where, "behavior"), "unknown split behavior \"" + b + "\"");
}

// Cuts at each character for which `pred` holds (a match per character), as `tokenizers`' char patterns.
template <typename Pred>
std::vector<Cut> char_cuts(const std::string& s, Pred pred) {
    std::vector<Span> matches;
    size_t i = 0;
    while (i < s.size()) {
        const size_t b = i;
        if (pred(next_code_point(s, i))) matches.emplace_back(b, i);
    }
    return cuts_from_matches(matches, s.size());
}

}  // namespace

void split_piece(const Piece& piece, std::vector<Cut> cuts, SplitBehavior behavior, std::vector<Piece>& out) {
    std::vector<std::pair<Span, bool>> kept;  // (range, remove)
    kept.reserve(cuts.size());
    bool previous_match = false;
    switch (behavior) {
        case SplitBehavior::kIsolated:
            for (const Cut& c : cuts) kept.push_back({{c.begin, c.end}, false});
            break;
        case SplitBehavior::kRemoved:
            for (const Cut& c : cuts) kept.push_back({{c.begin, c.end}, c.is_match});
            break;
        case SplitBehavior::kContiguous:
            for (const Cut& c : cuts) {
                if (c.is_match == previous_match && !kept.empty()) {
                    kept.back().first.second = c.end;
                } else {
                    kept.push_back({{c.begin, c.end}, false});
                }
                previous_match = c.is_match;
            }
            break;
        case SplitBehavior::kMergedWithPrevious:
            for (const Cut& c : cuts) {
                if (c.is_match && !previous_match && !kept.empty()) {
                    kept.back().first.second = c.end;
                } else {
                    kept.push_back({{c.begin, c.end}, false});
                }
                previous_match = c.is_match;
            }
            break;
        case SplitBehavior::kMergedWithNext:
            for (auto it = cuts.rbegin(); it != cuts.rend(); ++it) {
                if (it->is_match && !previous_match && !kept.empty()) {
                    kept.back().first.first = it->begin;
                } else {
                    kept.push_back({{it->begin, it->end}, false});
                }
                previous_match = it->is_match;
            }
            std::reverse(kept.begin(), kept.end());
            break;
    }
    for (const auto& [range, remove] : kept) {
        if (remove || range.first == range.second) continue;
        out.push_back(
            {piece.text.substr(range.first, range.second - range.first), piece.at_origin && range.first == 0});
    }
}

std::unique_ptr<PreTokenizer> PreTokenizer::parse(const Json& j, const std::string& where) {
    if (j.is_null()) return nullptr;
    auto p = std::make_unique<PreTokenizer>();
    p->add(j, where);
    return p;
}

void PreTokenizer::add(const Json& j, const std::string& where, int depth) {
    const std::string type = type_of(j, where);
    if (depth > kMaxNesting) format_error(where, "Sequence nested more than " + std::to_string(kMaxNesting) + " deep");
    Step s{};
    if (type == "Sequence") {
        const Json& list = require_array(j, "pretokenizers", where);
        for (size_t i = 0; i < list.size(); ++i) add(list[i], child(child(where, "pretokenizers"), i), depth + 1);
        return;
    } else if (type == "Split") {
        s.kind = Kind::kSplit;
        s.pattern = Pattern::parse(require_field(j, "pattern", where), child(where, "pattern"));
        s.behavior = parse_behavior(j, where);
        s.invert = get_bool(j, "invert", false, where);
    } else if (type == "ByteLevel") {
        s.kind = Kind::kByteLevel;
        s.add_prefix_space = get_bool(j, "add_prefix_space", true, where);
        s.use_regex = get_bool(j, "use_regex", true, where);
    } else if (type == "Metaspace") {
        s.kind = Kind::kMetaspace;
        s.replacement = get_string(j, "replacement", where);
        size_t i = 0;
        if (s.replacement.empty() || (next_code_point(s.replacement, i), i != s.replacement.size())) {
            format_error(child(where, "replacement"), "expected one character");
        }
        const std::string scheme = get_optional_string(j, "prepend_scheme", where).value_or("always");
        if (scheme == "always") {
            s.prepend = Prepend::kAlways;
        } else if (scheme == "first") {
            s.prepend = Prepend::kFirst;
        } else if (scheme == "never") {
            s.prepend = Prepend::kNever;
        } else {
            format_error(child(where, "prepend_scheme"), "unknown prepend scheme \"" + scheme + "\"");
        }
        if (!get_bool(j, "add_prefix_space", true, where)) s.prepend = Prepend::kNever;  // the older spelling
        s.split = get_bool(j, "split", true, where);
    } else if (type == "Digits") {
        s.kind = Kind::kDigits;
        s.individual_digits = get_bool(j, "individual_digits", false, where);
    } else {
        unsupported(child(where, "type"), "pre-tokenizer \"" + type +
                                              "\" is not supported (supported: Split, ByteLevel, Metaspace, Digits, "
                                              "Sequence)");
    }
    steps_.push_back(std::move(s));
}

void PreTokenizer::run(const Step& step, const Piece& piece, std::vector<Piece>& out) {
    switch (step.kind) {
        case Kind::kSplit: {
            auto cuts = cuts_from_matches(step.pattern->find_all(piece.text), piece.text.size());
            if (step.invert) {
                for (Cut& c : cuts) c.is_match = !c.is_match;
            }
            split_piece(piece, std::move(cuts), step.behavior, out);
            return;
        }
        case Kind::kByteLevel: {
            Piece p = piece;
            if (step.add_prefix_space && (p.text.empty() || p.text[0] != ' ')) p.text = " " + p.text;
            const size_t first = out.size();
            if (step.use_regex) {
                split_piece(p, cuts_from_matches(gpt2_regex().find_all(p.text), p.text.size()),
                            SplitBehavior::kIsolated, out);
            } else if (!p.text.empty()) {
                out.push_back(std::move(p));
            }
            for (size_t i = first; i < out.size(); ++i) out[i].text = byte_level_encode(out[i].text);
            return;
        }
        case Kind::kMetaspace: {
            Piece p{"", piece.at_origin};
            p.text.reserve(piece.text.size() + 3);
            for (const char c : piece.text) {
                if (c == ' ') {
                    p.text += step.replacement;
                } else {
                    p.text += c;
                }
            }
            const bool starts = p.text.compare(0, step.replacement.size(), step.replacement) == 0;
            if (!starts && (step.prepend == Prepend::kAlways || (step.prepend == Prepend::kFirst && p.at_origin))) {
                p.text = step.replacement + p.text;
            }
            if (!step.split) {
                if (!p.text.empty()) out.push_back(std::move(p));
                return;
            }
            const auto cuts = cuts_from_matches(Pattern::literal(step.replacement).find_all(p.text), p.text.size());
            split_piece(p, cuts, SplitBehavior::kMergedWithNext, out);
            return;
        }
        case Kind::kDigits: {
            const auto cuts = char_cuts(piece.text, is_numeric);
            split_piece(piece, cuts, step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                        out);
            return;
        }
    }
}

void PreTokenizer::apply(Piece piece, std::vector<Piece>& out) const {
    if (piece.text.empty()) return;
    std::vector<Piece> current{std::move(piece)}, next;
    for (const Step& step : steps_) {
        next.clear();
        for (const Piece& p : current) run(step, p, next);
        current.swap(next);
    }
    for (Piece& p : current) out.push_back(std::move(p));
}

}  // namespace moex::tok
