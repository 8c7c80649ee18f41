// Activation quantization of quantized experts on the device (ActQuant, params.h): each GEMM input row rounded to
// e4m3 in groups along K and back to the activation dtype, as transformers' act_quant feeds its FP8 GEMMs and as the
// CPU path does (src/cpu/act_quant.cpp): dynamic scale amax / 448 per group (an all-zero group stays zero), static
// x / scale[e] saturated at +-448. The pipelines run it on the gathered or slot-ordered rows before each projection,
// writing either the rounded values or the codes and their scales (scale_out).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/params.h"
#include "cuda/routing/routing.h"
#include "moex/dtype.h"

namespace moex::cuda {

// dst row r = round(src row r / src_div). The expert of row r (the static scale's index) comes from `ids` (slot rows:
// expert of slot r; packed rows, row_slot set: expert of slot row_slot[r] for r < *total_rows), or from `tile_expert`
// (padded rows: expert of tile r / tile_rows), or is not needed (all null: token rows, dynamic only). Rows of no
// expert (sentinel slots, tiles past *num_tiles, packed rows past *total_rows) are left as they are.
struct ActQuantArgs {
    const void* src;  // (rows / src_div rows, K) dtype
    void* dst;        // (rows, K) dtype (may be src when src_div == 1)
    int64_t rows, K, src_div;
    int64_t group;              // values per scale group along K (divides K); static scales repeat per group
    const float* static_scale;  // (E,) or nullptr: dynamic
    // (rows, K / group) or nullptr. Set: dst gets the e4m3 codes (exact in any activation dtype) and scale_out their
    // scales, for kernels that promote scales onto f32 partial sums; nullptr: dst gets code * scale (f32 kernels).
    float* scale_out;
    bool dst_e4m3;    // codes mode only: dst is (rows, K) e4m3 bytes instead of codes in the activation dtype
    const void* ids;  // slot rows: (rows,) expert ids, or nullptr
    bool ids_i64;
    const int32_t* row_slot = nullptr;    // packed rows: (rows,) slot of each row (with ids)
    const int32_t* total_rows = nullptr;  // packed rows: (1,) rows in use
    const int32_t* tile_expert;           // padded rows: (tiles,) expert of each tile_rows-row tile
    const int32_t* num_tiles;             // (1,)
    int64_t tile_rows, E;
    DType dtype;
};
void launch_act_quant(const ActQuantArgs& args, cudaStream_t stream);

// The FP8 grouped pipeline's gather and its dynamic quantization in one pass: row r of the padded layout (rows <
// *gather.total_rows) is token row_slot[r] / k rounded to e4m3 bytes in dst (rows_bound, H) with one scale per 128
// values in scale_out (rows_bound, H / 128), padding rows codes 0 with scale 0, and row_scale[r] its routing weight
// (each token quantized once, through gather.slot_row):
// what launch_gather_rows then launch_act_quant (codes mode, dst_e4m3, tile experts) write, without the (P, H) rows in
// the activation dtype. Takes dynamic groups of 128 on 16-byte-aligned rows (gather_act_quant_takes).
struct GatherQuantArgs {
    GatherArgs gather;  // gather.A unused
    uint8_t* dst;
    float* scale_out;
};
bool gather_act_quant_takes(const GatherArgs& gather, int64_t group, bool static_scales);
void launch_gather_act_quant(const GatherQuantArgs& args, cudaStream_t stream);

}  // namespace moex::cuda
