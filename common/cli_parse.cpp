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

QuantOptions parse_quant_options(const std::string& quant, const std::string& block, const std::string& scale_fmt,
                                 const std::string& activation_scheme) {
    QuantOptions o;
    const auto f = quant_format_from_name(quant);
    MOEX_REQUIRE(f.has_value(), ErrorCode::kInvalidArgument,
                 "unknown --quant `" + quant + "`; valid: none, fp8_block, mxfp4, nvfp4");
    o.format = *f;
    if (o.format == QuantFormat::kNone) return o;
    const auto b = weight_block_from_name(block);  // checked for every format, used by fp8_block
    MOEX_REQUIRE(b.has_value(), ErrorCode::kInvalidArgument,
                 "--block `" + block + "`: expected <rows>x<cols> (e.g. 128x128) or none (per-tensor)");
    o.block = *b;
    MOEX_REQUIRE(scale_fmt == "float" || scale_fmt == "ue8m0", ErrorCode::kInvalidArgument,
                 "--scale-fmt `" + scale_fmt + "`; valid: float, ue8m0");
    o.scale_dtype = scale_fmt == "ue8m0" ? DType::kUE8M0 : DType::kF32;
    const std::string scheme = !activation_scheme.empty()      ? activation_scheme
                               : o.format == QuantFormat::kFp8 ? "dynamic"
                                                               : "none";
    const auto act = activation_quant_from_name(scheme);
    MOEX_REQUIRE(act.has_value(), ErrorCode::kInvalidArgument,
                 "unknown --activation-scheme `" + scheme + "`; valid: none, dynamic, static");
    o.activations = *act;
    return o;
}

void set_command_line(int argc, char** argv) {
    g_command_line.clear();
    for (int i = 0; i < argc; ++i) g_command_line += (i ? " " : "") + std::string(i ? argv[i] : "moex");
}

const std::string& command_line() { return g_command_line; }

}  // namespace moex::common
