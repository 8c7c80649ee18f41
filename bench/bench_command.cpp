// `moex bench`: backends × shapes × token counts on the CPU (floor terms measured first) or on CUDA (the card's
// measured peaks; Hugging Face's best). Shapes come from common/shapes.h. The peers measured in the same run:
// bench/cpu_side_by_side.sh and bench/cuda_side_by_side.sh.
#include "bench/bench_command.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <new>
#include <variant>

#include "bench/baselines.h"
#include "bench/cases.h"
#include "bench/cuda_cases.h"
#include "bench/machine.h"
#include "bench/report.h"
#include "common/cli_parse.h"
#include "common/shapes.h"
#include "moex/device.h"
#include "moex/error.h"
#if MOEX_WITH_CUDA
#include "cuda/common/peaks.h"
#include "cuda/launch.h"
#endif

namespace moex::bench {
namespace {

constexpr int64_t kHopperL2Bytes = 60LL << 20;  // H200 L2 (60 MB): what weight rotation must exceed on CUDA

// 0 / -1 / empty: the device's default (DeviceDefaults).
struct BenchArgs {
    std::string device = "cpu", dtype = "bf16", json_file, quant = "none", block = "128x128", scale_fmt = "float",
                activation_scheme;
    std::vector<std::string> backends, shapes, peer_gemms;
    std::vector<int64_t> tokens;
    int threads = 0, reps = 0, warmup = -1;
    double case_seconds = 0, settle_seconds = -1, max_weight_gb = 0, peak_gflops = 0, peak_gbps = 0;
    int64_t read_mib = 1024, gemm_n = 2048;
    uint64_t seed = 0;
    bool json = false, floor_only = false, graph = false, backward = false, keep = false, recompute = false;
};

// CUDA: one call is 10 µs–30 ms, so more repetitions in less time; the full models (deepseek-v3: 22.5 GB of bf16) fit
// on the 141 GB card, so no E reduction; eager is left out by default as it synchronises the host.
struct DeviceDefaults {
    int reps, warmup;
    double case_seconds, settle_seconds, max_weight_gb;
    std::vector<int64_t> tokens;
    std::vector<std::string> backends;  // empty: every registered backend
};
// --peer-gemm "WHAT=GFLOPS": the rate, or why the text is not one (for the option's validator).
std::variant<GemmRate, std::string> parse_peer_gemm(const std::string& s) {
    const size_t eq = s.rfind('=');
    if (eq == std::string::npos || eq == 0) return "expected WHAT=GFLOPS, got '" + s + "'";
    char* end = nullptr;
    const double v = std::strtod(s.c_str() + eq + 1, &end);
    if (end == s.c_str() + eq + 1 || *end != '\0' || !(v > 0) || !std::isfinite(v))
        return "the rate after '=' must be a positive number of GFLOP/s, got '" + s.substr(eq + 1) + "'";
    return GemmRate{s.substr(0, eq) + " (--peer-gemm)", v};
}

const DeviceDefaults& defaults_for(Device d) {
    static const DeviceDefaults cpu{5, 1, 10, 1, 6, {shapes::kBenchTokens.begin(), shapes::kBenchTokens.end()}, {}};
    static const DeviceDefaults gpu{25, 2, 2, 0, 100, {1, 8, 64, 512, 4096, 16384}, {"batched_mm", "grouped_mm"}};
    return d == Device::kCPU ? cpu : gpu;
}

void require_cuda_device() {
#if MOEX_WITH_CUDA
    std::string why;
    MOEX_REQUIRE(cuda::device_ready(&why), ErrorCode::kUnsupported, "--device cuda: no CUDA device is usable: " + why);
#else
    fail(ErrorCode::kUnsupported, "--device cuda: no CUDA device: this build of moex has no CUDA support");
#endif
}

std::vector<shapes::ExpertsShape> pick_shapes(const std::vector<std::string>& names) {
    if (names.empty()) return {shapes::kModelShapes.begin(), shapes::kModelShapes.end()};
    std::vector<shapes::ExpertsShape> out;
    for (const auto& n : names) {
        const shapes::ExpertsShape* found = nullptr;
        std::string valid;
        auto look = [&](const auto& table) {
            for (const auto& s : table) {
                if (s.name == n) found = &s;
                valid += (valid.empty() ? "" : ", ") + std::string(s.name);
            }
        };
        look(shapes::kModelShapes), look(shapes::kPeerShapes);
        MOEX_REQUIRE(found != nullptr, ErrorCode::kInvalidArgument, "unknown shape `" + n + "`; valid: " + valid);
        out.push_back(*found);
    }
    return out;
}

// The backends to time and, for each one left out, why. Default: every registered backend (built-in or not).
std::vector<const Backend*> pick_backends(const std::vector<std::string>& names, Device device,
                                          std::vector<std::string>& notes) {
    const auto& registry = ExpertsInterface::global();
    const std::vector<std::string> all = names.empty() ? registry.names() : names;
    std::vector<const Backend*> out;
    for (const auto& n : all) {
        const Backend& b = registry.get(n);  // an unknown name: the registry's error, listing the valid ones
        if (auto why = b.unavailable(device))
            notes.push_back(fmt::format("{} skipped: {}", n, *why));
        else
            out.push_back(&b);
    }
    return out;
}

// Fills the device defaults into `a` and checks it.
BenchConfig make_config(BenchArgs& a) {
    BenchConfig c;
    c.device = common::parse_device(a.device);
    if (c.device == Device::kCUDA) require_cuda_device();
    MOEX_REQUIRE(!a.graph || c.device == Device::kCUDA, ErrorCode::kInvalidArgument, "--graph needs --device cuda");
    const DeviceDefaults& d = defaults_for(c.device);
    if (a.reps == 0) a.reps = d.reps;
    if (a.warmup < 0) a.warmup = d.warmup;
    if (a.case_seconds == 0) a.case_seconds = d.case_seconds;
    if (a.settle_seconds < 0) a.settle_seconds = d.settle_seconds;
    if (a.max_weight_gb == 0) a.max_weight_gb = d.max_weight_gb;
    if (a.tokens.empty()) a.tokens = d.tokens;
    if (a.backends.empty()) a.backends = d.backends;
    c.graph = a.graph;
    c.backward = a.backward;
    c.keep = a.keep, c.recompute = a.recompute;
    MOEX_REQUIRE(!a.recompute || a.backward, ErrorCode::kInvalidArgument, "--recompute goes with --backward");
    MOEX_REQUIRE(!a.keep || !a.backward, ErrorCode::kInvalidArgument,
                 "--keep times the training forward; --backward reads what it keeps unless --recompute");
    MOEX_REQUIRE(!a.backward || a.quant == "none", ErrorCode::kInvalidArgument,
                 "--backward: quantized experts have no backward (their codes have no gradient)");
    c.dtype = common::parse_activation_dtype(a.dtype);
    c.threads = common::resolve_threads(a.threads);
    MOEX_REQUIRE(a.reps >= 1 && a.warmup >= 0, ErrorCode::kInvalidArgument, "--reps must be >= 1, --warmup >= 0");
    MOEX_REQUIRE(a.case_seconds > 0 && a.max_weight_gb > 0, ErrorCode::kInvalidArgument,
                 "--case-seconds and --max-weight-gb must be positive");
    MOEX_REQUIRE(c.device == Device::kCPU || a.settle_seconds == 0, ErrorCode::kInvalidArgument,
                 "--settle-seconds is a CPU setting (the CUDA cases warm up per case)");
    MOEX_REQUIRE(a.read_mib >= 64 && a.gemm_n >= 64, ErrorCode::kInvalidArgument,
                 "--read-mib and --gemm-n must be >= 64");
    for (int64_t t : a.tokens)
        MOEX_REQUIRE(t >= 1, ErrorCode::kInvalidArgument, "--tokens must all be >= 1, got " + std::to_string(t));
    c.reps = a.reps;
    c.warmup = a.warmup;
    c.case_seconds = a.case_seconds;
    c.settle_seconds = a.settle_seconds;
    c.seed = a.seed;
    c.max_weight_bytes = int64_t(a.max_weight_gb * double(1LL << 30));
    const common::QuantOptions q = common::parse_quant_options(a.quant, a.block, a.scale_fmt, a.activation_scheme);
    c.quant = q.format;
    if (c.quant != QuantFormat::kNone) {
        MOEX_REQUIRE(q.activations != ActivationQuant::kStatic, ErrorCode::kInvalidArgument,
                     "--activation-scheme static: the bench takes dynamic or none (static scales are a property of a "
                     "calibrated checkpoint: use a problem file)");
        c.block = q.block, c.scale_dtype = q.scale_dtype, c.act = q.activations;
    }
    return c;
}

// CUDA: the card's read bandwidth and dense GEMM rates measured now (cuda/common/peaks.h); the GEMM term is the
// FP8 rate for FP8 weights with quantized activations (they run on the FP8 tensor cores), else the bf16 rate.
void measure_cuda_floor(const BenchConfig& c, MachineFloor& floor, std::vector<std::string>& notes) {
#if MOEX_WITH_CUDA
    const cuda::DevicePeaks pk = cuda::measure_device_peaks(size_t(4) << 30, 8192);
    floor.read_gbps = std::max(pk.read_gbps, pk.copy_gbps), floor.device = pk.device;
    if (!hf_baselines_apply(pk.device))
        notes.push_back(
            fmt::format("HF µs: the transformers baselines compiled in were measured on the {}, not on the {}: "
                        "not shown (bench/cuda_side_by_side.sh runs the peers on this card)",
                        kHfCard, pk.device));
    floor.read_what = fmt::format(
        "measured on the {}: best of a streaming read of 4 GiB ({:.1f}) and a device copy "
        "((read + written bytes) / t: {:.1f})",
        pk.device, pk.read_gbps, pk.copy_gbps);
    const std::string bf16 = fmt::format("cuBLAS bf16 {}³ matmul, measured now", pk.gemm_n);
    floor.gemms.push_back({bf16, pk.bf16_gflops});
    floor.gemm_gflops = pk.bf16_gflops, floor.gemm_best = bf16;
    if (pk.fp8_gflops > 0) {
        const std::string fp8 =
            fmt::format("cuBLASLt e4m3 {}³ matmul, measured now (spec dense FP8 peak 1979000)", pk.gemm_n);
        floor.gemms.push_back({fp8, pk.fp8_gflops});
        if (c.quant == QuantFormat::kFp8 && c.act == ActivationQuant::kDynamic)
            floor.gemm_gflops = pk.fp8_gflops, floor.gemm_best = fp8;
    } else {
        notes.push_back("no FP8 GEMM rate: " + pk.fp8_why);
    }
    if (c.dtype != DType::kBF16) notes.push_back("the CUDA floor uses the bf16 GEMM rate whatever --dtype is");
#else
    (void)c, (void)floor, (void)notes;
    fail(ErrorCode::kUnsupported, "this build of moex has no CUDA support");
#endif
}

// Measured on the CPU and on CUDA; --peak-* override either.
MachineFloor make_floor(const BenchArgs& a, const BenchConfig& c, std::vector<std::string>& notes) {
    MachineFloor floor;
    if (c.device == Device::kCPU) {
        floor = measure_floor(c.threads, c.dtype, a.read_mib << 20, a.gemm_n, c.settle_seconds);
    } else {
        measure_cuda_floor(c, floor, notes);
    }
    for (const std::string& peer : a.peer_gemms) {  // checked by the option's validator
        const GemmRate rate = std::get<GemmRate>(parse_peer_gemm(peer));
        floor.gemms.push_back(rate);
        if (rate.gflops > floor.gemm_gflops)  // its size is in its name
            floor.gemm_gflops = rate.gflops, floor.gemm_best = rate.what, floor.gemm_size = 0;
    }
    if (a.peak_gflops > 0) {
        floor.gemms = {{"given by --peak-gflops", a.peak_gflops}};
        floor.gemm_gflops = a.peak_gflops, floor.gemm_best = "given by --peak-gflops";
    }
    if (a.peak_gbps > 0) floor.read_gbps = a.peak_gbps, floor.read_what = "given by --peak-gbps";
    return floor;
}

bool below_floor(const Row& row, const MachineFloor& floor) {
    const Derived d = derive(row, floor);
    return d.floor_us > 0 && d.x_floor > 0 && d.x_floor < 1;
}

// The failed cases of a run, and those faster than their floor (judged again against later floor measurements).
struct Outcome {
    int failures = 0;              // an error, a wrong output
    std::vector<Row> below;        // a time below the floor measured at the start
    std::vector<MachineFloor> at;  // below[i]'s floor measured again right after it
};

// Each term of the two floors at its better (faster) measurement.
MachineFloor better(MachineFloor x, const MachineFloor& y) {
    if (y.read_gbps > x.read_gbps) x.read_gbps = y.read_gbps, x.read_what = y.read_what;
    if (y.gemm_gflops > x.gemm_gflops)
        x.gemm_gflops = y.gemm_gflops, x.gemm_best = y.gemm_best, x.gemm_size = y.gemm_size;
    return x;
}

// Every (T, backend) case of one shape, into `out`.
void run_shape(const ShapePlan& plan, const BenchArgs& a, const BenchConfig& config,
               const std::vector<const Backend*>& backends, const MachineFloor& floor, Reporter& report, Outcome& out) {
    std::unique_ptr<CaseRunner> bench;
    try {
        bench =
            config.device == Device::kCPU ? std::make_unique<ShapeBench>(plan, config) : make_cuda_runner(plan, config);
    } catch (const std::exception& e) {  // bad_alloc, or moex::Error from a refused allocation
        report.note(fmt::format("{}: could not allocate {:.1f} GB of weights ({}); lower --max-weight-gb",
                                plan.model.name, double(plan.set_bytes) * plan.sets * 1e-9, e.what()));
        ++out.failures;
        return;
    }
    for (int64_t T : a.tokens)
        for (const Backend* b : backends) {
            Row row{.plan = &plan,
                    .T = T,
                    .backend = std::string(b->name()),
                    .device = config.device,
                    .dtype = config.dtype,
                    .threads = config.threads,
                    .graph = config.graph,
                    .backward = config.backward,
                    .weight_bytes = weight_bytes_per_element(config),
                    .quant = quant_label(config)};
            try {
                row.result = bench->run(*b, T);
            } catch (const Error& e) {
                row.error = e.what();
            } catch (const std::bad_alloc&) {
                row.error = "out of memory";
            }
            out.failures += !row.error.empty() || !row.result.output_ok || !row.result.check_ok;
            report.row(row, floor);
            if (row.error.empty() && below_floor(row, floor)) {
                std::vector<std::string> ignored;
                out.below.push_back(row);
                out.at.push_back(make_floor(a, config, ignored));
            }
        }
}

// A call faster than its floor means a floor term was measured too low (issue #15). A shared machine's speed moves
// between minutes (RESULTS AR2: a VM's dense GEMM 493 then 603 GFLOP/s a minute apart), so a case under the floor
// measured at the start has it measured again right after the case, and once more after all cases; each term is the
// best of the three, and a case still under it fails the run. Returns how many do.
int judge_below_floor(const Outcome& out, const BenchArgs& a, const BenchConfig& config, const MachineFloor& first,
                      Reporter& report) {
    if (out.below.empty()) return 0;
    std::vector<std::string> ignored;
    const MachineFloor end = better(make_floor(a, config, ignored), first);
    report.note(
        fmt::format("{} case(s) ran below the floor: measured again right after each and after the cases (read {:.1f} "
                    "GB/s, GEMM {:.1f} GFLOP/s; at the start {:.1f}, {:.1f}); each case against the best of the three",
                    out.below.size(), end.read_gbps, end.gemm_gflops, first.read_gbps, first.gemm_gflops));
    int failures = 0;
    for (size_t i = 0; i < out.below.size(); ++i) {
        const Row& row = out.below[i];
        const MachineFloor best = better(end, out.at[i]);
        const Derived d = derive(row, best);
        const bool still = below_floor(row, best);
        failures += still;
        report.note(
            fmt::format("{} T={} {}: {:.1f} us against a floor of {:.1f} us (x{:.2f}; right after it: read "
                        "{:.1f} GB/s, GEMM {:.1f} GFLOP/s){}",
                        row.plan->model.name, row.T, row.backend, row.result.median_us, d.floor_us, d.x_floor,
                        out.at[i].read_gbps, out.at[i].gemm_gflops, still ? ": STILL BELOW THE FLOOR" : ""));
    }
    return failures;
}

void run(BenchArgs a) {
    BenchConfig config = make_config(a);
    const CpuInfo cpu = probe_cpu();
    config.llc_bytes = config.device == Device::kCPU ? cpu.llc_bytes : kHopperL2Bytes;
    std::vector<std::string> notes;
    const auto backends = pick_backends(a.backends, config.device, notes);
    std::vector<ShapePlan> plans;
    for (const auto& s : pick_shapes(a.shapes)) {
        plans.push_back(plan_shape(s, config));
        if (!plans.back().note.empty()) notes.push_back(plans.back().note);
    }
    if (config.threads > cpu.hardware_threads)
        notes.push_back(fmt::format("--threads {} exceeds the {} hardware threads: timings include oversubscription",
                                    config.threads, cpu.hardware_threads));
    const MachineFloor floor = make_floor(a, config, notes);
    Reporter report(a.json, a.json_file);
    report.header(cpu, floor, config, common::command_line());
    for (const auto& n : notes) report.note(n);
    if (a.floor_only) return;
    if (backends.empty())
        fail(ErrorCode::kUnsupported, "no selected backend can run on " + std::string(device_name(config.device)));

    report.table_start(config.device, config.backward);
    Outcome outcome;
    for (const auto& plan : plans) run_shape(plan, a, config, backends, floor, report, outcome);
    const int failures = outcome.failures + judge_below_floor(outcome, a, config, floor, report);
    if (failures > 0)
        fail(ErrorCode::kUnsupported,
             fmt::format("{} bench case(s) failed (see the ERROR / NaN / MISMATCH / BELOW THE FLOOR rows above)",
                         failures));
}

}  // namespace

void add_bench_command(CLI::App& app) {
    auto a = std::make_shared<BenchArgs>();
    CLI::App* cmd = app.add_subcommand("bench",
                                       "Time backends × shapes × token counts against the machine's floor (and, on "
                                       "CUDA, Hugging Face's best)");
    cmd->add_option("--device", a->device, "cpu or cuda")->capture_default_str();
    cmd->add_option("--backends", a->backends,
                    "Comma-separated backend names (default: CPU every registered one; CUDA batched_mm,grouped_mm)")
        ->delimiter(',');
    cmd->add_option(
           "--shapes", a->shapes,
           "Comma-separated shape names from common/shapes.h: the models (default: all of them) and SonicMoE's "
           "sonicmoe-coarse, sonicmoe-7b")
        ->delimiter(',');
    cmd->add_option("--tokens", a->tokens,
                    "Comma-separated token counts (default: CPU 1,8,64,512,1024,4096; CUDA 1,8,64,512,4096,16384)")
        ->delimiter(',');
    cmd->add_option("--dtype", a->dtype, "Activation and weight dtype: bf16, f16, f32")->capture_default_str();
    cmd->add_option("--threads", a->threads, "CPU threads (0 = all hardware threads)")->capture_default_str();
    cmd->add_option("--reps", a->reps, "Timed repetitions per case, median reported (default: CPU 5, CUDA 25)");
    cmd->add_option("--warmup", a->warmup, "Untimed repetitions first (default: CPU 1, CUDA 2)");
    cmd->add_option("--case-seconds", a->case_seconds,
                    "Cut repetitions so a case takes about this long (default: CPU 10, CUDA 2)");
    cmd->add_option("--settle-seconds", a->settle_seconds,
                    "CPU: untimed calls of a shape's first case for this long before it is timed: the first reads of "
                    "fresh weight sets ran up to 3x slower on a VM (default 1, RESULTS.md AF)")
        ->check([](const std::string& v) -> std::string {
            char* end = nullptr;
            const double x = std::strtod(v.c_str(), &end);
            return end != v.c_str() && *end == '\0' && std::isfinite(x) && x >= 0
                       ? ""
                       : "must be a number of seconds >= 0, got '" + v + "'";
        });
    cmd->add_option("--max-weight-gb", a->max_weight_gb,
                    "Weight memory per shape (GiB); E is reduced to fit (default: CPU 6, CUDA 100)");
    cmd->add_option("--peak-gflops", a->peak_gflops,
                    "GEMM rate of the floor (default: measured in the run, CPU and CUDA)");
    cmd->add_option("--peer-gemm", a->peer_gemms,
                    "WHAT=GFLOPS: a dense GEMM rate measured outside moex on this machine in the same run (e.g. "
                    "torch.matmul on oneDNN's AMX, bench/torch_gemm_rate.py), one of the floor's GEMMs (repeatable)")
        ->check([](const std::string& s) -> std::string {
            const auto rate = parse_peer_gemm(s);
            return std::holds_alternative<std::string>(rate) ? std::get<std::string>(rate) : "";
        });
    cmd->add_option("--peak-gbps", a->peak_gbps, "Bandwidth of the floor (default: measured in the run, CPU and CUDA)");
    cmd->add_option("--read-mib", a->read_mib, "CPU: buffer for the bandwidth test (MiB)")->capture_default_str();
    cmd->add_option("--gemm-n", a->gemm_n, "CPU: M = N = K of the dense GEMM test")->capture_default_str();
    cmd->add_option("--seed", a->seed, "Random seed")->capture_default_str();
    cmd->add_option("--quant", a->quant, "Quantized expert weights: none, fp8_block, mxfp4, nvfp4")
        ->capture_default_str();
    cmd->add_option("--block", a->block, "fp8_block weight_block_size <rows>x<cols>, or none")->capture_default_str();
    cmd->add_option("--scale-fmt", a->scale_fmt, "fp8_block scales: float or ue8m0")->capture_default_str();
    cmd->add_option("--activation-scheme", a->activation_scheme, "dynamic or none (default: dynamic for fp8_block)");
    cmd->add_flag("--graph", a->graph, "CUDA: time replays of a CUDA graph (8 calls captured, replay ÷ 8)");
    cmd->add_flag("--backward", a->backward,
                  "Time the backward pass instead (gradients of x, the routing weights and both projections); where "
                  "the backend keeps its gate/up pre-activation (CUDA grouped_mm, sonicmoe), it reads what one untimed "
                  "forward kept");
    cmd->add_flag("--recompute", a->recompute, "--backward: keep nothing; the backward recomputes the up projection");
    cmd->add_flag("--keep", a->keep,
                  "Time the training forward: where the backend can, it keeps its gate/up pre-activation");
    cmd->add_flag("--floor-only", a->floor_only, "Print the floor terms, time nothing");
    cmd->add_flag("--json", a->json, "JSON lines on stdout instead of the text table");
    cmd->add_option("--json-file", a->json_file, "Also write the JSON lines to this file (the table stays on stdout)");
    cmd->callback([a] { run(*a); });
}

}  // namespace moex::bench
