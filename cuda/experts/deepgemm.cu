// The deepgemm pipeline: DeepGEMM's recipe on moex's sm_90a kernels. Tokens sorted into the padded-contiguous layout
// (each expert's rows in 128-row blocks, sizes from device memory, no host sync), then the TMA grouped GEMMs: bf16
// x bf16, or FP8 x FP8 with activations quantized per 1 x 128 into e4m3 bytes and the 128 x 128 weight block scales
// (float32 or UE8M0) promoted in registers. FP4 weights, which Hopper's tensor cores cannot take, are converted to bf16
// inside the TMA kernel (cuda/gemm/sm90_fp4.cuh); where it refuses the shape, they are dequantized to bf16 for the
// experts the call routes to (dequant_weights.h; nvfp4's global scale multiplies the accumulators) and run bf16 x
// bf16. What the TMA kernels cannot run is an error naming why; the static activation scheme is refused
// as the reference refuses it. The host refuses the same cases first (src/backends/deepgemm.cpp).
#include <string>

#include "cuda/common/check.h"
#include "cuda/common/device.h"
#include "cuda/experts/dequant_weights.h"
#include "cuda/experts/pipelines.h"

namespace moex::cuda {

void run_deepgemm(const ExpertsArgs& a, cudaStream_t stream) {
    const DeviceState& dev = device_state();
    MOEX_REQUIRE(dev.sm90, ErrorCode::kUnsupported,
                 "deepgemm needs an sm_90 (Hopper) GPU: its kernels are TMA + wgmma code for compute capability 9.0");
    MOEX_REQUIRE(a.dtype == DType::kBF16, ErrorCode::kUnsupported,
                 "DeepGEMM experts path requires bfloat16 hidden states, got " + std::string(dtype_name(a.dtype)));
    MOEX_REQUIRE(a.act_quant.mode != ActivationQuant::kStatic, ErrorCode::kUnsupported,
                 "DeepGEMM experts dispatch does not support static activation quantization.");
    const QuantFormat f = a.gate_up_scales.format;
    if (f == QuantFormat::kNone || f == QuantFormat::kFp8) {
        MOEX_REQUIRE(f == QuantFormat::kNone || a.act_quant.mode == ActivationQuant::kDynamic, ErrorCode::kUnsupported,
                     "deepgemm runs FP8 weights on the FP8 tensor cores with activations quantized per 1 x 128 "
                     "(activation_scheme dynamic); weight-only FP8 keeps bf16 activations: use grouped_mm");
        return run_grouped(a, stream, {.sm90_only = true});
    }
    if (grouped_sm90_why_not(a) == nullptr) return run_grouped(a, stream, {.sm90_only = true});
    // FP4 the kernel refuses: bf16 copies of the hit experts' weights in this call's workspace, then the bf16 kernels.
    const int64_t N = up_width(a), S = a.T * a.k;
    Workspace ws(stream);
    const size_t hit = ws.reserve_n<int32_t>(a.E);
    const size_t up_w = ws.reserve(size_t(a.E) * size_t(N) * size_t(a.H) * 2);
    const size_t down_w = ws.reserve(size_t(a.E) * size_t(a.H) * size_t(a.I) * 2);
    ws.allocate();
    // code * fold scale is exact in bf16 for both formats; nvfp4's global scale goes on the accumulators.
    WeightScales up_s = a.gate_up_scales, down_s = a.down_scales;
    up_s.global = down_s.global = nullptr;
    launch_mark_experts(a.top_k_index, a.ids_i64, S, a.E, ws.at<int32_t>(hit), stream);
    launch_dequantize_weights({a.gate_up_proj, up_s, a.E, N, a.H, ws.at<int32_t>(hit), ws.at<void>(up_w)}, stream);
    launch_dequantize_weights({a.down_proj, down_s, a.E, a.H, a.I, ws.at<int32_t>(hit), ws.at<void>(down_w)}, stream);
    ExpertsArgs b = a;
    b.gate_up_proj = ws.at<void>(up_w), b.down_proj = ws.at<void>(down_w);
    b.weight_dtype = DType::kBF16;
    b.gate_up_scales = {}, b.down_scales = {};
    b.act_quant = {};
    run_grouped(
        b, stream,
        {.sm90_only = true, .up_expert_scale = a.gate_up_scales.global, .down_expert_scale = a.down_scales.global});
}

}  // namespace moex::cuda
