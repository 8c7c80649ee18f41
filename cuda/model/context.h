// Context::Impl, shared by the model launchers: the stream, device facts, grow-only device scratch, the pinned host
// word that the argmax writes and host-returning ops read, and the cuBLASLt state (its type lives in linear.cu).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "cuda/model/model_ops.h"

namespace moex::cuda::model {

struct LtState;                  // linear.cu
LtState* lt_create(int device);  // cuBLASLt handle + workspace
void lt_destroy(LtState* s);     // never throws

// A device buffer that only grows. ensure() reallocates when `bytes` exceeds the capacity: it synchronises the stream
// first (kernels in flight may still use the old buffer), so it must not run under stream capture; zero_fill clears
// the new buffer (stream-ordered) for buffers of self-resetting counters.
struct GrowBuffer {
    void* ptr = nullptr;
    size_t capacity = 0;
};

struct Context::Impl {
    int device = 0;
    cudaStream_t stream = nullptr;  // the caller's, or (caller passed none) one of its own: graphs need one
    bool own_stream = false;
    int sm_count = 0;
    LtState* lt = nullptr;
    GrowBuffer attn_partials;             // decode attention: per-split (max, sum) and unnormalised outputs, f32
    GrowBuffer attn_counters;             // decode attention: one arrival counter per kv head, zero between launches
    GrowBuffer argmax_partials;           // argmax: per-block (value, index), then the result index
    GrowBuffer argmax_counter;            // argmax: arrival counter, zero between launches
    GrowBuffer ids;                       // embed: token ids of long prompts
    GrowBuffer linear_f32;                // linear: f32 result before a separate bias epilogue (rare fallback)
    int64_t* host_word = nullptr;         // pinned
    int64_t* host_word_device = nullptr;  // its address in kernels (the argmax writes it)
    uint64_t epoch = 0;                   // +1 whenever ensure() reallocates: graphs recorded before are stale

    void* ensure(GrowBuffer& b, size_t bytes, bool zero_fill = false);
};

}  // namespace moex::cuda::model
