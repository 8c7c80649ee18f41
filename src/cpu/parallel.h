// parallel_for over independent tasks on a small thread pool (parallel.cpp), and per-thread scratch buffers.
// Determinism rests on the tasks: each writes its own outputs with an order fixed by the task, never by the thread.
#pragma once

#include <cstdint>
#include <memory>
#include <type_traits>

namespace moex::cpu {

// Runs call(ctx, i) for i in [0, n) on the calling thread and up to threads - 1 pool workers, tasks claimed one at a
// time in index order; returns when every task has finished and rethrows the first exception of a task.
void run_tasks(int64_t n, int threads, void (*call)(void* ctx, int64_t i), void* ctx);

template <class F>
void parallel_for(int64_t n, int threads, F&& f) {
    if (threads <= 1 || n <= 1) {
        for (int64_t i = 0; i < n; ++i) f(i);
        return;
    }
    using Fn = std::remove_reference_t<F>;
    run_tasks(
        n, threads, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, &f);
}

// A grow-only 64-byte aligned float buffer; contents are not preserved across growth and never initialised.
class FloatBuffer {
   public:
    float* get(int64_t n);

   private:
    struct Free {
        void operator()(float* p) const;
    };
    std::unique_ptr<float, Free> data_;
    int64_t size_ = 0;
};

// Per-thread scratch: `slot` 0..7 are independent buffers (0 B panels, or A's rows packed for the AMX weight tiles or
// for the vdpbf16ps quantized GEMM and the bf16 tile in place, 1 up tile, 2-3 gate epilogue, 4-5 dequantized weights of
// quantized experts (on AMX: 4 the weight tiles' partial sums; 5 the quantized GEMMs' decoded weight rows, AMX's or
// vdpbf16ps's; 4 stream_quant's permuted rows), 6 A rows as bf16 (the bf16 tile, a call's own rows for AMX or
// stream_quant), scaled for the AVX2 FP8 GEMV or as the AVX2 FP4 GEMV's int16 planes, 7 group scales of the AVX2 and
// AVX-512 quantized GEMVs or the quantized GEMMs' weight scales).
float* thread_scratch(int slot, int64_t n);

}  // namespace moex::cpu
