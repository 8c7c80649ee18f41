// Text table and JSON-lines output of `moex bench`, and the derived columns (GFLOP/s, GB/s, floor, Hugging Face's best
// on CUDA).
#include "bench/report.h"

#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "moex/error.h"

namespace moex::bench {
namespace {

using Json = nlohmann::ordered_json;

void line(const std::string& s) {
    std::fputs((s + "\n").c_str(), stdout);
    std::fflush(stdout);
}

std::string shape_label(const ShapePlan& p) {
    return p.E == p.model.E ? std::string(p.model.name) : fmt::format("{}/E{}", p.model.name, p.E);
}

std::string backend_label(const Row& r) {
    return r.backend + (r.backward ? "+bwd" : "") + (r.result.kept ? "+keep" : "") + (r.graph ? "+graph" : "");
}

Json result_json(const Row& r, const Derived& d) {
    const auto& p = *r.plan;
    Json j = {{"kind", "result"},
              {"impl", "moex"},
              {"shape", p.model.name},
              {"H", p.model.H},
              {"I", p.model.I},
              {"E", p.E},
              {"E_model", p.model.E},
              {"k", p.model.k},
              {"T", r.T},
              {"backend", r.backend},
              {"graph", r.graph},
              {"backward", r.backward},
              {"kept", r.result.kept},
              {"dtype", std::string(dtype_name(r.dtype))},
              {"quant", r.quant.empty() ? std::string("none") : r.quant},
              {"weight_bytes", r.weight_bytes},
              {"threads", r.threads},
              {"us", r.result.median_us},
              {"reps", r.result.reps},
              {"warmup_only", r.result.warmup_only},
              {"e_touched", r.result.e_touched},
              {"gflop", d.gflop},
              {"gbytes", d.gbytes},
              {"gflops", d.gflops},
              {"gbps", d.gbps},
              {"output_ok", r.result.output_ok},
              {"device", std::string(device_name(r.device))}};
    if (r.result.min_us > 0) j["min_us"] = r.result.min_us;
    if (r.result.workspace_bytes >= 0) j["workspace_bytes"] = r.result.workspace_bytes;
    if (!r.result.check.empty()) j["check"] = r.result.check, j["check_ok"] = r.result.check_ok;
    if (d.floor_us > 0) j["floor_us"] = d.floor_us, j["x_floor"] = d.x_floor, j["below_floor"] = d.x_floor < 1;
    if (d.hf) {
        j["hf_best_us"] = d.hf->best_us;
        j["hf_best_config"] = std::string(d.hf->what);
        j["hf_over_moex"] = d.hf->best_us / r.result.median_us;
    }
    return j;
}

}  // namespace

Derived derive(const Row& row, const MachineFloor& floor) {
    Derived d;
    const auto& m = row.plan->model;
    const double esize = double(dtype_size(row.dtype));
    d.gflop = 6.0 * double(row.T) * double(m.k) * double(m.H) * double(m.I) * 1e-9;
    d.gbytes = (row.weight_bytes * 3.0 * double(m.H) * double(m.I) * row.result.e_touched +
                esize * 2.0 * double(row.T) * double(m.H)) *
               1e-9;
    if (row.backward) {
        // dX and dW of both projections (twice the forward's FLOPs; the forward GEMMs it recomputes are not counted);
        // the touched weights read twice, every expert's weight gradient written once, x and dO read, dx written.
        d.gflop *= 2.0;
        d.gbytes = (esize * 3.0 * double(m.H) * double(m.I) * (2.0 * row.result.e_touched + double(row.plan->E)) +
                    esize * 3.0 * double(row.T) * double(m.H)) *
                   1e-9;
    }
    if (floor.gemm_gflops > 0 && floor.read_gbps > 0)
        d.floor_us = std::max(d.gflop / floor.gemm_gflops, d.gbytes / floor.read_gbps) * 1e6;
    const double us = row.result.median_us;
    if (us > 0) {
        d.gflops = d.gflop / (us * 1e-6);
        d.gbps = d.gbytes / (us * 1e-6);
        d.x_floor = d.floor_us > 0 ? us / d.floor_us : 0;
    }
    const bool full = row.plan->E == m.E;
    const bool plain = row.quant.empty();  // the baselines are of unquantized experts
    if (row.device == Device::kCUDA && row.dtype == DType::kBF16 && full && plain && !row.backward && us > 0 &&
        hf_baselines_apply(floor.device))
        d.hf = hf_best(m.name, row.T);
    return d;
}

Reporter::Reporter(bool json_stdout, const std::string& json_path) : text_(!json_stdout) {
    if (json_stdout) {
        json_ = stdout;
    } else if (!json_path.empty()) {
        json_ = std::fopen(json_path.c_str(), "w");
        MOEX_REQUIRE(json_ != nullptr, ErrorCode::kInvalidArgument, "--json-file: cannot write `" + json_path + "`");
        own_json_ = true;
    }
}

Reporter::~Reporter() {
    if (own_json_) std::fclose(json_);
}

void Reporter::emit(const std::string& s) {
    if (json_ == nullptr) return;
    std::fputs((s + "\n").c_str(), json_);
    std::fflush(json_);
}

void Reporter::header(const CpuInfo& cpu, const MachineFloor& f, const BenchConfig& c, const std::string& cmd) {
    emit(Json{{"kind", "machine"},
              {"cpu", cpu.model},
              {"hardware_threads", cpu.hardware_threads},
              {"threads", c.threads},
              {"isa", cpu.isa},
              {"cpu_kernels", cpu.kernels},
              {"cpu_pinning", cpu.pinning},
              {"device", std::string(device_name(c.device))},
              {"graph", c.graph},
              {"llc_bytes", c.llc_bytes},
              {"llc_source", c.device == Device::kCPU ? cpu.llc_source : "H200 L2"},
              {"dtype", std::string(dtype_name(c.dtype))},
              {"command", cmd}}
             .dump());
    Json gemms = Json::array();
    for (const auto& g : f.gemms) gemms.push_back({{"what", g.what}, {"gflops", g.gflops}});
    emit(Json{{"kind", "floor"},
              {"read_gbps", f.read_gbps},
              {"read_buffer_bytes", f.read_buffer_bytes},
              {"read_what", f.read_what},
              {"gemm_size", f.gemm_size},
              {"gemms", gemms},
              {"gemm_gflops", f.gemm_gflops},
              {"gemm_best", f.gemm_best}}
             .dump());
    if (text_) text_header(cpu, f, c, cmd);
    for (const auto& n : f.notes) note(n);
}

void Reporter::text_header(const CpuInfo& cpu, const MachineFloor& f, const BenchConfig& c, const std::string& cmd) {
    line(fmt::format("moex bench: {}", cmd));
    line(fmt::format("host: {} | {} hardware threads, {} used | LLC {} MiB ({}) | {}", cpu.model, cpu.hardware_threads,
                     c.threads, cpu.llc_bytes >> 20, cpu.llc_source, cpu.isa));
    if (c.device == Device::kCPU) {
        line(fmt::format("CPU kernels of every CPU backend: {}", cpu.kernels));
        line(fmt::format("threads pinned (MOEX_CPU_PIN=1): {}", cpu.pinning));
    }
    line(fmt::format("device: {}{} | {}{} | weights rotated past a {} MiB cache", device_name(c.device),
                     c.graph ? " (CUDA-graph replay)" : "", dtype_name(c.dtype),
                     c.quant == QuantFormat::kNone
                         ? ""
                         : " activations, weights " + quant_label(c) +
                               fmt::format(" ({:.3f} bytes per weight)", weight_bytes_per_element(c)),
                     c.llc_bytes >> 20));
    line("floor terms:");
    if (f.read_buffer_bytes > 0)
        line(fmt::format("  memory read bandwidth  {:7.1f} GB/s  measured: {} threads over a {} MiB buffer, {}",
                         f.read_gbps, c.threads, f.read_buffer_bytes >> 20, f.read_what));
    else if (f.read_gbps > 0)
        line(fmt::format("  memory bandwidth  {:.1f} GB/s  {}", f.read_gbps, f.read_what));
    for (const auto& g : f.gemms)
        line(fmt::format("  dense GEMM  {:9.1f} GFLOP/s  {}", g.gflops, g.what));  // each name carries its size
    if (f.gemm_gflops > 0 && f.read_gbps > 0)
        line(fmt::format("  floor = max(FLOPs / {:.1f} GFLOP/s [{}], bytes / {:.1f} GB/s)", f.gemm_gflops, f.gemm_best,
                         f.read_gbps));
}

void Reporter::note(const std::string& text) {
    emit(Json{{"kind", "note"}, {"text", text}}.dump());
    if (text_) line("note: " + text);
}

void Reporter::table_start(Device device, bool backward) {
    if (!text_) return;
    line("columns: µs = median time of one experts call (fresh uniform routing per repetition, weights not in cache);");
    if (backward) {
        line(
            "  +bwd: the backward pass, every gradient (x, routing weights, gate_up_proj, down_proj); +keep: it read "
            "the");
        line("  gate/up pre-activation one untimed forward kept (else it recomputes that GEMM, not counted in FLOPs);");
        line("  FLOPs = 12·T·k·H·I (dX and dW of both projections; the forward GEMMs it recomputes are not counted);");
        line("  bytes = dtype·3·H·I·(2·E_touched + E) + dtype·3·T·H (weights read twice, gradients written once);");
    } else {
        line(
            "  FLOPs = 6·T·k·H·I;  bytes = w·3·H·I·E_touched + dtype·2·T·H, E_touched counted from the routing, w the");
        line("  bytes of one expert weight as stored (the dtype, or FP8 / FP4 codes plus their scales);");
    }
    if (device == Device::kCPU) {
        line("  ×floor = t / floor;  the peers (transformers, llama.cpp) in the same run: bench/cpu_side_by_side.sh.");
        line(fmt::format("{:<18} {:>5} {:<11} {:>12} {:>8} {:>7} {:>7} {:>7}  {}", "shape", "T", "backend", "µs",
                         "GFLOP/s", "GB/s", "E_touch", "×floor", "reps"));
        return;
    }
    line(
        "  CUDA events (cuda::time_us), 8 rotating routing sets; +graph: the 8 calls replayed as one CUDA graph, ÷ 8;");
    line(
        "  ×floor = t / floor;  HF = best transformers 5.17 configuration (RESULTS.md);  HF÷moex > 1: moex is faster;");
    line(
        "  check = max|Δ|/rms against the (reference): the first backend at that T; MISMATCH beyond 1e-2·rms plus two");
    line("  output steps at |ref| (bf16 ulps), but for a rounding tail of <= 1e-6 of the values within 5e-2·rms;");
    line("  outputs are poisoned with NaN before the run.");
    line("  ws MiB = peak of moex's device workspace pool over one call (docs/design.md gives the bound).");
    line(fmt::format("{:<18} {:>5} {:<16} {:>9} {:>8} {:>6} {:>7} {:>5} {:>5} {:>7} {:>7} {:>8} {:>4}  {}", "shape",
                     "T", "backend", "µs", "floor µs", "×floor", "TFLOP/s", "TB/s", "E_tch", "HF µs", "HF÷moex",
                     "ws MiB", "reps", "check"));
}

void Reporter::row(const Row& r, const MachineFloor& floor) {
    if (!r.result.skip.empty() || !r.error.empty()) {
        const bool skip = r.error.empty();
        emit(Json{{"kind", skip ? "skip" : "error"},
                  {"impl", "moex"},
                  {"shape", r.plan->model.name},
                  {"T", r.T},
                  {"backend", r.backend},
                  {"graph", r.graph},
                  {"backward", r.backward},
                  {"reason", skip ? r.result.skip : r.error}}
                 .dump());
        if (text_)
            line(fmt::format("{:<18} {:>5} {:<11} {}: {}", shape_label(*r.plan), r.T, backend_label(r),
                             skip ? "skipped" : "ERROR", skip ? r.result.skip : r.error));
        return;
    }
    const Derived d = derive(r, floor);
    emit(result_json(r, d).dump());
    if (text_) text_row(r, d);
}

void Reporter::text_row(const Row& r, const Derived& d) {
    std::string reps = r.result.warmup_only ? "1 (warm-up)" : std::to_string(r.result.reps);
    if (!r.result.output_ok) reps += "  OUTPUT HAS NaN";
    if (d.floor_us > 0 && d.x_floor < 1) reps += "  BELOW THE FLOOR";  // a floor term was measured too low
    const std::string x_floor = d.floor_us > 0 ? fmt::format("{:.2f}", d.x_floor) : "—";
    if (r.device == Device::kCPU) {
        return line(fmt::format("{:<18} {:>5} {:<11} {:>12.1f} {:>8.1f} {:>7.2f} {:>7.1f} {:>7}  {}",
                                shape_label(*r.plan), r.T, backend_label(r), r.result.median_us, d.gflops, d.gbps,
                                r.result.e_touched, x_floor, reps));
    }
    const std::string hf = d.hf ? fmt::format("{:.0f}", d.hf->best_us) : "—";
    const std::string ratio = d.hf ? fmt::format("{:.2f}", d.hf->best_us / r.result.median_us) : "—";
    const std::string ws =
        r.result.workspace_bytes >= 0 ? fmt::format("{:.1f}", double(r.result.workspace_bytes) / (1 << 20)) : "—";
    line(fmt::format(
        "{:<18} {:>5} {:<16} {:>9.1f} {:>8.1f} {:>6} {:>7.1f} {:>5.2f} {:>5.1f} {:>7} {:>7} {:>8} {:>4}  {}",
        shape_label(*r.plan), r.T, backend_label(r), r.result.median_us, d.floor_us, x_floor, d.gflops * 1e-3,
        d.gbps * 1e-3, r.result.e_touched, hf, ratio, ws, reps, r.result.check));
}

}  // namespace moex::bench
