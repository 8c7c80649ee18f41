// The `moex bench` subcommand (bench/bench_command.cpp): tools/main.cpp registers it into the program's CLI tree.
#pragma once

#include <CLI/CLI.hpp>

namespace moex::bench {

void add_bench_command(CLI::App& app);

}  // namespace moex::bench
