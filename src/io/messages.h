// Message helpers shared by moex's readers (safetensors files, config files, checkpoints), so that every error names
// what it read on one bounded line.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace moex::io {

std::string backticked(std::string_view s);                 // `s` in backticks, control bytes escaped, cut at 120 bytes
std::string shape_text(const std::vector<int64_t>& shape);  // "(2, 3)", "(5,)", "()"
std::string file_kind(mode_t mode);  // "a regular file", "a directory", "a FIFO", "a character device", ...

}  // namespace moex::io
