// Internal device helpers shared by the launchers: the per-device state (facts, readiness, the workspace pool),
// the stream cast, and the stream-ordered Workspace that every launcher takes its scratch buffers from (no
// cudaMalloc on the hot path).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace moex::cuda {

inline constexpr int kMaxDevices = 64;

// What moex keeps per CUDA device, filled once on first use (cheap afterwards) and never destroyed.
struct DeviceState {
    int id = 0;
    int sm_count = 0;
    int cc_major = 0, cc_minor = 0;
    size_t smem_optin = 0;         // max dynamic shared memory per block after opt-in
    bool sm90 = false;             // compute capability 9.0 exactly: the sm_90a code runs nowhere else
    bool ready = false;            // moex's kernels load and run here
    std::string why_not_ready;     // when !ready
    cudaMemPool_t pool = nullptr;  // moex's own stream-ordered pool (release threshold: never)
};

const DeviceState& device_state();  // of the current device; throws Error(kCuda) when there is none
int current_device();               // cudaGetDevice, checked against kMaxDevices

inline cudaStream_t as_stream(void* s) { return static_cast<cudaStream_t>(s); }

// Lets `kernel` launch with `bytes` of dynamic shared memory on the current device: a block may hold 48 KiB of static
// plus dynamic shared memory unless the kernel's dynamic limit is raised (cudaFuncAttributeMaxDynamicSharedMemorySize),
// so the limit is raised where the kernel's static shared memory plus `bytes` pass 48 KiB. The kernel's static size
// and the limit set are kept per (kernel, device): after the first call no CUDA call is made (none under a later
// stream capture). Throws when the device cannot give that much.
void set_smem_limit(const void* kernel, size_t bytes);
template <class Kernel>
void allow_dynamic_smem(Kernel* kernel, size_t bytes) {
    if (bytes > 0) set_smem_limit(reinterpret_cast<const void*>(kernel), bytes);
}

// Programmatic dependent launch (sm_90) for the decode chain's kernels (pdl.cuh): each is scheduled while the kernel
// before it drains and waits in griddepcontrol.wait. MOEX_PDL=0 turns it off.
bool pdl_enabled();

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
inline int64_t round_up(int64_t a, int64_t b) { return ceil_div(a, b) * b; }

// Scratch memory for one launcher call, allocated in ONE piece from moex's stream-ordered pool.
//
// Why a stream-ordered pool (cudaMallocFromPoolAsync / cudaFreeAsync on our own cudaMemPool with the release
// threshold at UINT64_MAX) rather than a hand-written caching allocator:
//  - caching: with the threshold at max the pool never returns memory to the driver, so after the first call of a
//    given size an allocation is a host-side bookkeeping operation (~1 µs), not a cudaMalloc;
//  - stream order: a free is ordered after the kernels that use the buffer on that stream, and the pool reuses it
//    for later work on any stream only once those kernels are done (the driver inserts the dependency), so there is
//    no "free while in flight" bug and no per-stream bucket bookkeeping to get wrong;
//  - capturable: under stream capture both calls become graph memory nodes; the graph then owns the memory, so a
//    captured call stays valid for every replay, independent of what eager calls do in between.
// Our own pool (not the device default) so that raising the release threshold does not change anyone else's pool.
class Workspace {
   public:
    explicit Workspace(cudaStream_t stream) : stream_(stream) {}
    ~Workspace();
    Workspace(const Workspace&) = delete;
    Workspace& operator=(const Workspace&) = delete;

    // Reserves `bytes` (256-byte aligned) and returns its offset; call allocate() once after all reserves.
    size_t reserve(size_t bytes);
    template <class T>
    size_t reserve_n(int64_t count) {
        return reserve(size_t(count) * sizeof(T));
    }
    void allocate();
    template <class T>
    T* at(size_t offset) const {
        return reinterpret_cast<T*>(base_ + offset);
    }

   private:
    cudaStream_t stream_;
    size_t size_ = 0;
    char* base_ = nullptr;
};

}  // namespace moex::cuda
