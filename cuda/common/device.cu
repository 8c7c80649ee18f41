// Device probing (device_ready, device_count), plain memory/copy helpers, CUDA-event timing, and the workspace
// pool. Everything here is off the hot path except Workspace, which is one pool allocation per launcher call.
#include <algorithm>
#include <array>
#include <cstdint>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/launch.h"

namespace moex::cuda {
namespace {

constexpr int kMaxDevices = 64;

__global__ void probe_kernel(int* p) {
    if (p != nullptr) *p = 0;
}

int current_device() {
    int dev = 0;
    CUDA_CHECK(cudaGetDevice(&dev));
    MOEX_REQUIRE(dev >= 0 && dev < kMaxDevices, ErrorCode::kCuda, "device index out of range");
    return dev;
}

// One pool per device, created on first use, never destroyed (the driver reclaims it at exit; destroying it from a
// static destructor could run after the CUDA runtime is gone).
cudaMemPool_t device_pool(int dev) {
    static std::mutex mu;
    static std::array<cudaMemPool_t, kMaxDevices> pools{};
    std::lock_guard<std::mutex> lock(mu);
    if (pools[dev] == nullptr) {
        cudaMemPoolProps props{};
        props.allocType = cudaMemAllocationTypePinned;
        props.handleTypes = cudaMemHandleTypeNone;
        props.location.type = cudaMemLocationTypeDevice;
        props.location.id = dev;
        cudaMemPool_t pool = nullptr;
        CUDA_CHECK(cudaMemPoolCreate(&pool, &props));
        uint64_t threshold = UINT64_MAX;  // keep freed blocks cached: no driver round trip on later calls
        CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
        pools[dev] = pool;
    }
    return pools[dev];
}

}  // namespace

const DeviceInfo& current_device_info() {
    static std::mutex mu;
    static std::array<DeviceInfo, kMaxDevices> infos{};
    static std::array<bool, kMaxDevices> have{};
    const int dev = current_device();
    std::lock_guard<std::mutex> lock(mu);
    if (!have[dev]) {
        DeviceInfo& d = infos[dev];
        d.id = dev;
        CUDA_CHECK(cudaDeviceGetAttribute(&d.sm_count, cudaDevAttrMultiProcessorCount, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_major, cudaDevAttrComputeCapabilityMajor, dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&d.cc_minor, cudaDevAttrComputeCapabilityMinor, dev));
        int optin = 0;
        CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
        d.smem_optin = size_t(optin);
        have[dev] = true;
    }
    return infos[dev];
}

void set_smem_limit(const void* kernel, size_t bytes) {
    static std::mutex mu;
    static std::vector<std::pair<std::pair<const void*, int>, size_t>> done;  // (kernel, device) -> bytes set
    const DeviceInfo& d = current_device_info();
    MOEX_REQUIRE(bytes <= d.smem_optin, ErrorCode::kUnsupported,
                 "a kernel needs " + std::to_string(bytes) + " bytes of shared memory; the device allows " +
                     std::to_string(d.smem_optin));
    std::lock_guard<std::mutex> lock(mu);
    for (auto& [key, have] : done) {
        if (key.first == kernel && key.second == d.id) {
            if (have >= bytes) return;
            CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
            have = bytes;
            return;
        }
    }
    CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    done.push_back({{kernel, d.id}, bytes});
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
    const int dev = current_device();
    void* p = nullptr;
    CUDA_CHECK(cudaMallocFromPoolAsync(&p, size_, device_pool(dev), stream_));
    base_ = static_cast<char*>(p);
}

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // no driver / no device: clear the error, report none
        return 0;
    }
    return n;
}

bool device_ready(std::string* why) {
    auto say = [&](const std::string& s) {
        if (why != nullptr) *why = s;
        return false;
    };
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        (void)cudaGetLastError();
        return say(std::string("no usable CUDA driver/device: ") + cudaGetErrorString(err));
    }
    if (n == 0) return say("no CUDA device found");
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return say("cudaGetDevice failed");
    // Cached per device: backends ask on every call.
    static std::mutex mu;
    static std::array<int, kMaxDevices> state{};  // 0 unknown, 1 ready, 2 not ready
    static std::array<std::string, kMaxDevices> reason;
    std::lock_guard<std::mutex> lock(mu);
    if (dev < 0 || dev >= kMaxDevices) return say("device index out of range");
    if (state[dev] == 0) {
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
            (void)cudaGetLastError();
            state[dev] = 2;
            reason[dev] = "cudaGetDeviceProperties failed for device " + std::to_string(dev);
        } else if (prop.major != 9 || prop.minor != 0) {
            state[dev] = 2;
            reason[dev] = "this build of moex holds sm_90a (Hopper, compute capability 9.0) code only; device " +
                          std::to_string(dev) + " (" + prop.name + ") has compute capability " +
                          std::to_string(prop.major) + "." + std::to_string(prop.minor);
        } else {
            cudaFuncAttributes attr{};
            const cudaError_t e = cudaFuncGetAttributes(&attr, probe_kernel);
            if (e != cudaSuccess) {
                (void)cudaGetLastError();
                state[dev] = 2;
                reason[dev] = std::string("the moex kernels cannot load on device ") + std::to_string(dev) + " (" +
                              prop.name + "): " + cudaGetErrorString(e) + " (driver too old for CUDA 13 sm_90a code?)";
            } else {
                state[dev] = 1;
            }
        }
    }
    if (state[dev] == 2) return say(reason[dev]);
    return true;
}

void* device_alloc(size_t bytes) {
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes));
    return p;
}

void device_free(void* p) {
    if (p != nullptr) CUDA_CHECK(cudaFree(p));
}

void copy_to_device(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
}

void copy_to_host(void* dst, const void* src, size_t bytes) {
    CUDA_CHECK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

void device_memset(void* dst, int value, size_t bytes) { CUDA_CHECK(cudaMemset(dst, value, bytes)); }

void device_synchronize() { CUDA_CHECK(cudaDeviceSynchronize()); }

double time_us(void (*fn)(void* ctx, void* stream), void* ctx, void* stream, int warmup, int reps, bool graph) {
    MOEX_REQUIRE(fn != nullptr && reps > 0 && warmup >= 0, ErrorCode::kInvalidArgument, "time_us: bad arguments");
    cudaStream_t s = as_stream(stream);
    cudaStream_t own = nullptr;
    if (graph && s == nullptr) {  // the legacy default stream cannot be captured: use a private stream
        CUDA_CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
        s = own;
    }
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    cudaEvent_t start = nullptr, stop = nullptr;
    std::vector<float> ms(size_t(reps), 0.0f);
    auto cleanup = [&] {
        if (exec) (void)cudaGraphExecDestroy(exec);
        if (g) (void)cudaGraphDestroy(g);
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
            CUDA_CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            try {
                fn(ctx, s);
            } catch (...) {
                cudaGraph_t broken = nullptr;
                (void)cudaStreamEndCapture(s, &broken);
                if (broken) (void)cudaGraphDestroy(broken);
                throw;
            }
            CUDA_CHECK(cudaStreamEndCapture(s, &g));
            CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
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
