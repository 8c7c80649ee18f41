// The byte <-> code point tables of the byte-level alphabet, built once.
#include "src/tokenizer/byte_level.h"

#include <array>
#include <cstdint>

#include "src/tokenizer/utf8.h"

namespace moex::tok {
namespace {

struct Tables {
    std::array<std::string, 256> byte_to_utf8;  // UTF-8 of the code point standing for each byte
    std::array<int16_t, 0x144> cp_to_byte;      // -1 where the code point is not in the alphabet
};

const Tables& tables() {
    static const Tables t = [] {
        Tables t{};
        t.cp_to_byte.fill(-1);
        auto kept = [](int b) {
            return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        };
        int next = 0;
        for (int b = 0; b < 256; ++b) {
            const char32_t cp = kept(b) ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + next++);
            append_utf8(t.byte_to_utf8[b], cp);
            t.cp_to_byte[cp] = static_cast<int16_t>(b);
        }
        return t;
    }();
    return t;
}

}  // namespace

std::string byte_level_encode(std::string_view text) {
    const Tables& t = tables();
    std::string out;
    out.reserve(text.size() * 2);
    for (const char c : text) out += t.byte_to_utf8[static_cast<unsigned char>(c)];
    return out;
}

bool byte_level_decode(std::string_view token, std::string& out) {
    const Tables& t = tables();
    const size_t mark = out.size();
    size_t i = 0;
    while (i < token.size()) {
        const char32_t cp = next_code_point(token, i);
        if (cp >= t.cp_to_byte.size() || t.cp_to_byte[cp] < 0) {
            out.resize(mark);
            return false;
        }
        out.push_back(static_cast<char>(t.cp_to_byte[cp]));
    }
    return true;
}

}  // namespace moex::tok
