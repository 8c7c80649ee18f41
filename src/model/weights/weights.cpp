// load_weights: plan (resolve and check every tensor), then fill one destination at a time from the memory-mapped
// files, converting to the run dtype (FP8 tensors of a quantization_config fp8 checkpoint dequantized with their
// block scales), and upload it. On CUDA only one destination's host staging buffer lives at a
// time (at most one layer's fused experts), so a checkpoint never needs two full host copies.
#include "src/model/weights/weights.h"

#include "moex/error.h"
#include "moex/safetensors.h"
#include "src/model/weights/files.h"
#include "src/model/weights/plan.h"
#include "src/model/weights/progress.h"
#include "src/model/weights/tensor.h"

namespace moex::model {

namespace {

void fill(const PlanTarget& target, void* dst, DType dtype, ProgressBar& bar) {
    for (const PlanPiece& p : target.pieces) {
        const std::optional<DType> src_dtype = dtype_from_safetensors(p.info->dtype);  // checked by the plan
        if (p.scales.info) {  // F8_E4M3 with its block scales: dequantized into the run dtype
            const PieceScales& s = p.scales;
            const DType sdt = s.info->dtype == "F32" ? DType::kF32 : DType::kUE8M0;
            dequantize_into(p.file->bytes(p.info->name), p.info->shape, s.file->bytes(s.info->name), sdt, s.info->shape,
                            s.block_n, s.block_k, dst, dtype, p.offset);
            bar.advance(p.info->nbytes() + s.info->nbytes());
            continue;
        }
        convert_into(p.file->bytes(p.info->name), *src_dtype, dst, dtype, p.offset);
        bar.advance(p.info->nbytes());
    }
}

void load_target(const PlanTarget& target, const LoadOptions& options, ModelWeights& weights, ProgressBar& bar) {
    const int ndim = int(target.shape.size());
    if (options.device == Device::kCPU) {  // fill the final buffer in place
        DeviceTensor out(options.dtype, target.shape.data(), ndim, Device::kCPU);
        fill(target, out.view().data, options.dtype, bar);
        target.slot.in(weights) = std::move(out);
        return;
    }
    Tensor staging(options.dtype, target.shape.data(), ndim);
    fill(target, staging.data(), options.dtype, bar);
    target.slot.in(weights) = DeviceTensor::from_host(staging.view(), options.device);
}

}  // namespace

ModelWeights load_weights(const std::string& dir, const ModelConfig& config, const LoadOptions& options) {
    MOEX_REQUIRE(
        options.dtype == DType::kF32 || options.dtype == DType::kBF16, ErrorCode::kInvalidArgument,
        "load_weights: the run dtype must be float32 or bfloat16, got " + std::string(dtype_name(options.dtype)));
#if !MOEX_WITH_CUDA
    MOEX_REQUIRE(options.device == Device::kCPU, ErrorCode::kUnsupported,
                 "load_weights: this build of moex has no CUDA support");
#endif
    MOEX_REQUIRE(
        config.num_hidden_layers > 0, ErrorCode::kInvalidArgument,
        "load_weights: the config has no layers (num_hidden_layers=" + std::to_string(config.num_hidden_layers) + ")");
    CheckpointFiles files(dir);
    const LoadPlan plan = plan_weights(files, config);
    ModelWeights weights;
    weights.layers.resize(size_t(config.num_hidden_layers));

    ProgressBar bar("loading " + dir, plan.total_bytes, options.progress);
    for (const PlanTarget& target : plan.targets) load_target(target, options, weights, bar);
    if (plan.tie_lm_head) weights.lm_head = weights.embed;
    return weights;
}

}  // namespace moex::model
