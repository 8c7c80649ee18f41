// CUDA side of the EP row operations (cuda/ep/rows.h): a row gather by index and the fixed-order combine.
// One CTA per output row; 16-byte vector moves where the row size allows.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

#include "cuda/common/check.h"
#include "cuda/ep/rows.h"

namespace moex::cuda::ep {
namespace {

// dst row i = src row idx[i]; V bytes per move (16 when the row size and pointers allow, else 1).
template <class V>
__global__ void gather_kernel(V* dst, const V* src, const int64_t* idx, int64_t words) {
    const int64_t i = blockIdx.x;
    const V* s = src + idx[i] * words;
    V* d = dst + i * words;
    for (int64_t c = threadIdx.x; c < words; c += blockDim.x) d[c] = s[c];
}

__device__ float load(const void* y, int64_t i, DType dt) {
    if (dt == DType::kF32) return static_cast<const float*>(y)[i];
    if (dt == DType::kBF16) return __bfloat162float(static_cast<const __nv_bfloat16*>(y)[i]);
    return __half2float(static_cast<const __half*>(y)[i]);
}

__device__ void store(void* out, int64_t i, float v, DType dt) {
    if (dt == DType::kF32)
        static_cast<float*>(out)[i] = v;
    else if (dt == DType::kBF16)
        static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
    else
        static_cast<__half*>(out)[i] = __float2half_rn(v);
}

// grid (T, column blocks): out[t] = sum_m w[t,m] * y[rows[t,m]] in m order, fma as cuda/experts' combine does.
__global__ void combine_kernel(void* out, const void* y, const int64_t* rows, const float* w, int64_t M, int64_t H,
                               DType dt) {
    const int64_t t = blockIdx.x;
    const int64_t h = int64_t(blockIdx.y) * blockDim.x + threadIdx.x;
    if (h >= H) return;
    float acc = 0.0f;
    for (int64_t m = 0; m < M; ++m) {
        const int64_t row = rows[t * M + m];
        if (row < 0) continue;
        acc = fmaf(load(y, row * H + h, dt), w != nullptr ? w[t * M + m] : 1.0f, acc);
    }
    store(out, t * H + h, acc, dt);
}

}  // namespace

void gather_rows(void* dst, const void* src, const int64_t* idx, int64_t n, int64_t row_bytes, void* stream) {
    if (n == 0 || row_bytes == 0) return;
    auto s = static_cast<cudaStream_t>(stream);
    const bool wide =
        row_bytes % 16 == 0 && reinterpret_cast<uintptr_t>(dst) % 16 == 0 && reinterpret_cast<uintptr_t>(src) % 16 == 0;
    // Grid x is limited to 2^31 - 1 rows; EP calls move at most a few million rows.
    if (wide)
        gather_kernel<<<unsigned(n), 256, 0, s>>>(static_cast<uint4*>(dst), static_cast<const uint4*>(src), idx,
                                                  row_bytes / 16);
    else
        gather_kernel<<<unsigned(n), 256, 0, s>>>(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), idx,
                                                  row_bytes);
    MOEX_LAUNCH_CHECK();
}

void combine_rows(void* out, const void* y, const int64_t* rows, const float* w, int64_t T, int64_t M, int64_t H,
                  DType dtype, void* stream) {
    if (T == 0 || H == 0) return;
    const dim3 grid(unsigned(T), unsigned((H + 255) / 256));
    combine_kernel<<<grid, 256, 0, static_cast<cudaStream_t>(stream)>>>(out, y, rows, w, M, H, dtype);
    MOEX_LAUNCH_CHECK();
}

}  // namespace moex::cuda::ep
