// Command-line values shared by the programs (the `moex` subcommands, the benchmark, the EP programs): device and
// activation-dtype names, the thread count, the quantization options, and the command line itself for reports. Bad
// values raise moex::Error.
#pragma once

#include <string>

#include "moex/dtype.h"
#include "moex/quant.h"

namespace moex::common {

Device parse_device(const std::string& name);           // cpu | cuda
DType parse_activation_dtype(const std::string& name);  // bf16 | f16 | f32 (and torch's long names)
int resolve_threads(int requested);                     // 0 -> hardware threads; negative -> error

// --quant, --block, --scale-fmt, --activation-scheme of the programs that make quantized experts (make-problem, the
// benchmark). The block and scale format are checked always and apply to fp8_block; an empty scheme is dynamic for
// fp8_block and none for FP4 (the only scheme it takes).
struct QuantOptions {
    QuantFormat format = QuantFormat::kNone;
    WeightBlock block{128, 128};
    DType scale_dtype = DType::kF32;  // f32 | ue8m0
    ActivationQuant activations = ActivationQuant::kNone;
};
QuantOptions parse_quant_options(const std::string& quant, const std::string& block, const std::string& scale_fmt,
                                 const std::string& activation_scheme);

// argv joined by spaces ("moex" for argv[0]), for reports; set once by main().
void set_command_line(int argc, char** argv);
const std::string& command_line();

}  // namespace moex::common
