// The per-device state (facts, readiness, the workspace pool), device_ready, the shared-memory opt-in, and the
// Workspace. Everything here is off the hot path except Workspace, which is one pool allocation per launcher call.
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/common/env.h"
#include "cuda/launch.h"

namespace moex::cuda {
namespace {

__global__ void probe_kernel(int* p) {
    if (p != nullptr) *p = 0;
}

// One pool per device, created once, never destroyed (the driver reclaims it at exit; destroying it from a static
// destructor could run after the CUDA runtime is gone).
cudaMemPool_t make_pool(int dev) {
    cudaMemPoolProps props{};
    props.allocType = cudaMemAllocationTypePinned;
    props.handleTypes = cudaMemHandleTypeNone;
    props.location.type = cudaMemLocationTypeDevice;
    props.location.id = dev;
    cudaMemPool_t pool = nullptr;
    CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
    uint64_t threshold = UINT64_MAX;  // keep freed blocks cached: no driver round trip on later calls
    CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    return pool;
}

void init_state(DeviceState& d, int dev) {
    d.id = dev;
    CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
    CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
    int optin = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    d.smem_optin = size_t(optin);
    d.sm90 = d.cc_major == 9 && d.cc_minor == 0;
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
    const std::string name = std::string(prop.name) + ", device " + std::to_string(dev);
    if (!d.sm90) {
        d.why_not_ready = "this build of moex holds sm_90a (Hopper, compute capability 9.0) code only; " + name +
                          " has compute capability " + std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor);
        return;
    }
    cudaFuncAttributes attr{};
    if (const cudaError_t e = cudaFuncGetAttributes(&attr, probe_kernel); e != cudaSuccess) {
        (void)cudaGetLastError();
        d.why_not_ready = "the moex kernels cannot load on " + name + ": " + cudaGetErrorString(e) +
                          " (driver too old for CUDA 13 sm_90a code?)";
        return;
    }
    d.pool = make_pool(dev);
    d.ready = true;
}

}  // namespace

int current_device() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    MOEX_REQUIRE(dev >= 0 && dev < kMaxDevices, ErrorCode::kCuda,
                 "device index " + std::to_string(dev) + " is past the " + std::to_string(kMaxDevices) +
                     " devices moex supports");
    return dev;
}

const DeviceState& device_state() {
    static std::array<DeviceState, kMaxDevices> states;
    static std::array<std::once_flag, kMaxDevices> once;
    const int dev = current_device();
    std::call_once(once[size_t(dev)], init_state, states[size_t(dev)], dev);
    return states[size_t(dev)];
}

bool device_ready(std::string* why) {
    auto say = [&](const std::string& s) {
        if (why != nullptr) *why = s;
        return false;
    };
    int n = 0;
    if (const cudaError_t err = cudaGetDeviceCount(&n); err != cudaSuccess) {
        (void)cudaGetLastError();
        return say(std::string("no usable CUDA driver/device: ") + cudaGetErrorString(err));
    }
    if (n == 0) return say("no CUDA device found");
    try {
        const DeviceState& d = device_state();
        return d.ready ? true : say(d.why_not_ready);
    } catch (const Error& e) {
        return say(e.what());
    }
}

void set_smem_limit(const void* kernel, size_t bytes) {
    struct Entry {
        bool known = false;
        size_t static_bytes = 0, limit = 0;  // the kernel's static shared memory; the dynamic limit set (0: default)
    };
    static std::mutex mu;
    static std::unordered_map<const void*, std::array<Entry, kMaxDevices>> seen;  // a lookup per launch: no scan
    constexpr size_t kDefault = 48 * 1024;  // static + dynamic per block without the opt-in
    const DeviceState& d = device_state();
    std::lock_guard<std::mutex> lock(mu);
    Entry& e = seen[kernel][size_t(d.id)];
    if (!e.known) {
        cudaFuncAttributes attr{};
        CUDA_CHECK(cudaFuncGetAttributes(&attr, kernel));
        e.known = true, e.static_bytes = attr.sharedSizeBytes;
    }
    if (e.static_bytes + bytes <= kDefault || e.limit >= bytes) return;
    MOEX_REQUIRE(e.static_bytes + bytes <= d.smem_optin, ErrorCode::kUnsupported,
                 "a kernel needs " + std::to_string(bytes) + " bytes of dynamic shared memory besides its " +
                     std::to_string(e.static_bytes) + " static bytes; the device allows " +
                     std::to_string(d.smem_optin) + " in all");
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    e.limit = bytes;
}

Workspace::~Workspace() {
    // Stream-ordered free: runs after the kernels queued on stream_ that use the buffer. Never throws.
    if (base_ != nullptr) (void)cudaFreeAsync(base_, stream_);
}

size_t Workspace::reserve(size_t bytes) {
    MOEX_REQUIRE(base_ == nullptr, ErrorCode::kInvalidArgument, "Workspace::reserve after allocate");
    const size_t off = size_;
    size_ += (bytes + 255) / 256 * 256;
    return off;
}

void Workspace::allocate() {
    if (size_ == 0) return;
    const DeviceState& d = device_state();
    MOEX_REQUIRE(d.ready, ErrorCode::kUnsupported, d.why_not_ready);
    void* p = nullptr;
    CUDA_CHECK(cudaMallocFromPoolAsync(&p, size_, d.pool, stream_));
    base_ = static_cast<char*>(p);
}

void reset_workspace_peak() {
    unsigned long long zero = 0;
    CUDA_CHECK(cudaMemPoolSetAttribute(device_state().pool, cudaMemPoolAttrUsedMemHigh, &zero));
}

size_t workspace_peak_bytes() {
    unsigned long long high = 0;
    CUDA_CHECK(cudaMemPoolGetAttribute(device_state().pool, cudaMemPoolAttrUsedMemHigh, &high));
    return size_t(high);
}

bool pdl_enabled() {
    static const bool on = !env_is("MOEX_PDL", "0");
    return on;
}

}  // namespace moex::cuda
