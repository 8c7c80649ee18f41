// capture_graph (capture.h).
#include "cuda/common/capture.h"
#include "cuda/common/check.h"

namespace moex::cuda {

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& body) {
    CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (...) {
        if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);  // the executable graph keeps what it needs
    CUDA_CHECK(st);
    return exec;
}

}  // namespace moex::cuda
