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

}  // namespace moex::cuda
