// The `moex` program: one add_*_command per subcommand (one file each), and the few parsers they share.
// Every bad input ends as moex::Error, which main() prints as the one line "moex: error: ...".
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "moex/dtype.h"

namespace moex::cli {

void add_backends_command(CLI::App& app);          // tools/backends_command.cpp
void add_experts_run_command(CLI::App& experts);   // tools/experts_run.cpp
void add_make_problem_command(CLI::App& experts);  // tools/make_problem.cpp
void add_bench_command(CLI::App& app);             // bench/bench_command.cpp
void add_generate_command(CLI::App& app);          // tools/generate_command.cpp

Device parse_device(const std::string& name);           // cpu | cuda
DType parse_activation_dtype(const std::string& name);  // bf16 | f16 | f32 (and torch's long names)
int resolve_threads(int requested);                     // 0 -> hardware threads; negative -> error
const std::string& command_line();                      // argv joined by spaces, for reports

}  // namespace moex::cli
