// Command-line values shared by the programs (common/cli_parse.h).
#include "common/cli_parse.h"

#include <algorithm>
#include <thread>

#include "moex/error.h"

namespace moex::common {
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

void set_command_line(int argc, char** argv) {
    g_command_line.clear();
    for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(i ? argv[i] : "moex");
}

const std::string& command_line() { return g_command_line; }

}  // namespace moex::common
