// moex::Error: the one error type of the public API. Every bad input raises it with a message that names
// what was wrong (tensor, dimension, value) so that a caller can print it as a one-line reason.
#pragma once

#include <stdexcept>
#include <string>

namespace moex {

enum class ErrorCode {
    kInvalidArgument,  // a shape, dtype, layout or value that the contract forbids
    kUnsupported,      // a valid request this backend or build cannot serve (says why)
    kNotFound,         // unknown backend, missing tensor or file
    kFormat,           // malformed file (safetensors header, offsets, sizes)
    kOverflow,         // size arithmetic that does not fit in 64 bits
    kIo,               // the operating system refused a read, write or map
    kCuda,             // a CUDA call failed
    kNonFinite,        // the finite check (MOEX_CHECK_FINITE) found a NaN or an infinity in an experts output
};

class Error : public std::runtime_error {
   public:
    Error(ErrorCode code, const std::string& message) : std::runtime_error(message), code_(code) {}
    ErrorCode code() const noexcept { return code_; }

   private:
    ErrorCode code_;
};

[[noreturn]] inline void fail(ErrorCode code, const std::string& message) { throw Error(code, message); }

// MOEX_REQUIRE(cond, code, message): raise moex::Error(code, message) unless cond holds.
#define MOEX_REQUIRE(cond, code, message)             \
    do {                                              \
        if (!(cond)) ::moex::fail((code), (message)); \
    } while (0)

}  // namespace moex
