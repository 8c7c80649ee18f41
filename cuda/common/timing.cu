// CUDA-event timing for the benchmarks (cuda/common/timing.h): plain calls or replays of one captured graph.
#include <algorithm>
#include <vector>

#include "cuda/common/capture.h"
#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/timing.h"

namespace moex::cuda {

double time_us(void (*fn)(void* ctx, void* stream), void* ctx, void* stream, int warmup, int reps, bool graph) {
    MOEX_REQUIRE(fn != nullptr && reps > 0 && warmup >= 0, ErrorCode::kInvalidArgument, "time_us: bad arguments");
    cudaStream_t s = as_stream(stream);
    cudaStream_t own = nullptr;
    if (graph && s == nullptr) {  // the legacy default stream cannot be captured: use a private stream
        CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
        s = own;
    }
    cudaGraphExec_t exec = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    std::vector<float> ms(size_t(reps), 0.0f);
    auto cleanup = [&] {
        if (exec) (void)cudaGraphExecDestroy(exec);
        if (start) (void)cudaEventDestroy(start);
        if (stop) (void)cudaEventDestroy(stop);
        if (own) (void)cudaStreamDestroy(own);
    };
    try {
        CUDA_CHECK(cudaEventCreate(&start));
        CUDA_CHECK(cudaEventCreate(&stop));
        if (graph) {
            fn(ctx, s);  // one eager call first: lazy initialisation (pools, attributes) stays out of the graph
            CUDA_CHECK(cudaStreamSynchronize(s));
            exec = capture_graph(s, [&] { fn(ctx, s); });
        }
        auto once = [&] {
            if (graph) {
                CUDA_CHECK(cudaGraphLaunch(exec, s));
            } else {
                fn(ctx, s);
            }
        };
        for (int i = 0; i < warmup; ++i) once();
        CUDA_CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < reps; ++i) {
            CUDA_CHECK(cudaEventRecord(start, s));
            once();
            CUDA_CHECK(cudaEventRecord(stop, s));
            CUDA_CHECK(cudaEventSynchronize(stop));
            CUDA_CHECK(cudaEventElapsedTime(&ms[size_t(i)], start, stop));
        }
    } catch (...) {
        cleanup();
        throw;
    }
    cleanup();
    std::sort(ms.begin(), ms.end());
    const size_t n = ms.size();
    const double med = n % 2 ? ms[n / 2] : 0.5 * (double(ms[n / 2 - 1]) + double(ms[n / 2]));
    return med * 1000.0;
}

}  // namespace moex::cuda
