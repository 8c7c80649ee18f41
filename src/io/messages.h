// Message helpers shared by moex's readers (safetensors files, config files, checkpoints), so that every error names
// what it read on one bounded line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <vector>

namespace moex::io {

std::string backticked(std::string_view s);                 // `s` in backticks, control bytes escaped, cut at 120 bytes
std::string shape_text(const std::vector<int64_t>& shape);  // "(2, 3)", "(5,)", "()"
std::string file_kind(mode_t mode);  // "a regular file", "a directory", "a FIFO", "a character device", ...
// A JSON library error for a message: nlohmann's text without its "[json.exception...] " tag, cut to 200 bytes
// (between UTF-8 characters), since it quotes the offending token, which in a hostile file can be megabytes long.
std::string json_reason(const std::exception& e);

}  // namespace moex::io
