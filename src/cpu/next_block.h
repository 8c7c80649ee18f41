// NextBlock: software prefetch of a GEMM's next B block into L2, shared by the packed drivers (gemm.cpp, and the
// AMX one in gemm_amx.cpp).
#pragma once

#include <cstdint>

#include "moex/dtype.h"
#include "src/cpu/problem.h"

namespace moex::cpu {
// Internal linkage: the files that include this are compiled with different ISA flags (gemm.cpp plain, gemm_amx.cpp
// with AVX-512 and AMX), and one inline copy picked by the linker for all of them could run AVX-512 on an AVX2 CPU.
namespace {

// Software prefetch of B's next k block into L2, a slice per microkernel call. Packing reads 512-byte runs of bf16:
// far too short for the hardware prefetcher, which leaves packing waiting on DRAM.
class NextBlock {
   public:
    NextBlock(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, int64_t calls) {
        const int64_t es = dtype_size(b.dtype);
        runs_ = b.transposed ? kc : n;  // storage rows touched, each run_lines_ cache lines long
        run_lines_ = ((b.transposed ? n : kc) * es + 63) / 64;
        per_call_ = (runs_ * run_lines_ + calls - 1) / (calls > 0 ? calls : 1);
        stride_ = b.ld * es;
        base_ = static_cast<const char*>(b.data) + (b.transposed ? k0 * b.ld : k0) * es;
    }
    void step() {
        for (int64_t i = 0; i < per_call_ && run_ < runs_; ++i) {
            __builtin_prefetch(base_ + run_ * stride_ + line_ * 64, 0, 2);
            if (++line_ == run_lines_) line_ = 0, ++run_;
        }
    }

   private:
    const char* base_ = nullptr;
    int64_t stride_ = 0, runs_ = 0, run_lines_ = 0, per_call_ = 0, run_ = 0, line_ = 0;
};

}  // namespace
}  // namespace moex::cpu
