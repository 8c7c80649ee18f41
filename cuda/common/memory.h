// Device memory and copies for tools, tests, bindings and the expert-parallel runner (not the experts hot path,
// which takes scratch from the Workspace pool of cuda/common/device.h). Plain C++; all throw moex::Error(kCuda).
#pragma once

#include <cstddef>

namespace moex::cuda {

int device_count();        // 0 when no driver or no device
int compute_capability();  // the current device's major·10 + minor; 0 when no driver or no device
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);  // synchronous
void copy_to_host(void* dst, const void* src, size_t bytes);    // synchronous
void device_memset(void* dst, int value, size_t bytes);
void device_synchronize();
// Ordered on `stream` (host memory should be pinned for real overlap), and a wait for the stream.
void copy_async(void* dst, const void* src, size_t bytes, bool to_device, void* stream);
void stream_synchronize(void* stream);

}  // namespace moex::cuda
