// load_weights: plan (resolve and check every tensor), then fill one destination at a time from the memory-mapped
// files (converted to the run dtype, encoded linears decoded with their scales, resident experts' codes and scales
// copied as stored) and upload it. On CUDA only one destination's host staging buffer lives at a time (at most
// one layer's fused experts), so a checkpoint never needs two full host copies.
#include "src/model/weights/weights.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>

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
        const std::span<const uint8_t> bytes = p.file->bytes(p.info->name);
        if (target.stored) {  // resident codes and scales: the checkpoint's bytes
            std::memcpy(static_cast<uint8_t*>(dst) + p.offset * dtype_size(*target.stored), bytes.data(), bytes.size());
        } else if (p.quant.format != QuantFormat::kNone) {  // decoded with its scales into the run dtype
            dequantize_into({p.file, p.info}, p.quant, p.shape, dst, dtype, p.offset);
            for (const CheckpointFiles::Found* f : {&p.quant.scale, &p.quant.global})
                if (f->info) bar.advance(f->info->nbytes());
        } else {
            convert_into(bytes, *dtype_from_safetensors(p.info->dtype), dst, dtype, p.offset);  // checked by the plan
        }
        bar.advance(p.info->nbytes());
    }
}

// modelopt calibrates gate_proj and up_proj apart, so an expert's fused gate_up has two globals, (E, 2), where the
// kernels take one. Up rows decoded with gate's global are up * (g_gate / g_up); the hidden act(gate) * up is then
// off by that factor, which down's global takes back (down is linear): exact up to the hidden's rounding.
void merge_nvfp4_globals(LayerWeights& w) {
    const TensorView& pair = w.experts_gate_up_global.view();
    if (!pair.defined() || pair.ndim != 2) return;
    const int64_t E = pair.shape[0];
    Tensor gu(DType::kF32, pair.shape, 2), merged(DType::kF32, {E}), down(DType::kF32, {E});
    w.experts_gate_up_global.copy_to_host(gu.view());
    w.experts_down_global.copy_to_host(down.view());
    const float* g = static_cast<const float*>(gu.data());
    for (int64_t e = 0; e < E; ++e) {
        static_cast<float*>(merged.data())[e] = g[2 * e];
        static_cast<float*>(down.data())[e] *= g[2 * e + 1] / g[2 * e];
    }
    const Device device = pair.device;
    w.experts_gate_up_global = DeviceTensor::from_host(merged.view(), device);
    w.experts_down_global = DeviceTensor::from_host(down.view(), device);
}

void load_target(const PlanTarget& target, const LoadOptions& options, ModelWeights& weights, ProgressBar& bar) {
    const int ndim = int(target.shape.size());
    if (options.device == Device::kCPU) {  // fill the final buffer in place
        DeviceTensor out(target.stored.value_or(options.dtype), target.shape.data(), ndim, Device::kCPU);
        fill(target, out.view().data, options.dtype, bar);
        target.slot.in(weights) = std::move(out);
        return;
    }
    Tensor staging(target.stored.value_or(options.dtype), target.shape.data(), ndim);
    fill(target, staging.data(), options.dtype, bar);
    target.slot.in(weights) = DeviceTensor::from_host(staging.view(), options.device);
}

}  // namespace

ExpertsQuant LayerWeights::experts_quant(const ExpertsStorage& s) const {
    ExpertsQuant q;
    if (s.format == QuantFormat::kNone) return q;
    q.format = s.format;
    q.block_n = s.block_n, q.block_k = s.block_k;
    q.activations = s.activations;
    q.gate_up = {experts_gate_up_scale.view(), experts_gate_up_global.view(), experts_gate_up_act_scale.view()};
    q.down = {experts_down_scale.view(), experts_down_global.view(), experts_down_act_scale.view()};
    return q;
}

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
    const LoadPlan plan = plan_weights(files, config, options.dequantize);
    ModelWeights weights;
    weights.layers.resize(size_t(config.num_hidden_layers));
    weights.experts = plan.experts;

    if (options.progress && config.quant.enabled() && ::isatty(2) == 1)
        std::fprintf(stderr, "moex: %s\n",
                     quantization_summary(config.quant, options.dequantize, options.dtype).c_str());
    {
        ProgressBar bar("loading " + dir, plan.total_bytes, options.progress);
        for (const PlanTarget& target : plan.targets) load_target(target, options, weights, bar);
    }
    for (LayerWeights& w : weights.layers) merge_nvfp4_globals(w);
    if (plan.tie_lm_head) weights.lm_head = weights.embed;
    return weights;
}

}  // namespace moex::model
