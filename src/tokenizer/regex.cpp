// PCRE2 wrapper: compile once (JIT when available), then iterate matches the way Oniguruma's find_iter does.
#include "src/tokenizer/regex.h"

#include <pcre2.h>

#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

// Oniguruma's classes, spelled for PCRE2: \s also takes U+0085 (NEL); \w is alphabetic, marks, decimal digits and
// connectors, where PCRE2 10.42 has letters, all numbers and "_". Outside [...], Oniguruma's \w also takes the
// Latin-1 numbers ¹²³¼½¾ (checked against `tokenizers`).
constexpr std::string_view kSpace = "\\s\\x{85}";
constexpr std::string_view kWord = "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}";
constexpr std::string_view kWordOutsideClass =
    "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";

// Rewrites \s, \S, \w and \W with the classes above (inside a [...] class only \s and \w, which add members),
// leaving everything else as written.
std::string oniguruma_classes(std::string_view p) {
    std::string out;
    out.reserve(p.size() + 16);
    bool in_class = false;
    for (size_t i = 0; i < p.size(); ++i) {
        const char c = p[i];
        if (c == '\\' && i + 1 < p.size()) {
            const char e = p[++i];
            if (e == 'Q') {  // \Q...\E is literal text
                const size_t close = p.find("\\E", i + 1);
                const size_t stop = close == std::string_view::npos ? p.size() : close + 2;
                out.append(p.substr(i - 1, stop - (i - 1)));
                i = stop - 1;
                continue;
            }
            const std::string_view cls = e == 's' || e == 'S' ? kSpace : in_class ? kWord : kWordOutsideClass;
            if (in_class && (e == 's' || e == 'w')) {
                out += cls;
            } else if (!in_class && (e == 's' || e == 'w')) {
                out += "[" + std::string(cls) + "]";
            } else if (!in_class && (e == 'S' || e == 'W')) {
                out += "[^" + std::string(cls) + "]";
            } else {
                out += c;
                out += e;
            }
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out += c;
            if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
            if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a leading ] is literal
            continue;
        }
        if (in_class && c == '[' && i + 1 < p.size() && p[i + 1] == ':') {  // [:alpha:]
            const size_t close = p.find(":]", i + 2);
            if (close != std::string_view::npos) {
                out.append(p.substr(i, close + 2 - i));
                i = close + 1;
                continue;
            }
        }
        if (in_class && c == ']') in_class = false;
        out += c;
    }
    return out;
}

}  // namespace

Regex::Regex(std::string_view pattern, const std::string& where) {
    const std::string widened = oniguruma_classes(pattern);
    int error = 0;
    PCRE2_SIZE offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(widened.data()), widened.size(),
                                     PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
    if (code == nullptr) {
        PCRE2_UCHAR message[256];
        pcre2_get_error_message(error, message, sizeof(message));
        format_error(where, "regex \"" + std::string(pattern) + "\" does not compile: " +
                                reinterpret_cast<const char*>(message) + " (at offset " + std::to_string(offset) + ")");
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter when JIT is unavailable
    code_ = std::shared_ptr<pcre2_real_code_8>(code, pcre2_code_free);
}

std::vector<Span> Regex::find_all(std::string_view text) const {
    std::vector<Span> out;
    std::unique_ptr<pcre2_match_data, decltype(&pcre2_match_data_free)> md(
        pcre2_match_data_create_from_pattern(code_.get(), nullptr), pcre2_match_data_free);
    MOEX_REQUIRE(md != nullptr, ErrorCode::kInvalidArgument, "tokenizer: out of memory for regex match data");
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t pos = 0;
    std::optional<size_t> last_match_end;
    // The text is checked once by the first call; later calls skip PCRE2's check (it would rescan the text).
    uint32_t options = 0;
    while (pos <= text.size()) {
        const int rc = pcre2_match(code_.get(), subject, text.size(), pos, options, md.get(), nullptr);
        options = PCRE2_NO_UTF_CHECK;
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR message[256];
            pcre2_get_error_message(rc, message, sizeof(message));
            fail(ErrorCode::kInvalidArgument,
                 std::string("tokenizer: regex match failed: ") + reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md.get());
        const size_t begin = ov[0], end = ov[1];
        if (begin == end && last_match_end == end) {
            if (pos >= text.size()) break;
            pos += utf8_length(static_cast<unsigned char>(text[pos]));
            continue;
        }
        out.emplace_back(begin, end);
        last_match_end = end;
        pos = end;
        if (begin == end && pos >= text.size()) break;
    }
    return out;
}

Pattern Pattern::parse(const Json& j, const std::string& where) {
    if (!j.is_object() || j.size() != 1) format_error(where, "expected {\"String\": ...} or {\"Regex\": ...}");
    Pattern p;
    if (const Json* s = find_field(j, "String")) {
        if (!s->is_string()) format_error(child(where, "String"), "expected a string");
        p.literal_ = s->get<std::string>();
        if (p.literal_.empty()) format_error(child(where, "String"), "empty pattern");
    } else if (const Json* r = find_field(j, "Regex")) {
        if (!r->is_string()) format_error(child(where, "Regex"), "expected a string");
        p.regex_.emplace(r->get<std::string>(), child(where, "Regex"));
    } else {
        format_error(where, "expected {\"String\": ...} or {\"Regex\": ...}");
    }
    return p;
}

Pattern Pattern::literal(std::string s) {
    Pattern p;
    p.literal_ = std::move(s);
    return p;
}

std::vector<Span> Pattern::find_all(std::string_view text) const {
    if (regex_) return regex_->find_all(text);
    std::vector<Span> out;
    if (literal_.empty()) return out;
    for (size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size())) {
        out.emplace_back(at, at + literal_.size());
    }
    return out;
}

std::vector<Cut> cuts_from_matches(const std::vector<Span>& matches, size_t size) {
    std::vector<Cut> cuts;
    if (size == 0) return {{0, 0, false}};
    cuts.reserve(matches.size() * 2 + 1);
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
        if (prev != b) cuts.push_back({prev, b, false});
        cuts.push_back({b, e, true});
        prev = e;
    }
    if (prev != size) cuts.push_back({prev, size, false});
    return cuts;
}

}  // namespace moex::tok
