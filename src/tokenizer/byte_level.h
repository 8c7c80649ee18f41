// GPT-2's byte-level alphabet: each byte is shown as one printable code point (printable Latin-1 bytes as
// themselves, the other 68 bytes as U+0100..U+0143), so that byte-level BPE never sees spaces or control bytes.
#pragma once

#include <string>
#include <string_view>

namespace moex::tok {

// Each byte of `text` replaced by the UTF-8 of its alphabet code point.
std::string byte_level_encode(std::string_view text);
// Appends the bytes that the characters of `token` stand for; false (and `out` unchanged) when one character is
// outside the alphabet.
bool byte_level_decode(std::string_view token, std::string& out);

}  // namespace moex::tok
