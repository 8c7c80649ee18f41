// Decoder steps, each a pass over the token strings (decode_chain in `tokenizers`); the result is their
// concatenation.
#include "src/tokenizer/decoder.h"

#include "src/tokenizer/byte_level.h"
#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

char32_t one_char(const Json& j, const char* key, const std::string& where) {
    const std::string s = get_string(j, key, where);
    size_t i = 0;
    if (s.empty() || (next_code_point(s, i), i != s.size())) format_error(child(where, key), "expected one character");
    i = 0;
    return next_code_point(s, i);
}

int hex_digit(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

// The byte of a "<0xNN>" token (Rust's u8::from_str_radix also takes "+N"), -1 otherwise.
int fallback_byte(const std::string& t) {
    if (t.size() != 6 || t.compare(0, 3, "<0x") != 0 || t[5] != '>') return -1;
    if (t[3] == '+') return hex_digit(t[4]);
    const int hi = hex_digit(t[3]), lo = hex_digit(t[4]);
    return hi < 0 || lo < 0 ? -1 : hi * 16 + lo;
}

void flush_bytes(std::string& bytes, std::vector<std::string>& out) {
    if (bytes.empty()) return;
    if (find_invalid_utf8(bytes) == std::string::npos) {
        out.push_back(bytes);
    } else {
        for (size_t i = 0; i < bytes.size(); ++i) out.emplace_back(kReplacementChar);
    }
    bytes.clear();
}

std::vector<char32_t> code_points(const std::string& s) {
    std::vector<char32_t> cps;
    size_t i = 0;
    while (i < s.size()) cps.push_back(next_code_point(s, i));
    return cps;
}

}  // namespace

std::unique_ptr<Decoder> Decoder::parse(const Json& j, const std::string& where) {
    if (j.is_null()) return nullptr;
    auto d = std::make_unique<Decoder>();
    d->add(j, where);
    return d;
}

void Decoder::add(const Json& j, const std::string& where, int depth) {
    const std::string type = type_of(j, where);
    if (depth > kMaxNesting) format_error(where, "Sequence nested more than " + std::to_string(kMaxNesting) + " deep");
    Step s{};
    if (type == "Sequence") {
        const Json& list = require_array(j, "decoders", where);
        for (size_t i = 0; i < list.size(); ++i) add(list[i], child(child(where, "decoders"), i), depth + 1);
        return;
    } else if (type == "ByteLevel") {
        s.kind = Kind::kByteLevel;
    } else if (type == "ByteFallback") {
        s.kind = Kind::kByteFallback;
    } else if (type == "Fuse") {
        s.kind = Kind::kFuse;
    } else if (type == "Strip") {
        s.kind = Kind::kStrip;
        s.ch = one_char(j, "content", where);
        s.start = get_int(j, "start", 0, where, 0, INT32_MAX);
        s.stop = get_int(j, "stop", 0, where, 0, INT32_MAX);
    } else if (type == "Replace") {
        s.kind = Kind::kReplace;
        s.pattern = Pattern::parse(require_field(j, "pattern", where), child(where, "pattern"));
        s.text = get_string(j, "content", where);
    } else if (type == "Metaspace") {
        s.kind = Kind::kMetaspace;
        s.ch = one_char(j, "replacement", where);
        const auto scheme = get_optional_string(j, "prepend_scheme", where).value_or("always");
        s.strip_first = scheme != "never" && get_bool(j, "add_prefix_space", true, where);
    } else {
        unsupported(child(where, "type"), "decoder \"" + type +
                                              "\" is not supported (supported: ByteLevel, ByteFallback, Fuse, Strip, "
                                              "Replace, Metaspace, Sequence)");
    }
    steps_.push_back(std::move(s));
}

void Decoder::run(const Step& step, std::vector<std::string>& tokens, bool continuation, bool joined) {
    std::vector<std::string> out;
    switch (step.kind) {
        case Kind::kByteLevel: {  // one token: all bytes, lossy (a token outside the alphabet stays as it is)
            std::string bytes;
            for (const std::string& t : tokens) {
                if (!byte_level_decode(t, bytes)) bytes += t;
            }
            out.push_back(utf8_lossy(bytes));
            break;
        }
        case Kind::kByteFallback: {
            std::string bytes;
            for (std::string& t : tokens) {
                const int b = fallback_byte(t);
                if (b >= 0) {
                    bytes.push_back(static_cast<char>(b));
                    continue;
                }
                flush_bytes(bytes, out);
                out.push_back(std::move(t));
            }
            flush_bytes(bytes, out);
            break;
        }
        case Kind::kFuse: {
            std::string all;
            for (const std::string& t : tokens) all += t;
            out.push_back(std::move(all));
            break;
        }
        case Kind::kStrip: {
            const int64_t start = continuation && joined ? 0 : step.start;  // the text's start lies before these
            for (const std::string& t : tokens) {
                const auto cps = code_points(t);
                size_t begin = 0, end = cps.size();
                while (begin < end && static_cast<int64_t>(begin) < start && cps[begin] == step.ch) ++begin;
                while (end > begin && static_cast<int64_t>(cps.size() - end) < step.stop && cps[end - 1] == step.ch) {
                    --end;
                }
                std::string s;
                for (size_t i = begin; i < end; ++i) append_utf8(s, cps[i]);
                out.push_back(std::move(s));
            }
            break;
        }
        case Kind::kReplace:
            for (const std::string& t : tokens) {
                std::string s;
                size_t prev = 0;
                for (const auto& [b, e] : step.pattern->find_all(t)) {
                    s.append(t, prev, b - prev);
                    s += step.text;
                    prev = e;
                }
                s.append(t, prev, std::string::npos);
                out.push_back(std::move(s));
            }
            break;
        case Kind::kMetaspace:
            for (size_t i = 0; i < tokens.size(); ++i) {
                // The first token drops every replacement; after a join it is the whole text, a continuation's too.
                const bool first = i == 0 && (joined || !continuation);
                std::string s;
                for (const char32_t cp : code_points(tokens[i])) {
                    if (cp != step.ch) {
                        append_utf8(s, cp);
                    } else if (!first || !step.strip_first) {
                        s += ' ';
                    }
                }
                out.push_back(std::move(s));
            }
            break;
    }
    tokens = std::move(out);
}

std::string Decoder::decode(std::vector<std::string> tokens, bool continuation) const {
    bool joined = false;
    for (const Step& step : steps_) {
        run(step, tokens, continuation, joined);
        joined = joined || joins(step);
    }
    std::string text;
    for (const std::string& t : tokens) text += t;
    return text;
}

// Before the first join every step maps each token on its own (Metaspace: the first one differently; ByteFallback:
// runs of <0xNN> tokens), so a cut between tokens is exact outside a <0xNN> run. After it the text is one token:
// Fuse, Metaspace and a Strip of leading characters act the same on a text and on its pieces once the strip has
// found a character to keep; a Replace (a match may span the cut), a trailing Strip (the text's end moves) or a
// second ByteLevel or ByteFallback are not, and neither is a Metaspace before a ByteFallback (it can make a
// <0xNN> token of the first one). U+FFFD as a step's character would hide the incomplete-character check.
bool Decoder::streamable() const {
    bool joined = false, metaspace = false;
    for (const Step& s : steps_) {
        if (s.ch == 0xFFFD) return false;
        if (joined && s.kind != Kind::kFuse && s.kind != Kind::kMetaspace && !(s.kind == Kind::kStrip && s.stop == 0))
            return false;
        if (s.kind == Kind::kByteFallback && metaspace) return false;
        metaspace = metaspace || s.kind == Kind::kMetaspace;
        joined = joined || joins(s);
    }
    return true;
}

bool Decoder::cut_after(const std::string& last_token, const std::string& text) const {
    if (!streamable() || text.empty()) return false;
    if (text.size() >= kReplacementChar.size() &&
        std::string_view(text).substr(text.size() - kReplacementChar.size()) == kReplacementChar)
        return false;
    std::vector<std::string> last = {last_token};  // as ByteFallback sees it: after the per-token steps before it
    for (const Step& s : steps_) {
        if (s.kind == Kind::kByteFallback) return fallback_byte(last[0]) < 0;
        if (joins(s)) break;
        run(s, last, true, false);
    }
    return true;
}

}  // namespace moex::tok
