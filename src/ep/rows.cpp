// Host implementations of the EP row operations, and the dispatch to the CUDA ones (cuda/ep/rows.cu).
#include "src/ep/rows.h"

#include <cstdlib>
#include <cstring>
#include <vector>

#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#include "cuda/ep/rows.h"
#endif

namespace moex::ep {
namespace {

#if !MOEX_WITH_CUDA
[[noreturn]] void no_cuda() { fail(ErrorCode::kUnsupported, "ep: this build of moex has no CUDA support"); }
#endif

float load(const void* y, int64_t i, DType dt) {
    if (dt == DType::kF32) return static_cast<const float*>(y)[i];
    const uint16_t h = static_cast<const uint16_t*>(y)[i];
    return dt == DType::kBF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

void store(void* out, int64_t i, float v, DType dt) {
    if (dt == DType::kF32)
        static_cast<float*>(out)[i] = v;
    else
        static_cast<uint16_t*>(out)[i] = dt == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
}

}  // namespace

void gather_rows(Device device, void* dst, const void* src, const int64_t* idx, int64_t n, int64_t row_bytes,
                 void* stream) {
    if (device == Device::kCUDA) {
#if MOEX_WITH_CUDA
        return cuda::ep::gather_rows(dst, src, idx, n, row_bytes, stream);
#else
        no_cuda();
#endif
    }
    (void)stream;
    for (int64_t i = 0; i < n; ++i)
        std::memcpy(static_cast<char*>(dst) + i * row_bytes, static_cast<const char*>(src) + idx[i] * row_bytes,
                    size_t(row_bytes));
}

void combine_rows(Device device, void* out, const void* y, const int64_t* rows, const float* w, int64_t T, int64_t M,
                  int64_t H, DType dtype, void* stream) {
    MOEX_REQUIRE(is_float_activation(dtype), ErrorCode::kInvalidArgument, "ep: activations must be bf16, f16 or f32");
    if (device == Device::kCUDA) {
#if MOEX_WITH_CUDA
        return cuda::ep::combine_rows(out, y, rows, w, T, M, H, dtype, stream);
#else
        no_cuda();
#endif
    }
    (void)stream;
    std::vector<float> acc(static_cast<size_t>(H));
    for (int64_t t = 0; t < T; ++t) {
        for (float& a : acc) a = 0.0f;
        for (int64_t m = 0; m < M; ++m) {
            const int64_t row = rows[t * M + m];
            if (row < 0) continue;
            const float wm = w != nullptr ? w[t * M + m] : 1.0f;
            // The same expression as src/cpu/combine.cpp (built without FMA): single-rank bytes for f32.
            for (int64_t h = 0; h < H; ++h) acc[size_t(h)] += wm * load(y, row * H + h, dtype);
        }
        for (int64_t h = 0; h < H; ++h) store(out, t * H + h, acc[size_t(h)], dtype);
    }
}

void copy_bytes(Device device, void* dst, const void* src, int64_t bytes, bool to_device, void* stream) {
    if (bytes == 0) return;
    if (device == Device::kCUDA) {
#if MOEX_WITH_CUDA
        return cuda::copy_async(dst, src, size_t(bytes), to_device, stream);
#else
        (void)to_device, (void)stream;
        no_cuda();
#endif
    }
    std::memcpy(dst, src, size_t(bytes));
}

void sync_stream(Device device, void* stream) {
#if MOEX_WITH_CUDA
    if (device == Device::kCUDA) cuda::stream_synchronize(stream);
#else
    (void)device, (void)stream;
#endif
}

void* device_malloc(Device device, int64_t bytes) {
    if (device == Device::kCUDA) {
#if MOEX_WITH_CUDA
        return cuda::device_alloc(size_t(bytes > 0 ? bytes : 1));
#else
        no_cuda();
#endif
    }
    void* p = std::aligned_alloc(64, size_t((bytes + 63) / 64 * 64 + 64));
    MOEX_REQUIRE(p != nullptr, ErrorCode::kOverflow,
                 "ep: host allocation of " + std::to_string(bytes) + " bytes failed");
    return p;
}

void device_release(Device device, void* p) {
    if (p == nullptr) return;
#if MOEX_WITH_CUDA
    if (device == Device::kCUDA) return cuda::device_free(p);
#endif
    (void)device;
    std::free(p);
}

}  // namespace moex::ep
