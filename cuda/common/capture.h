// Capturing the work that a callback queues on a stream into an instantiated CUDA graph: shared by the benchmarks'
// graph timing (timing.cu) and the model's recorded decode step (cuda/model/graph.cu).
#pragma once

#include <cuda_runtime.h>

#include <functional>

namespace moex::cuda {

// Captures (thread-local mode: other threads' work on other streams is left alone) what `body` queues on `stream`
// and instantiates it; the caller owns the result (cudaGraphExecDestroy). An exception in body ends the capture,
// discards the partial graph, clears the error it left and propagates, so the stream can be used again. Throws
// moex::Error(kCuda) on CUDA errors.
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void()>& body);

}  // namespace moex::cuda
