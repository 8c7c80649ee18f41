// The one header host code includes to run experts on CUDA: the plain argument struct of one experts call and its
// launcher. No TensorView here; launchers run on the caller's stream, take workspace from moex's stream-ordered pool
// and throw moex::Error(kCuda). Plain C++ (no CUDA headers), so builds without CUDA can name its types.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "cuda/common/params.h"
#include "moex/dtype.h"

namespace moex::cuda {

enum class Algo : int32_t {
    kEager,  // route on the device, read the row ranges back (host sync), cuBLAS per hit expert (no quantized weights)
    kBatched,   // decode: routing + 2 projection kernels, weights streamed once, no host sync
    kGrouped,   // prefill: routing, gather, 2 grouped GEMMs, combine; no host sync
    kDeepGemm,  // kGrouped on the sm_90a TMA kernels only (FP8 x FP8, FP4 dequantized to bf16); no host sync
};

// One experts call; all tensors contiguous and on the current device. Letters: T tokens, H hidden,
// I intermediate, E experts, k top-k, N = 2I (gated) or I (ungated).
struct ExpertsArgs {
    const void* hidden_states;  // (T, H)                     dtype
    const void* top_k_index;    // (T, k)                     int32 | int64 (ids_i64); ids outside [0,E) add 0
    const void* top_k_weights;  // (T, k)                     float32 (weights_f32) | dtype
    const void* gate_up_proj;   // (E, N, H) | transposed (E, H, N)   weight_dtype
    const void* down_proj;      // (E, H, I) | transposed (E, I, H)   weight_dtype
    const void* gate_up_bias;   // (E, N) dtype, or nullptr
    const void* down_bias;      // (E, H) dtype, or nullptr
    void* out;                  // (T, H)                     dtype
    int64_t T, H, I, E, k;
    DType dtype;  // activations: bf16 | f16 | f32
    bool ids_i64, weights_f32, has_gate, is_transposed;
    GateParams gate;
    // Stored weights: weight_dtype == dtype, or quantized (FP8 e4m3 codes, packed FP4) with their scales; then the
    // weights are K-major (E, N, K) and act_quant says how each GEMM input is rounded to e4m3 first.
    DType weight_dtype;
    WeightScales gate_up_scales, down_scales;
    ActQuant act_quant;
    // A training forward's kept state (moex/backward.h ExpertsSaved), or nullptr for none: the forward (kGrouped, where
    // grouped_save_why_not allows it) writes (T·k, N) dtype pre-activations x·Wuᵀ + bu in its packed row order and
    // the (T·k,) row of each slot (-1: a sentinel); the backward reads them instead of recomputing the up projection.
    void* saved_gate_up = nullptr;
    int32_t* saved_slot_row = nullptr;
};

// Why run_experts with kGrouped cannot keep the pre-activation for this call (nullptr: it can); shapes and flags only.
const char* grouped_save_why_not(const ExpertsArgs& args);

// True when a CUDA device of compute capability 9.0 is usable; otherwise *why says what is missing.
bool device_ready(std::string* why);

// Runs one experts call with the given algorithm. kEager may synchronise the host; the others never do.
void run_experts(const ExpertsArgs& args, Algo algo, void* stream);

// How many calls so far took batched_mm's one-kernel decode path (cuda/experts/decode_stream.cuh): tests and the
// bench check with it that the path they mean to measure ran.
uint64_t decode_stream_calls();

// The most device memory moex's workspace pool of the current device has held since the last reset
// (cudaMemPoolAttrUsedMemHigh): around one synchronised call, that call's peak workspace. Calls recorded in a CUDA
// graph allocate from the graph's memory instead and are not counted.
void reset_workspace_peak();
size_t workspace_peak_bytes();

}  // namespace moex::cuda
