// Widening of the hidden states and the slot-order weighted combine with the final rounding.
#include "src/cpu/combine.h"

namespace moex::cpu {
namespace {

constexpr int64_t kSeg = 1024;  // H columns per combine task: 4 KiB of f32 accumulators on the stack

void store_row(const float* acc, int64_t n, DType dt, void* dst) {
    if (dt == DType::kF32) {
        float* d = static_cast<float*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = acc[i];
    } else if (dt == DType::kBF16) {
        uint16_t* d = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(acc[i]);
    } else {
        uint16_t* d = static_cast<uint16_t*>(dst);
        for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(acc[i]);
    }
}

}  // namespace

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
        store_row(acc, n, cp.dtype, static_cast<char*>(out) + ((t0 + t) * cp.H + c0) * es);
    });
}

}  // namespace moex::cpu
