// The eager pipeline (Hugging Face's reference loop on the device): route and gather on the device, read the per-expert
// row ranges back (host sync), then per hit expert two cuBLAS GEMMs (f32 accumulate), the activation, and a combine.
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/cublas.h"
#include "cuda/common/device.h"
#include "cuda/experts/pipelines.h"

namespace moex::cuda {
namespace {

// C (rows, n) f32 = A (rows, k) · W_e^T, W_e (n, k) row-major, or W_e (k, n) row-major when transposed.
// cuBLAS is column-major: C^T (n, rows) = op(W) (n, k) · A^T (k, rows).
void gemm_rows(cublasHandle_t h, DType dt, const void* A, int64_t rows, int64_t k, const void* W, int64_t n,
               bool transposed, float* C) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = cuda_data_type(dt);
    CUBLAS_CHECK(cublasGemmEx(h, transposed ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(rows), int(k), &one,
                              W, t, transposed ? int(n) : int(k), A, t, int(k), &zero, C, CUDA_R_32F, int(n),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

// One GEMM per hit expert over its rows [start[e], start[e + 1]) of A (rows, k) into C (rows, n).
void gemm_per_expert(cublasHandle_t h, DType dt, const std::vector<int32_t>& start, const char* A, int64_t k,
                     const char* W, int64_t n, bool transposed, float* C) {
    const int64_t esize = dtype_size(dt), E = int64_t(start.size()) - 1;
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = start[size_t(e)], rows = start[size_t(e) + 1] - r0;
        if (rows > 0) gemm_rows(h, dt, A + r0 * k * esize, rows, k, W + e * n * k * esize, n, transposed, C + r0 * n);
    }
}

}  // namespace

void run_eager(const ExpertsArgs& a, cudaStream_t stream) {
    const int64_t S = a.T * a.k, N = up_width(a), E = a.E, esize = dtype_size(a.dtype);
    MOEX_REQUIRE(N < (int64_t(1) << 31) && a.H < (int64_t(1) << 31) && S < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "eager: sizes past 2^31 do not fit cuBLAS int arguments");

    Workspace ws(stream);
    const RoutingBuffers rb = reserve_routing(ws, S, E, 1, int32_t(S));  // one tile per hit expert (unused here)
    const size_t x_rows = ws.reserve(size_t(S) * size_t(a.H) * esize);   // (S, H) gathered hidden states
    const size_t u_rows = ws.reserve_n<float>(S * N);                    // (S, N) f32 up projection
    const size_t h_rows = ws.reserve(size_t(S) * size_t(a.I) * esize);   // (S, I) hidden activation
    const size_t y_rows = ws.reserve_n<float>(S * a.H);                  // (S, H) f32 down projection
    ws.allocate();

    const RoutingArgs r = rb.args(ws, a.top_k_index, a.ids_i64);
    launch_routing(r, stream);
    launch_gather_rows(gather_args(a, r, ws.at<void>(x_rows), nullptr, S), stream);

    // The host sync that makes eager "eager": which experts are hit, and their row ranges.
    std::vector<int32_t> start(size_t(E) + 1);
    CUDA_CHECK(cudaMemcpyAsync(start.data(), r.expert_row_start, start.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));

    cublasHandle_t h = cublas_handle();
    CUBLAS_CHECK(cublasSetStream(h, stream));
    gemm_per_expert(h, a.dtype, start, ws.at<char>(x_rows), a.H, static_cast<const char*>(a.gate_up_proj), N,
                    a.is_transposed, ws.at<float>(u_rows));
    launch_hidden_act(
        hidden_act_args(a, r, ws.at<float>(u_rows), ws.at<void>(h_rows), S, N, a.gate_up_bias, a.has_gate), stream);
    gemm_per_expert(h, a.dtype, start, ws.at<char>(h_rows), a.I, static_cast<const char*>(a.down_proj), a.H,
                    a.is_transposed, ws.at<float>(y_rows));
    launch_combine(combine_args(a, ws.at<float>(y_rows), r.slot_row, /*weighted=*/true), stream);
}

}  // namespace moex::cuda
