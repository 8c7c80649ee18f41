// Widening of the hidden states, the slot-order weighted combine and the rounding of f32 rows to the output dtype.
#include "src/cpu/combine.h"

#include <cstring>

#include "src/cpu/kernels.h"

namespace moex::cpu {
namespace {

constexpr int64_t kSeg = 1024;  // H columns per combine task: 4 KiB of f32 accumulators on the stack

}  // namespace

void from_f32(const float* src, int64_t n, DType dt, void* dst) {
    if (n <= 0) return;
    if (dt == DType::kF32) {
        std::memcpy(dst, src, size_t(n) * 4);
    } else if (dt == DType::kBF16 && kernels().to_bf16 != nullptr) {
        kernels().to_bf16(src, n, static_cast<uint16_t*>(dst));
    } else {
        auto* d = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = dt == DType::kBF16 ? f32_to_bf16(src[i]) : f32_to_f16(src[i]);
    }
}

const float* x_as_f32(const CpuProblem& cp, int64_t t0, int64_t t1, FloatBuffer& buf, int threads) {
    if (cp.dtype == DType::kF32) return static_cast<const float*>(cp.x) + t0 * cp.H;
    float* x = buf.get((t1 - t0) * cp.H);
    const int64_t es = dtype_size(cp.dtype);
    parallel_for(t1 - t0, (t1 - t0) * cp.H >= (1 << 16) ? threads : 1, [&](int64_t t) {
        to_f32(static_cast<const char*>(cp.x) + (t0 + t) * cp.H * es, cp.dtype, cp.H, x + t * cp.H);
    });
    return x;
}

void combine(const CpuProblem& cp, const Routing& r, int64_t t0, int64_t t1, const float* y, void* out, int threads) {
    const int64_t segs = (cp.H + kSeg - 1) / kSeg, es = dtype_size(cp.dtype);
    parallel_for((t1 - t0) * segs, threads, [&](int64_t task) {
        const int64_t t = task / segs, c0 = (task % segs) * kSeg, n = cp.H - c0 < kSeg ? cp.H - c0 : kSeg;
        float acc[kSeg];
        for (int64_t i = 0; i < n; ++i) acc[i] = 0.0f;
        for (int64_t j = 0; j < cp.k; ++j) {
            const int64_t row = r.slot_row[size_t(t * cp.k + j)];
            if (row < 0) continue;  // sentinel: exactly zero, its weight is never read
            const float w = cp.route_weight(t0 + t, j);
            const float* yr = y + row * cp.H + c0;
            for (int64_t i = 0; i < n; ++i) acc[i] += w * yr[i];
        }
        from_f32(acc, n, cp.dtype, static_cast<char*>(out) + ((t0 + t) * cp.H + c0) * es);
    });
}

}  // namespace moex::cpu
