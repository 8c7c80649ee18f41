// Normalizer steps. Unicode normalization uses utf8proc (a small, well-kept library with the Unicode tables) rather
// than hand-made tables; ASCII text skips it, as every normal form leaves ASCII unchanged.
#include "src/tokenizer/normalizer.h"

#include <utf8proc.h>

#include <cstdlib>

#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

bool is_ascii(std::string_view s) {
    for (const char c : s) {
        if (static_cast<unsigned char>(c) >= 0x80) return false;
    }
    return true;
}

std::string unicode_normalize(std::string_view text, int options) {
    if (is_ascii(text)) return std::string(text);
    utf8proc_uint8_t* out = nullptr;
    const utf8proc_ssize_t n =
        utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()), static_cast<utf8proc_ssize_t>(text.size()),
                     &out, static_cast<utf8proc_option_t>(options | UTF8PROC_STABLE));
    if (n < 0) {
        std::free(out);
        fail(ErrorCode::kInvalidArgument,
             std::string("tokenizer: Unicode normalization failed: ") + utf8proc_errmsg(n));
    }
    std::string result(reinterpret_cast<const char*>(out), static_cast<size_t>(n));
    std::free(out);
    return result;
}

std::string lowercase(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    size_t i = 0;
    while (i < text.size()) {
        const char32_t cp = next_code_point(text, i);
        if (cp == 0x130) {  // İ lowercases to two code points (Rust's char::to_lowercase)
            out += "i\xCC\x87";
            continue;
        }
        append_utf8(out, static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp))));
    }
    return out;
}

std::string strip(std::string_view text, bool left, bool right) {
    size_t b = 0, e = text.size();
    if (left) {
        while (b < e) {
            size_t i = b;
            if (!is_white_space(next_code_point(text, i))) break;
            b = i;
        }
    }
    if (right) {
        while (e > b) {
            size_t start = e - 1;
            while (start > b && (static_cast<unsigned char>(text[start]) & 0xC0) == 0x80) --start;
            size_t i = start;
            if (!is_white_space(next_code_point(text, i))) break;
            e = start;
        }
    }
    return std::string(text.substr(b, e - b));
}

std::string replace_all(std::string_view text, const Pattern& pattern, const std::string& content) {
    const auto matches = pattern.find_all(text);
    if (matches.empty()) return std::string(text);
    std::string out;
    out.reserve(text.size() + matches.size() * content.size());
    size_t prev = 0;
    for (const auto& [b, e] : matches) {
        out.append(text.substr(prev, b - prev));
        out += content;
        prev = e;
    }
    out.append(text.substr(prev));
    return out;
}

}  // namespace

std::unique_ptr<Normalizer> Normalizer::parse(const Json& j, const std::string& where) {
    if (j.is_null()) return nullptr;
    auto n = std::make_unique<Normalizer>();
    n->add(j, where);
    return n;
}

void Normalizer::add(const Json& j, const std::string& where, int depth) {
    const std::string type = type_of(j, where);
    if (depth > kMaxNesting) format_error(where, "Sequence nested more than " + std::to_string(kMaxNesting) + " deep");
    if (type == "Sequence") {
        const Json& list = require_array(j, "normalizers", where);
        for (size_t i = 0; i < list.size(); ++i) add(list[i], child(child(where, "normalizers"), i), depth + 1);
    } else if (type == "NFC") {
        steps_.push_back({Kind::kNfc});
    } else if (type == "NFD") {
        steps_.push_back({Kind::kNfd});
    } else if (type == "NFKC") {
        steps_.push_back({Kind::kNfkc});
    } else if (type == "NFKD") {
        steps_.push_back({Kind::kNfkd});
    } else if (type == "Lowercase") {
        steps_.push_back({Kind::kLowercase});
    } else if (type == "Replace") {
        steps_.push_back({Kind::kReplace, Pattern::parse(require_field(j, "pattern", where), child(where, "pattern")),
                          get_string(j, "content", where)});
    } else if (type == "Prepend") {
        steps_.push_back({Kind::kPrepend, std::nullopt, get_string(j, "prepend", where)});
    } else if (type == "Strip") {
        Step s{Kind::kStrip};
        s.left = get_bool(j, "strip_left", false, where);
        s.right = get_bool(j, "strip_right", false, where);
        steps_.push_back(std::move(s));
    } else {
        unsupported(child(where, "type"), "normalizer \"" + type +
                                              "\" is not supported (supported: NFC, NFD, NFKC, NFKD, Lowercase, "
                                              "Replace, Prepend, Strip, Sequence)");
    }
}

std::string Normalizer::apply(std::string_view text) const {
    std::string s(text);
    for (const Step& step : steps_) {
        switch (step.kind) {
            case Kind::kNfc: s = unicode_normalize(s, UTF8PROC_COMPOSE); break;
            case Kind::kNfd: s = unicode_normalize(s, UTF8PROC_DECOMPOSE); break;
            case Kind::kNfkc: s = unicode_normalize(s, UTF8PROC_COMPOSE | UTF8PROC_COMPAT); break;
            case Kind::kNfkd: s = unicode_normalize(s, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT); break;
            case Kind::kLowercase: s = lowercase(s); break;
            case Kind::kReplace: s = replace_all(s, *step.pattern, step.text); break;
            case Kind::kPrepend:
                if (!s.empty()) s = step.text + s;
                break;
            case Kind::kStrip: s = strip(s, step.left, step.right); break;
        }
    }
    return s;
}

}  // namespace moex::tok
