// StreamGraph: record the work a callback queues on the Context's stream as a CUDA graph, replay it per call.
#include "cuda/common/check.h"
#include "cuda/model/context.h"

namespace moex::cuda::model {

StreamGraph::StreamGraph(Context& ctx, const std::function<void()>& body) : ctx_(ctx) {
    Context::Impl& s = ctx.impl();
    // Thread-local: a call that is illegal under capture fails on this thread only, and other threads' work on
    // other streams is left alone.
    CUDA_CHECK(cudaStreamBeginCapture(s.stream, cudaStreamCaptureModeThreadLocal));
    const uint64_t epoch = s.epoch;
    cudaGraph_t graph = nullptr;
    try {
        body();
    } catch (...) {
        // End the capture whatever happened, so the stream can be used again; the partial graph is discarded.
        if (cudaStreamEndCapture(s.stream, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
        (void)cudaGetLastError();
        throw;
    }
    CUDA_CHECK(cudaStreamEndCapture(s.stream, &graph));
    cudaGraphExec_t exec = nullptr;
    const cudaError_t st = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    CUDA_CHECK(st);
    MOEX_REQUIRE(s.epoch == epoch, ErrorCode::kCuda, "CUDA graph: a scratch buffer was reallocated while recording");
    exec_ = exec;
    epoch_ = epoch;
}

StreamGraph::~StreamGraph() {
    if (exec_ != nullptr) (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec_));
}

void StreamGraph::replay() {
    MOEX_REQUIRE(current(), ErrorCode::kInvalidArgument,
                 "CUDA graph: stale (a scratch buffer it uses was reallocated since it was recorded)");
    CUDA_CHECK(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec_), ctx_.impl().stream));
}

bool StreamGraph::current() const { return ctx_.impl().epoch == epoch_; }

}  // namespace moex::cuda::model
