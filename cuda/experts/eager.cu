// The eager pipeline (Hugging Face's reference loop on the device): route and gather on the device, read the per-expert
// row ranges back (host sync), then per hit expert two cuBLAS GEMMs (f32 accumulate), the activation, and a combine.
#include <cublas_v2.h>

#include <array>
#include <string>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/elementwise.h"
#include "cuda/experts/pipelines.h"
#include "cuda/routing/routing.h"

namespace moex::cuda {
namespace {

#define CUBLAS_CHECK(call)                                                                                  \
    do {                                                                                                    \
        const cublasStatus_t st_ = (call);                                                                  \
        if (st_ != CUBLAS_STATUS_SUCCESS)                                                                   \
            ::moex::fail(::moex::ErrorCode::kCuda, std::string(__FILE__) + ":" + std::to_string(__LINE__) + \
                                                       ": " #call ": " + cublasGetStatusString(st_));       \
    } while (0)

// One handle per (thread, device): cuBLAS handles must not be shared by concurrent host threads. Never destroyed
// (destroying from a thread-exit or static destructor can run after the CUDA runtime has shut down).
cublasHandle_t cublas_handle() {
    thread_local std::array<cublasHandle_t, 64> handles{};
    const int dev = current_device_info().id;
    if (handles[size_t(dev)] == nullptr) CUBLAS_CHECK(cublasCreate(&handles[size_t(dev)]));
    return handles[size_t(dev)];
}

cudaDataType_t cuda_type(ActDType d) {
    return d == ActDType::kBF16 ? CUDA_R_16BF : d == ActDType::kF16 ? CUDA_R_16F : CUDA_R_32F;
}

// C (rows, n) f32 = A (rows, k) · W_e^T, W_e (n, k) row-major, or W_e (k, n) row-major when transposed.
// cuBLAS is column-major: C^T (n, rows) = op(W) (n, k) · A^T (k, rows).
void gemm_rows(cublasHandle_t h, ActDType dt, const void* A, int64_t rows, int64_t k, const void* W, int64_t n,
               bool transposed, float* C) {
    const float one = 1.0f, zero = 0.0f;
    const cudaDataType_t t = cuda_type(dt);
    CUBLAS_CHECK(cublasGemmEx(h, transposed ? CUBLAS_OP_N : CUBLAS_OP_T, CUBLAS_OP_N, int(n), int(rows), int(k), &one,
                              W, t, transposed ? int(n) : int(k), A, t, int(k), &zero, C, CUDA_R_32F, int(n),
                              CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

void run_eager(const ExpertsArgs& x, cudaStream_t stream) {
    const int64_t S = x.T * x.k, N = up_width(x), E = x.E;
    const int esize = act_size(x.dtype);
    MOEX_REQUIRE(N < (int64_t(1) << 31) && x.H < (int64_t(1) << 31) && S < (int64_t(1) << 31), ErrorCode::kUnsupported,
                 "eager: sizes past 2^31 do not fit cuBLAS int arguments");
    const int32_t tile_rows = int32_t(S);  // one tile per hit expert: tiles are unused here
    const int64_t tiles = routing_tiles_bound(S, E, 1, tile_rows);

    Workspace ws(stream);
    const size_t o_count = ws.reserve_n<int32_t>(E), o_start = ws.reserve_n<int32_t>(E + 1);
    const size_t o_te = ws.reserve_n<int32_t>(tiles), o_nt = ws.reserve_n<int32_t>(1);
    const size_t o_sr = ws.reserve_n<int32_t>(S), o_rs = ws.reserve_n<int32_t>(S);
    const size_t o_scr = ws.reserve_n<int32_t>(routing_scratch_ints(S, E));
    const size_t o_a = ws.reserve(size_t(S) * size_t(x.H) * esize);
    const size_t o_u = ws.reserve_n<float>(S * N);
    const size_t o_h = ws.reserve(size_t(S) * size_t(x.I) * esize);
    const size_t o_y = ws.reserve_n<float>(S * x.H);
    ws.allocate();

    RoutingArgs r{};
    r.ids = x.ids, r.ids_i64 = x.ids_i64, r.S = S, r.E = E, r.align = 1, r.tile_rows = tile_rows;
    r.expert_count = ws.at<int32_t>(o_count), r.expert_row_start = ws.at<int32_t>(o_start);
    r.tile_expert = ws.at<int32_t>(o_te), r.tile_row0 = nullptr, r.tile_nrows = nullptr;
    r.num_tiles = ws.at<int32_t>(o_nt), r.slot_row = ws.at<int32_t>(o_sr), r.row_slot = ws.at<int32_t>(o_rs);
    r.zero = nullptr, r.n_zero = 0, r.scratch = ws.at<int32_t>(o_scr);
    launch_routing(r, stream);

    GatherArgs g{};
    g.x = x.x, g.A = ws.at<void>(o_a), g.row_scale = nullptr, g.topk_weights = x.topk_weights;
    g.row_slot = r.row_slot, g.total_rows = r.expert_row_start + E;
    g.rows_bound = S, g.H = x.H, g.k = x.k, g.dtype = x.dtype, g.weights_f32 = x.weights_f32;
    launch_gather_rows(g, stream);

    // The host sync that makes eager "eager": which experts are hit, and their row ranges.
    std::vector<int32_t> start(size_t(E) + 1);
    CUDA_CHECK(cudaMemcpyAsync(start.data(), r.expert_row_start, start.size() * sizeof(int32_t), cudaMemcpyDeviceToHost,
                               stream));
    CUDA_CHECK(cudaStreamSynchronize(stream));

    cublasHandle_t h = cublas_handle();
    CUBLAS_CHECK(cublasSetStream(h, stream));
    const char* A = ws.at<char>(o_a);
    const char* Wu = static_cast<const char*>(x.w_up);
    const char* Wd = static_cast<const char*>(x.w_down);
    float* U = ws.at<float>(o_u);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = start[size_t(e)], rows = start[size_t(e) + 1] - r0;
        if (rows == 0) continue;
        gemm_rows(h, x.dtype, A + r0 * x.H * esize, rows, x.H, Wu + e * N * x.H * esize, N, x.is_transposed,
                  U + r0 * N);
    }

    HiddenActArgs ha{};
    ha.U = U, ha.h = ws.at<void>(o_h), ha.bias = x.b_up, ha.row_slot = r.row_slot, ha.ids = x.ids;
    ha.total_rows = r.expert_row_start + E, ha.rows_bound = S, ha.N = N, ha.I = x.I, ha.E = E;
    ha.dtype = x.dtype, ha.ids_i64 = x.ids_i64, ha.has_gate = x.has_gate, ha.concatenated = x.is_concatenated;
    ha.activation = x.activation, ha.gate_kind = x.gate_kind;
    ha.swiglu_alpha = x.swiglu_alpha, ha.swiglu_limit = x.swiglu_limit;
    launch_hidden_act(ha, stream);

    const char* Hb = ws.at<char>(o_h);
    float* Y = ws.at<float>(o_y);
    for (int64_t e = 0; e < E; ++e) {
        const int64_t r0 = start[size_t(e)], rows = start[size_t(e) + 1] - r0;
        if (rows == 0) continue;
        gemm_rows(h, x.dtype, Hb + r0 * x.I * esize, rows, x.I, Wd + e * x.H * x.I * esize, x.H, x.is_transposed,
                  Y + r0 * x.H);
    }

    CombineArgs c{};
    c.Y = Y, c.slot_row = r.slot_row, c.ids = x.ids, c.bias = x.b_down, c.weights = x.topk_weights;
    c.out = x.out, c.T = x.T, c.H = x.H, c.k = x.k, c.E = E, c.dtype = x.dtype, c.ids_i64 = x.ids_i64;
    c.weights_f32 = x.weights_f32;
    launch_combine(c, stream);
}

}  // namespace moex::cuda
