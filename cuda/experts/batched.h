// The batched_mm (decode) projection kernel's argument struct (its configuration is in batched_config.h).
// One launch computes one projection for every (expert, row chunk) tile; gate, bias, weight and combine are fused.
#pragma once

#include <cstdint>

#include "cuda/common/params.h"
#include "cuda/experts/batched_config.h"
#include "moex/dtype.h"

namespace moex::cuda::batched {

enum class Proj : int32_t { kUpGate = 0, kUpAct = 1, kDown = 2 };

// One projection over the routed rows: logical weight rows x chunk rows. R physical weight rows (the N of the
// projection), K the reduced size; weight row j of expert e is W[e, j, :] (K-major) or W[e, :, j] (n_major).
struct ProjArgs {
    const void* W;            // (E, R, K) | n_major: (E, K, R)       dtype
    const void* bias;         // (E, R) dtype, or nullptr
    const void* X;            // up: x (T, K); down: h (S, K)         dtype; sorted row i reads X[row_slot[i] / x_div]
    void* out;                // up: h (S, out_cols) dtype; down: y (S, R) float32
    const int32_t* row_slot;  // (S,) slot of each expert-sorted row
    const int32_t* tile_expert;  // (tiles_bound,)
    const int32_t* tile_row0;    // (tiles_bound,)
    const int32_t* tile_nrows;   // (tiles_bound,) <= chunk rows
    const int32_t* num_tiles;    // (1,)
    int64_t R, K, E, out_cols, x_div;
    Proj proj;
    bool n_major;
    GateParams gate;  // kUpGate: the gate and the column order of W's rows; kUpAct: gate.activation
    // kDown: y[s] = (acc + bias) * topk_weight[s]
    const void* weights;
    bool weights_f32;
    DType dtype;          // activations; W is stored in it too unless scales.format says it is quantized
    WeightScales scales;  // quantized W: K-major codes (E, R, K bytes or K / 2 for FP4) and their scales
    // Quantized W and activations: X holds e4m3 codes and these the scales of each (X row, K slice); else nullptr.
    const float* x_scales;
    // kDown fused combine: the last CTA of each column block sums y over the slots of every token (slot order).
    int32_t* arrive;  // (column blocks,) zeroed by the routing kernel, or nullptr (no fused combine)
    void* final_out;  // (T, R) dtype
    const void* ids;
    bool ids_i64;
    int64_t T, k;
    int32_t ks;  // kMma: K splits (1, 2, 4 or 8); the CTA covers 16 * rt * 8 / ks weight rows
    // FP8 weights and activations: X holds e4m3 bytes (X rows of K bytes) and the mma loop multiplies codes by codes
    // on the FP8 tensor cores (x_scales and the weight scales promoted as above); false: X in dtype.
    bool x_e4m3;
};

}  // namespace moex::cuda::batched
