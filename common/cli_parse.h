// Command-line values shared by the programs (the `moex` subcommands, the benchmark, the EP programs): device and
// activation-dtype names, the thread count, and the command line itself for reports. Bad values raise moex::Error.
#pragma once

#include <string>

#include "moex/dtype.h"

namespace moex::common {

Device parse_device(const std::string& name);           // cpu | cuda
DType parse_activation_dtype(const std::string& name);  // bf16 | f16 | f32 (and torch's long names)
int resolve_threads(int requested);                     // 0 -> hardware threads; negative -> error

// argv joined by spaces ("moex" for argv[0]), for reports; set once by main().
void set_command_line(int argc, char** argv);
const std::string& command_line();

}  // namespace moex::common
