// Pointer alignment tests for the kernel choosers (host code; vector and TMA paths need 16-byte aligned rows).
#pragma once

#include <cstddef>
#include <cstdint>

namespace moex::cuda {

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }
inline bool is_aligned16(const void* p) { return is_aligned(p, 16); }

}  // namespace moex::cuda
