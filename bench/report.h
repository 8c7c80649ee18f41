// Output of `moex bench`: a header (machine, floor terms, notes), then one row per case, as a text table and/or as
// JSON lines (one object per line, "kind": machine | floor | note | result | skip | error).
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "bench/baselines.h"
#include "bench/cases.h"
#include "bench/machine.h"

namespace moex::bench {

struct Row {
    const ShapePlan* plan = nullptr;
    int64_t T = 0;
    std::string backend;
    Device device = Device::kCPU;
    DType dtype = DType::kBF16;
    int threads = 1;
    bool graph = false;       // CUDA-graph replay
    bool backward = false;    // the backward pass was timed
    double weight_bytes = 2;  // per expert-weight element (weight_bytes_per_element): dtype or FP8/FP4 + scales
    std::string quant;        // "" or the quantized format, e.g. "fp8_block 128x128 float, act dynamic"
    CaseResult result;
    std::string error;  // the run threw moex::Error
};

struct Derived {
    double gflop = 0, gbytes = 0;      // 6·T·k·H·I; w·3·H·I·E_touched + dtype·2·T·H (backward: see derive)
    double gflops = 0, gbps = 0;       // per second at the median
    double floor_us = 0, x_floor = 0;  // max(FLOPs / GEMM rate, bytes / bandwidth); median ÷ floor (0: no floor)
    std::optional<HfBaseline> hf;      // CUDA, bf16, the model's own E: Hugging Face's best (baselines.h)
};
Derived derive(const Row& row, const MachineFloor& floor);

// Text goes to stdout unless json_stdout; JSON lines go to stdout (json_stdout) or to json_path (when not empty).
class Reporter {
   public:
    Reporter(bool json_stdout, const std::string& json_path);
    ~Reporter();
    Reporter(const Reporter&) = delete;
    Reporter& operator=(const Reporter&) = delete;
    void header(const CpuInfo& cpu, const MachineFloor& floor, const BenchConfig& config,
                const std::string& commandline);
    void note(const std::string& text);
    void table_start(Device device, bool backward = false);
    void row(const Row& row, const MachineFloor& floor);

   private:
    void text_header(const CpuInfo& cpu, const MachineFloor& floor, const BenchConfig& config, const std::string& cmd);
    void text_row(const Row& row, const Derived& d);
    void emit(const std::string& json_line);
    bool text_;
    std::FILE* json_ = nullptr;  // stdout, the --json-file, or none
    bool own_json_ = false;
};

}  // namespace moex::bench
