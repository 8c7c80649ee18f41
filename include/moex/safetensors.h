// safetensors files: a validating, memory-mapped reader (every check of the reference parser, plus explicit
// duplicate-key errors) and an atomic writer whose layout matches the reference writer byte for byte.
// Errors are moex::Error (kFormat, kOverflow, kIo, kNotFound, kInvalidArgument) whose message starts with the path.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "moex/tensor.h"

namespace moex {

inline constexpr uint64_t kSafetensorsMaxHeaderBytes = 100'000'000;        // the reference reader's and writer's limit
inline constexpr uint64_t kSafetensorsMaxValue = (uint64_t(1) << 48) - 1;  // shape and offset values (JSON schema)

// ---- dtype names ("BF16", "F8_E4M3", ...) ----
int safetensors_dtype_bits(std::string_view name);                   // 0 for an unknown name; F4 = 4, F6_* = 6
std::optional<DType> dtype_from_safetensors(std::string_view name);  // nullopt: unknown, or readable as bytes only
std::string_view safetensors_dtype_name(DType dtype);                // kUE8M0 -> "F8_E8M0", kFP8E4M3 -> "F8_E4M3"
std::string safetensors_dtype_names();                               // "BOOL, F4, F6_E2M3, ..." for messages

// One tensor entry of a header. Byte offsets are relative to the data buffer that follows the header.
struct SafetensorsInfo {
    std::string name;
    std::string dtype;           // the safetensors name, e.g. "BF16"
    std::vector<int64_t> shape;  // logical elements; empty = 0-rank scalar
    uint64_t begin = 0;          // first byte
    uint64_t end = 0;            // one past the last byte
    uint64_t nbytes() const { return end - begin; }
};

// A validated safetensors file. open() maps the file read-only; views into it must never be written through.
// Move-only; views and byte spans stay valid while the object (or what it was moved into) lives.
class SafetensorsFile {
   public:
    // Maps and validates `path`. Missing file: kNotFound; OS failure: kIo; malformed: kFormat / kOverflow.
    static SafetensorsFile open(const std::string& path);
    // Validates a file image already in memory (not copied: `data` must outlive the result). `label` stands for the
    // path in error messages. Used by the fuzzer and by callers that hold a file in memory.
    static SafetensorsFile from_memory(const void* data, size_t size, std::string label = "<memory>");

    SafetensorsFile(SafetensorsFile&&) noexcept;
    SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
    ~SafetensorsFile();

    const std::string& path() const;
    uint64_t file_size() const;
    uint64_t header_size() const;                                // N: the JSON header's length in bytes
    const std::vector<std::string>& names() const;               // in file order (ascending data offsets)
    const std::map<std::string, std::string>& metadata() const;  // `__metadata__`, empty when absent
    bool contains(std::string_view name) const;
    // kNotFound "PATH: no tensor `x`; it has: a, b, c, ... (N more)"
    const SafetensorsInfo& info(std::string_view name) const;
    std::span<const uint8_t> bytes(std::string_view name) const;  // raw bytes of any dtype, never copied
    // A contiguous host view for dtypes with a moex DType (BF16 F16 F32 F64 F8_E4M3 F8_E8M0 I32 I64 U8) and rank
    // <= 4 (else kUnsupported). Zero-copy when the bytes are aligned to the element size; a legacy unaligned file
    // gets one aligned copy per tensor, kept by this object.
    TensorView view(std::string_view name) const;

   private:
    struct Impl;
    explicit SafetensorsFile(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// ---- writing ----
struct NamedTensor {
    std::string name;
    TensorView view;  // host, contiguous
};

// A tensor given as raw bytes, for dtypes moex has no DType for (BOOL, I8, F4, ...).
struct SafetensorsEntry {
    std::string name;
    std::string dtype;  // safetensors dtype name
    std::vector<int64_t> shape;
    std::span<const uint8_t> bytes;  // row-major, little-endian; size must be prod(shape) * bits / 8
};

SafetensorsEntry safetensors_entry(const NamedTensor& tensor);  // checks host, contiguous, rank

// The file image: header padded with spaces so that 8 + N is a multiple of 8, tensors sorted by descending dtype
// (hence alignment) then name, as the reference writer does. kInvalidArgument on a duplicate or reserved name,
// a size mismatch, a header over kSafetensorsMaxHeaderBytes or a name that is not UTF-8.
std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                           const std::map<std::string, std::string>& metadata = {});
// Writes the same image to `path` through a temporary file in the same folder, then renames it (kIo on failure).
// `path` must be new or a regular file (a symlink to one: that file is replaced); a FIFO, device or directory is
// refused (kIo) before anything is written.
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata = {});
void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace moex
