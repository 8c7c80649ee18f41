// Internal to src/io: the safetensors dtype table, the header parser/validator shared by the reader, the fuzzer
// and the tests (message helpers: src/io/messages.h).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moex/safetensors.h"
#include "src/io/messages.h"

namespace moex::io {

struct SafetensorsDtype {
    std::string_view name;
    int bits;
    std::optional<DType> dtype;  // the moex type, when there is one
};

// In the reference writer's order (ascending alignment): the writer sorts tensors by descending position here.
std::span<const SafetensorsDtype> safetensors_dtype_table();
const SafetensorsDtype* find_safetensors_dtype(std::string_view name);
int safetensors_dtype_rank(std::string_view name);  // position in the table, -1 if unknown

struct ParsedHeader {
    uint64_t header_size = 0;              // N
    std::vector<SafetensorsInfo> tensors;  // sorted by data offsets (file order)
    std::map<std::string, std::string> metadata;
};

// Validates a whole file image: length prefix, UTF-8, JSON (duplicate keys, nesting), every entry, the tiling of
// the data buffer and the file size. Reads only the first 8 + N bytes; `data` may be null when size < 8.
ParsedHeader parse_safetensors(const uint8_t* data, uint64_t size, const std::string& path);

size_t utf8_invalid_at(std::string_view s);  // std::string_view::npos when `s` is valid UTF-8

}  // namespace moex::io
