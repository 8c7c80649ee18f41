// UTF-8 helpers of the tokenizer: validation, code point iteration, the lossy conversion Rust's `tokenizers` applies
// when decoding bytes (one U+FFFD per maximal invalid subpart), and the Unicode classes it tests (White_Space, \w).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace moex::tok {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

// Byte offset of the first invalid sequence (overlong, surrogate, > U+10FFFF, truncated), npos when `s` is valid.
size_t find_invalid_utf8(std::string_view s);
// The code point at s[i] (s valid UTF-8, i < s.size()); advances i past it.
char32_t next_code_point(std::string_view s, size_t& i);
// Bytes of the character whose lead byte is `lead` (1 for bytes that cannot lead).
size_t utf8_length(unsigned char lead);
void append_utf8(std::string& out, char32_t cp);
// `bytes` as valid UTF-8: each maximal subpart of an invalid sequence becomes one U+FFFD (Rust's from_utf8_lossy).
std::string utf8_lossy(std::string_view bytes);

bool is_white_space(char32_t cp);  // Unicode White_Space (Rust's char::is_whitespace)
bool is_word_char(char32_t cp);    // \w of Rust's regex: letters, marks, decimal digits, connectors, ZWJ/ZWNJ
bool is_numeric(char32_t cp);      // Rust's char::is_numeric: general categories Nd, Nl, No

}  // namespace moex::tok
