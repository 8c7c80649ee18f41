// `moex backends [--json]`: every backend in the registry (built-in and user-registered alike), the devices and
// dtypes it is written for, whether it can run here on each device (and why not), and whether it syncs the host.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "moex/backend.h"
#include "tools/cli.h"

namespace moex::cli {
namespace {

constexpr Device kDevices[] = {Device::kCPU, Device::kCUDA};

std::string join_devices(const std::vector<Device>& v) {
    std::string s;
    for (Device d : v) s += (s.empty() ? "" : ", ") + std::string(device_name(d));
    return s;
}

std::string join_dtypes(const std::vector<DType>& v) {
    std::string s;
    for (DType d : v) s += (s.empty() ? "" : ", ") + std::string(dtype_name(d));
    return s;
}

// "fp8_block, mxfp4, nvfp4" or "none".
std::string join_quant(const std::vector<QuantFormat>& v) {
    std::string s;
    for (QuantFormat f : v) s += (s.empty() ? "" : ", ") + std::string(quant_format_name(f));
    return s.empty() ? "none" : s;
}

nlohmann::ordered_json to_json(const Backend& b) {
    nlohmann::ordered_json devices = nlohmann::ordered_json::array(), dtypes = nlohmann::ordered_json::array(),
                           here = nlohmann::ordered_json::object();
    for (Device d : b.devices()) devices.push_back(std::string(device_name(d)));
    for (DType t : b.dtypes()) dtypes.push_back(std::string(dtype_name(t)));
    for (Device d : kDevices) {
        const auto why = b.unavailable(d);
        nlohmann::ordered_json quant = nlohmann::ordered_json::array();
        for (QuantFormat f : b.quant_formats(d)) quant.push_back(std::string(quant_format_name(f)));
        here[std::string(device_name(d))] = {
            {"available", !why.has_value()},
            {"reason", why ? nlohmann::ordered_json(*why) : nlohmann::ordered_json(nullptr)},
            {"host_synchronizes", b.host_synchronizes(d)},
            {"quantized_weights", quant}};
    }
    return {{"name", std::string(b.name())},
            {"description", std::string(b.description())},
            {"devices", devices},
            {"dtypes", dtypes},
            {"here", here}};
}

void print_text(const Backend& b) {
    std::string text = fmt::format("{}\n    {}\n    devices: {}    dtypes: {}\n", b.name(), b.description(),
                                   join_devices(b.devices()), join_dtypes(b.dtypes()));
    for (Device d : kDevices) {
        const auto why = b.unavailable(d);
        const auto devs = b.devices();
        std::string sync;  // only meaningful on CUDA: whether run() may block the host (not graph-capturable)
        if (d == Device::kCUDA && std::find(devs.begin(), devs.end(), d) != devs.end())
            sync = b.host_synchronizes(d) ? "; synchronises the host (not CUDA-graph capturable)"
                                          : "; never synchronises the host";
        const std::string quant = why ? "" : "; quantized weights: " + join_quant(b.quant_formats(d));
        text += fmt::format("    {:<5} {}{}{}\n", std::string(device_name(d)) + ":",
                            why ? "unavailable: " + *why : std::string("available here"), sync, quant);
    }
    std::fputs(text.c_str(), stdout);
}

}  // namespace

void add_backends_command(CLI::App& app) {
    auto json = std::make_shared<bool>(false);
    CLI::App* cmd = app.add_subcommand("backends", "List the registered experts backends and where they can run");
    cmd->add_flag("--json", *json, "One JSON object per backend, one per line");
    cmd->callback([json] {
        const auto& registry = ExpertsInterface::global();
        for (const auto& name : registry.names()) {
            const Backend& b = registry.get(name);
            if (*json)
                std::fputs((to_json(b).dump() + "\n").c_str(), stdout);
            else
                print_text(b);
        }
    });
}

}  // namespace moex::cli
