// The one header host code includes to reach CUDA: plain argument structs and launchers. No TensorView here.
// Launchers run on the caller's stream, take workspace from moex's caching allocator and throw moex::Error(kCuda).
#pragma once

#include <cstdint>
#include <string>

namespace moex::cuda {

enum class ActDType : int32_t { kBF16 = 0, kF16 = 1, kF32 = 2 };
enum class Algo : int32_t { kEager = 0, kBatched = 1, kGrouped = 2 };

// One experts call; all tensors contiguous and on the current device. Letters: T tokens, H hidden,
// I intermediate, E experts, k top-k, N = 2I (gated) or I (ungated).
struct ExpertsArgs {
    const void* x;             // (T, H)                      dtype
    const void* ids;           // (T, k)                      int32 | int64 (ids_i64); ids outside [0,E) add 0
    const void* topk_weights;  // (T, k)                      float32 (weights_f32) | dtype
    const void* w_up;          // (E, N, H) | transposed (E, H, N)
    const void* w_down;        // (E, H, I) | transposed (E, I, H)
    const void* b_up;          // (E, N) or nullptr
    const void* b_down;        // (E, H) or nullptr
    void* out;                 // (T, H)                      dtype
    int64_t T, H, I, E, k;
    ActDType dtype;
    bool ids_i64, weights_f32, has_gate, is_transposed, is_concatenated;
    int32_t activation;  // moex::Activation: 0 silu, 1 gelu (erf), 2 gelu tanh, 3 relu
    int32_t gate_kind;   // moex::GateKind: 0 act(gate)*up, 1 gpt-oss clamped SwiGLU
    float swiglu_alpha, swiglu_limit;
};

// True when a CUDA device of compute capability 9.0 is usable; otherwise *why says what is missing.
bool device_ready(std::string* why);

// Runs one experts call with the given algorithm. kEager may synchronise the host; the others never do.
void run_experts(const ExpertsArgs& args, Algo algo, void* stream);

}  // namespace moex::cuda

namespace moex::cuda {

// Device memory and copies for tools, tests and bindings (not the hot path). All throw moex::Error(kCuda).
int device_count();  // 0 when no driver or no device
void* device_alloc(size_t bytes);
void device_free(void* p);
void copy_to_device(void* dst, const void* src, size_t bytes);
void copy_to_host(void* dst, const void* src, size_t bytes);
void device_memset(void* dst, int value, size_t bytes);
void device_synchronize();

// CUDA-event timing of `fn` launched on `stream`: median over `reps` after `warmup` calls, in microseconds.
// With graph=true the calls are captured once into a CUDA graph and the replays are timed.
double time_us(void (*fn)(void* ctx, void* stream), void* ctx, void* stream, int warmup, int reps, bool graph);

}  // namespace moex::cuda
