// Entry point of the `moex` command-line program: builds the CLI11 tree and turns every failure into one line
// "moex: error: ..." with a non-zero exit status (2 for command-line mistakes, 1 for everything else).
#include <cstdio>
#include <exception>
#include <new>

#include "bench/bench_command.h"
#include "common/cli_parse.h"
#include "moex/error.h"
#include "tools/cli.h"

int main(int argc, char** argv) {
    moex::common::set_command_line(argc, argv);
    CLI::App app{"moex: run the experts part of Mixture-of-Experts models through interchangeable backends"};
    app.name("moex");
    app.require_subcommand(1);
    moex::cli::add_backends_command(app);
    CLI::App* experts = app.add_subcommand("experts", "Run one experts call from a problem file, or make one");
    experts->require_subcommand(1);
    moex::cli::add_experts_run_command(*experts);
    moex::cli::add_make_problem_command(*experts);
    moex::bench::add_bench_command(app);
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
