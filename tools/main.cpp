// Entry point of the `moex` command-line program: builds the CLI11 tree and turns every failure into one line
// "moex: error: ..." with a non-zero exit status (2 for command-line mistakes, 1 for everything else).
#include <algorithm>
#include <cstdio>
#include <exception>
#include <new>
#include <string>
#include <thread>

#include "moex/error.h"
#include "tools/cli.h"

namespace moex::cli {
namespace {

std::string g_command_line;

}  // namespace

Device parse_device(const std::string& name) {
    const auto d = device_from_name(name);
    MOEX_REQUIRE(d.has_value(), ErrorCode::kInvalidArgument, "unknown device `" + name + "`; valid: cpu, cuda");
    return *d;
}

DType parse_activation_dtype(const std::string& name) {
    const auto d = dtype_from_name(name);
    MOEX_REQUIRE(d.has_value() && is_float_activation(*d), ErrorCode::kInvalidArgument,
                 "unknown activation dtype `" + name + "`; valid: bf16, f16, f32");
    return *d;
}

int resolve_threads(int requested) {
    MOEX_REQUIRE(requested >= 0, ErrorCode::kInvalidArgument,
                 "--threads must be >= 0 (0 = all hardware threads), got " + std::to_string(requested));
    return requested > 0 ? requested : int(std::max(1u, std::thread::hardware_concurrency()));
}

const std::string& command_line() { return g_command_line; }

}  // namespace moex::cli

int main(int argc, char** argv) {
    for (int i = 0; i < argc; ++i) moex::cli::g_command_line += (i ? " " : "") + std::string(i ? argv[i] : "moex");
    CLI::App app{"moex: run the experts part of Mixture-of-Experts models through interchangeable backends"};
    app.name("moex");
    app.require_subcommand(1);
    moex::cli::add_backends_command(app);
    CLI::App* experts = app.add_subcommand("experts", "Run one experts call from a problem file, or make one");
    experts->require_subcommand(1);
    moex::cli::add_experts_run_command(*experts);
    moex::cli::add_make_problem_command(*experts);
    moex::cli::add_bench_command(app);
    moex::cli::add_generate_command(app);
    try {
        app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
        return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
        return app.exit(e);
    } catch (const CLI::Success& e) {
        return app.exit(e);
    } catch (const CLI::ParseError& e) {
        std::fprintf(stderr, "moex: error: %s (see moex --help)\n", e.what());
        return 2;
    } catch (const moex::Error& e) {
        std::fprintf(stderr, "moex: error: %s\n", e.what());
        return 1;
    } catch (const std::bad_alloc&) {
        std::fprintf(stderr, "moex: error: out of memory\n");
        return 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moex: error: %s\n", e.what());
        return 1;
    }
    return 0;
}
