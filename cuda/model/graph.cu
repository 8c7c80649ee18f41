// StreamGraph: record the work a callback queues on the Context's stream as a CUDA graph, replay it per call.
#include "cuda/common/capture.h"
#include "cuda/common/check.h"
#include "cuda/model/context.h"

namespace moex::cuda::model {

StreamGraph::StreamGraph(Context& ctx, const std::function<void()>& body) : ctx_(ctx) {
    Context::Impl& s = ctx.impl();
    const uint64_t epoch = s.epoch;
    cudaGraphExec_t exec = capture_graph(s.stream, body);
    if (s.epoch != epoch) {  // the graph may point into a freed buffer: never keep it
        (void)cudaGraphExecDestroy(exec);
        fail(ErrorCode::kCuda, "CUDA graph: a scratch buffer was reallocated while recording");
    }
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
