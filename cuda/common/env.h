// The environment switches of the CUDA side (A/B timing and tuning knobs, documented where each is read).
#pragma once

#include <cstdlib>
#include <cstring>

namespace moex::cuda {

// Whether the environment variable `name` is set to exactly `value`.
inline bool env_is(const char* name, const char* value) {
    const char* env = std::getenv(name);
    return env != nullptr && std::strcmp(env, value) == 0;
}

// The environment variable `name` as a whole decimal number in [lo, hi]; `fallback` when unset or anything else.
inline int env_int_in(const char* name, int lo, int hi, int fallback) {
    const char* env = std::getenv(name);
    if (env == nullptr || *env == 0) return fallback;
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    return *end == 0 && v >= lo && v <= hi ? static_cast<int>(v) : fallback;
}

}  // namespace moex::cuda
