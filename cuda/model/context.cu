// Context: the per-Ops device state (stream, cuBLASLt, grow-only scratch, pinned host word) and the plain
// synchronising copy to the host.
#include <algorithm>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/model/context.h"

namespace moex::cuda::model {
namespace {

void free_buffer(GrowBuffer& b) {
    if (b.ptr != nullptr) (void)cudaFree(b.ptr);
    b = GrowBuffer{};
}

}  // namespace

void* Context::Impl::ensure(GrowBuffer& b, size_t bytes, bool zero_fill) {
    if (bytes <= b.capacity) return b.ptr;
    // Kernels queued earlier may still read the old buffer: wait for them before freeing it.
    CUDA_CHECK(cudaStreamSynchronize(stream));
    const size_t cap = (std::max(bytes, 2 * b.capacity) + 255) / 256 * 256;
    if (b.ptr != nullptr) CUDA_CHECK(cudaFree(b.ptr));
    b = GrowBuffer{};
    CUDA_CHECK(cudaMalloc(&b.ptr, cap));
    b.capacity = cap;
    ++epoch;
    if (zero_fill) CUDA_CHECK(cudaMemsetAsync(b.ptr, 0, cap, stream));
    return b.ptr;
}

Context::Context(int device, void* stream) : impl_(std::make_unique<Impl>()) {
    Impl& s = *impl_;
    s.device = device;
    CUDA_CHECK(cudaSetDevice(device));
    s.sm_count = device_state().sm_count;
    s.stream = as_stream(stream);
    if (s.stream == nullptr) {
        // A blocking stream: it still orders against the legacy default stream (synchronous copies elsewhere), and
        // unlike that stream it can be captured into a CUDA graph.
        CUDA_CHECK(cudaStreamCreate(&s.stream));
        s.own_stream = true;
    }
    void* host = nullptr;
    try {
        CUDA_CHECK(cudaMallocHost(&host, 64));
    } catch (...) {
        if (s.own_stream) (void)cudaStreamDestroy(s.stream);
        throw;
    }
    s.host_word = static_cast<int64_t*>(host);
    try {
        void* dev = nullptr;
        CUDA_CHECK(cudaHostGetDevicePointer(&dev, host, 0));
        s.host_word_device = static_cast<int64_t*>(dev);
        s.lt = lt_create(device);
    } catch (...) {
        (void)cudaFreeHost(s.host_word);
        if (s.own_stream) (void)cudaStreamDestroy(s.stream);
        throw;
    }
}

Context::~Context() {
    Impl& s = *impl_;
    (void)cudaSetDevice(s.device);
    (void)cudaStreamSynchronize(s.stream);  // nothing in flight may use the buffers freed below
    lt_destroy(s.lt);
    for (GrowBuffer* b :
         {&s.attn_partials, &s.attn_counters, &s.argmax_partials, &s.argmax_counter, &s.ids, &s.linear_f32})
        free_buffer(*b);
    if (s.host_word != nullptr) (void)cudaFreeHost(s.host_word);
    if (s.own_stream) (void)cudaStreamDestroy(s.stream);
}

void* Context::stream() const { return impl_->stream; }
int Context::device() const { return impl_->device; }

void Context::make_current() const {
    int cur = -1;
    CUDA_CHECK(cudaGetDevice(&cur));
    if (cur != impl_->device) CUDA_CHECK(cudaSetDevice(impl_->device));
}

void Context::synchronize() const { CUDA_CHECK(cudaStreamSynchronize(impl_->stream)); }

void copy_to_host_sync(Context& ctx, const void* src, int64_t bytes, void* host) {
    if (bytes <= 0) return;
    Context::Impl& s = ctx.impl();
    CUDA_CHECK(cudaMemcpyAsync(host, src, size_t(bytes), cudaMemcpyDeviceToHost, s.stream));
    CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

}  // namespace moex::cuda::model
