// The `moex` program: one add_*_command per subcommand (one file each; the benchmark's is bench/bench_command.h);
// the value parsers they share are common/cli_parse.h.
// Every bad input ends as moex::Error, which main() prints as the one line "moex: error: ...".
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

#include "common/cli_parse.h"

namespace moex::cli {

void add_backends_command(CLI::App& app);          // tools/backends_command.cpp
void add_experts_run_command(CLI::App& experts);   // tools/experts_run.cpp
void add_make_problem_command(CLI::App& experts);  // tools/make_problem.cpp
void add_generate_command(CLI::App& app);          // tools/generate_command.cpp

using common::command_line;
using common::parse_activation_dtype;
using common::parse_device;
using common::resolve_threads;

}  // namespace moex::cli
