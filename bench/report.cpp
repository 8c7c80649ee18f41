// Text table and JSON-lines output of `moex bench`, and the derived columns (GFLOP/s, GB/s, floor, llama.cpp).
#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace moex::bench {
namespace {

void emit(const nlohmann::ordered_json& j) {
    std::fputs((j.dump() + "\n").c_str(), stdout);
    std::fflush(stdout);
}

void line(const std::string& s) {
    std::fputs((s + "\n").c_str(), stdout);
    std::fflush(stdout);
}

}  // namespace

Derived derive(const Row& row, const MachineFloor& floor) {
    Derived d;
    const auto& m = row.plan->model;
    d.gflop = 6.0 * double(row.T) * double(m.k) * double(m.H) * double(m.I) * 1e-9;
    d.gbytes = double(dtype_size(row.dtype)) * 3.0 * double(m.H) * double(m.I) * row.result.e_touched * 1e-9;
    if (floor.gemm_gflops > 0 && floor.read_gbps > 0)
        d.floor_us = std::max(d.gflop / floor.gemm_gflops, d.gbytes / floor.read_gbps) * 1e6;
    const double us = row.result.median_us;
    if (us > 0) {
        d.gflops = d.gflop / (us * 1e-6);
        d.gbps = d.gbytes / (us * 1e-6);
        d.x_floor = d.floor_us > 0 ? us / d.floor_us : 0;
    }
    if (row.device == Device::kCPU && m.name == kLlamaShape && row.plan->E == m.E)
        for (const auto& a : kLlamaQwen3)
            if (a.T == row.T) {
                const bool f32 = row.dtype == DType::kF32;
                d.llama_layer_us = 3.0 * (f32 ? a.f32_weights_us : a.f16_weights_us);
                d.llama_weights = f32 ? "f32" : "f16";
            }
    return d;
}

void Reporter::header(const CpuInfo& cpu, const MachineFloor& f, const BenchConfig& c, const std::string& cmd) {
    if (json_) {
        emit({{"kind", "machine"},
              {"cpu", cpu.model},
              {"hardware_threads", cpu.hardware_threads},
              {"threads", c.threads},
              {"isa", cpu.isa},
              {"device", std::string(device_name(c.device))},
              {"llc_bytes", cpu.llc_bytes},
              {"llc_source", cpu.llc_source},
              {"dtype", std::string(dtype_name(c.dtype))},
              {"command", cmd}});
        nlohmann::ordered_json gemms = nlohmann::ordered_json::array();
        for (const auto& g : f.gemms) gemms.push_back({{"what", g.what}, {"gflops", g.gflops}});
        emit({{"kind", "floor"},
              {"read_gbps", f.read_gbps},
              {"read_buffer_bytes", f.read_buffer_bytes},
              {"gemm_size", f.gemm_size},
              {"gemms", gemms},
              {"gemm_gflops", f.gemm_gflops},
              {"gemm_best", f.gemm_best}});
        for (const auto& n : f.notes) note(n);
        return;
    }
    line(fmt::format("moex bench: {}", cmd));
    line(fmt::format("host: {} | {} hardware threads, {} used | LLC {} MiB ({}) | {}", cpu.model, cpu.hardware_threads,
                     c.threads, cpu.llc_bytes >> 20, cpu.llc_source, cpu.isa));
    line(fmt::format("device: {} | {} | weights rotated past a {} MiB cache", device_name(c.device),
                     dtype_name(c.dtype), c.llc_bytes >> 20));
    line("floor terms:");
    if (f.read_buffer_bytes > 0)
        line(
            fmt::format("  memory read bandwidth  {:7.1f} GB/s  measured: {} threads, AVX2 loads over a {} MiB buffer, "
                        "best of 5",
                        f.read_gbps, c.threads, f.read_buffer_bytes >> 20));
    for (const auto& g : f.gemms)
        line(fmt::format("  dense GEMM {}^3  {:7.1f} GFLOP/s  {}", f.gemm_size, g.gflops, g.what));
    if (f.gemm_gflops > 0 && f.read_gbps > 0)
        line(fmt::format("  floor = max(FLOPs / {:.1f} GFLOP/s [{}], bytes / {:.1f} GB/s)", f.gemm_gflops, f.gemm_best,
                         f.read_gbps));
    for (const auto& n : f.notes) note(n);
}

void Reporter::note(const std::string& text) {
    if (json_) return emit({{"kind", "note"}, {"text", text}});
    line("note: " + text);
}

void Reporter::table_start() {
    if (json_) return;
    line(
        "columns: µs = median wall time of one experts call (fresh uniform routing per repetition, weights not in "
        "cache);");
    line("  GFLOP/s = 6·T·k·H·I / t;  GB/s = dtype·3·H·I·E_touched / t (E_touched counted from the routing);");
    line("  ×floor = t / floor;  ×llama = t / (3 × ggml MUL_MAT_ID per-projection µs, baselines.md): ggml used f32");
    line(
        "  activations with f16 (or f32) weights and one weight set that fits in L3 at T=1; < 1 means moex is faster.");
    line(fmt::format("{:<18} {:>5} {:<11} {:>12} {:>8} {:>7} {:>7} {:>7} {:>12}  {}", "shape", "T", "backend", "µs",
                     "GFLOP/s", "GB/s", "E_touch", "×floor", "×llama", "reps"));
}

void Reporter::row(const Row& r, const MachineFloor& floor) {
    const auto& p = *r.plan;
    const std::string shape = p.E == p.model.E ? std::string(p.model.name) : fmt::format("{}/E{}", p.model.name, p.E);
    if (!r.result.skip.empty() || !r.error.empty()) {
        const bool skip = r.error.empty();
        if (json_)
            return emit({{"kind", skip ? "skip" : "error"},
                         {"impl", "moex"},
                         {"shape", p.model.name},
                         {"T", r.T},
                         {"backend", r.backend},
                         {"reason", skip ? r.result.skip : r.error}});
        return line(fmt::format("{:<18} {:>5} {:<11} {}: {}", shape, r.T, r.backend, skip ? "skipped" : "ERROR",
                                skip ? r.result.skip : r.error));
    }
    const Derived d = derive(r, floor);
    if (json_) {
        nlohmann::ordered_json j = {{"kind", "result"},
                                    {"impl", "moex"},
                                    {"shape", p.model.name},
                                    {"H", p.model.H},
                                    {"I", p.model.I},
                                    {"E", p.E},
                                    {"E_model", p.model.E},
                                    {"k", p.model.k},
                                    {"T", r.T},
                                    {"backend", r.backend},
                                    {"dtype", std::string(dtype_name(r.dtype))},
                                    {"threads", r.threads},
                                    {"us", r.result.median_us},
                                    {"min_us", r.result.min_us},
                                    {"reps", r.result.reps},
                                    {"warmup_only", r.result.warmup_only},
                                    {"e_touched", r.result.e_touched},
                                    {"gflop", d.gflop},
                                    {"gbytes", d.gbytes},
                                    {"gflops", d.gflops},
                                    {"gbps", d.gbps},
                                    {"output_ok", r.result.output_ok},
                                    {"device", std::string(device_name(r.device))}};
        if (d.floor_us > 0) {
            j["floor_us"] = d.floor_us;
            j["x_floor"] = d.x_floor;
        }
        if (d.llama_layer_us) {
            j["llama_layer_us"] = *d.llama_layer_us;
            j["llama_weights"] = d.llama_weights;
            j["x_llama"] = r.result.median_us / *d.llama_layer_us;
        }
        return emit(j);
    }
    const std::string llama =
        d.llama_layer_us ? fmt::format("{:.2f} ({})", r.result.median_us / *d.llama_layer_us, d.llama_weights) : "";
    std::string reps = r.result.warmup_only ? "1 (warm-up)" : std::to_string(r.result.reps);
    if (!r.result.output_ok) reps += "  OUTPUT HAS NaN";
    const std::string x_floor = d.floor_us > 0 ? fmt::format("{:.2f}", d.x_floor) : "—";
    line(fmt::format("{:<18} {:>5} {:<11} {:>12.1f} {:>8.1f} {:>7.2f} {:>7.1f} {:>7} {:>12}  {}", shape, r.T, r.backend,
                     r.result.median_us, d.gflops, d.gbps, r.result.e_touched, x_floor, llama, reps));
}

}  // namespace moex::bench
