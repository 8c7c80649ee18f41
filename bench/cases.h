// The cases of `moex bench`: per shape, weight sets sized to memory (E reduced when needed, said in a note) and
// rotated past the last-level cache; per (backend, T), fresh uniform routing for each repetition, warm-up, median.
// The CPU runner (wall clock) is here; the CUDA one (CUDA events, graph replay) is in cuda_cases.h.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/shapes.h"
#include "moex/backend.h"
#include "moex/device.h"
#include "moex/quant.h"

namespace moex::bench {

struct BenchConfig {
    Device device = Device::kCPU;  // CUDA: weights, routing and output live on the GPU (cuda_cases.h)
    DType dtype = DType::kBF16;
    int threads = 1;
    int reps = 5;
    int warmup = 1;
    double case_seconds = 10;   // repetitions are cut so that one case takes about this long
    double settle_seconds = 0;  // CPU: untimed calls before a shape's first case (ShapeBench::run)
    uint64_t seed = 0;
    int64_t max_weight_bytes = 6LL << 30;  // all weight sets of one shape together
    int64_t llc_bytes = 32LL << 20;        // the cache that must not hold a repetition's experts (CPU LLC, GPU L2)
    bool graph = false;                    // CUDA: time replays of a captured CUDA graph
    bool backward = false;                 // time the backward (every gradient) instead of the forward
    // Training's kept state (moex/backward.h ExpertsSaved), where the backend keeps it on the device: the forward
    // keeps its gate/up pre-activation (keep), the backward reads what one untimed forward kept (unless recompute).
    bool keep = false;
    bool recompute = false;
    // Quantized experts: the weight sets are quantized once (moex/quant.h's quantizer), activations per `act`.
    QuantFormat quant = QuantFormat::kNone;
    WeightBlock block{128, 128};      // fp8
    DType scale_dtype = DType::kF32;  // fp8: f32 | ue8m0
    ActivationQuant act = ActivationQuant::kDynamic;
};

// Bytes per expert-weight element as stored: the dtype, or the FP8 / FP4 codes plus their scales.
double weight_bytes_per_element(const BenchConfig& config);
// "fp8_block 128x128 float, activations dynamic"; empty for unquantized configs.
std::string quant_label(const BenchConfig& config);

struct ShapePlan {
    shapes::ExpertsShape model;  // the model's own sizes
    int64_t E = 0;               // experts allocated and routed to (<= model.E)
    int sets = 1;                // weight sets rotated per repetition
    int64_t set_bytes = 0;       // one set: gate_up_proj + down_proj
    std::string note;            // what was reduced and why; empty when nothing was
};

// Chooses E and the number of sets: E = model.E when it fits in max_weight_bytes, else the largest power of two
// (>= k) that does; enough sets that all of them together exceed 4x the last-level cache. Throws when even k
// experts do not fit.
ShapePlan plan_shape(const shapes::ExpertsShape& shape, const BenchConfig& config);

struct CaseResult {
    std::string skip;  // non-empty: the backend cannot run this case (why_not), nothing was timed
    double median_us = 0, min_us = 0;
    int reps = 0;                  // timed repetitions (the warm-up itself when warmup_only)
    bool warmup_only = false;      // the warm-up took longer than case_seconds and is the one sample
    double e_touched = 0;          // mean distinct experts per timed repetition (CUDA: per routing set)
    bool output_ok = true;         // no NaN left from the poisoned output
    bool check_ok = true;          // the cross-check against another backend passed (or none was made)
    std::string check;             // what the cross-check found; empty when none was made
    int64_t workspace_bytes = -1;  // CUDA: peak of moex's workspace pool over one call; -1 = not measured
    bool kept = false;             // the forward kept its pre-activation, or the backward read what one kept
};

// Times the backends on one shape; owns that shape's weight sets.
class CaseRunner {
   public:
    virtual ~CaseRunner() = default;
    virtual const ShapePlan& plan() const = 0;
    // Times `backend` at T tokens. The routings depend on (seed, shape, T) only, so every backend sees the same.
    virtual CaseResult run(const Backend& backend, int64_t T) = 0;
};

// The seed of the inputs of case (shape, T): the same for every backend.
uint64_t case_seed(const BenchConfig& config, const shapes::ExpertsShape& shape, int64_t T);

// Random weights of std 0.02 (the HF baselines' N(0, 0.02); here U(-a, a) of the same std, faster to make).
inline constexpr double kWeightStd = 0.02;

// One quantized weight set of a shape (config.quant set): bf16 weights of the bench's distribution, quantized on the
// host (moex/quant.h's quantizer) and placed on config.device; quant's views point into `scales`.
struct QuantizedWeightSet {
    DeviceTensor gate_up, down;
    std::vector<DeviceTensor> scales;
    ExpertsQuant quant;
};
QuantizedWeightSet make_quantized_set(const ShapePlan& plan, const BenchConfig& config, uint64_t seed);

// The CPU runner: wall clock around each call, a fresh routing per repetition.
class ShapeBench : public CaseRunner {
   public:
    ShapeBench(const ShapePlan& plan, const BenchConfig& config);
    const ShapePlan& plan() const override { return plan_; }
    CaseResult run(const Backend& backend, int64_t T) override;

   private:
    ShapePlan plan_;
    BenchConfig config_;
    std::vector<DeviceTensor> gate_up_;  // per set: (E, 2I, H)
    std::vector<DeviceTensor> down_;     // per set: (E, H, I)
    std::vector<ExpertsQuant> quant_;    // per set, quantized configs: the scales (in scales_)
    std::vector<DeviceTensor> scales_;
    bool settled_ = false;  // the first case's settle calls ran
};

}  // namespace moex::bench
