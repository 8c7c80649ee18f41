// `moex generate [--model DIR] --prompt TEXT [--experts-implementation NAME | KEY=NAME,...] [--device cpu|cuda]
//  [--dtype f32|bf16] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--dequantize]
//  [--no-decode-graph] [--json]`:
// loads a Hugging Face MoE checkpoint (default: the small model shipped in models/moex-tiny-moe), streams the
// generated text to stdout, then prints prefill and decode tokens/s. With --json it prints one object
// {"prompt_ids": [...], "new_ids": [...], "text": "..."} instead. Greedy when the temperature is 0.
// Benchmark helpers: --random-prompt N, --ignore-eos, --runs N (median speeds).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "moex/error.h"
#include "moex/model.h"
#include "tools/cli.h"

#ifndef MOEX_SOURCE_DIR
#define MOEX_SOURCE_DIR "."
#endif
#ifndef MOEX_DATA_FROM_BIN
#define MOEX_DATA_FROM_BIN "../share/moex"
#endif

namespace moex::cli {
namespace {

struct GenerateArgs {
    std::string model, prompt, experts, device = "cpu", dtype;
    int64_t max_new_tokens = 64, top_k = -1, max_context = 0;
    double temperature = -1, top_p = -1;
    uint64_t seed = 0;
    int threads = 0, runs = 1;
    int64_t random_prompt = 0;
    bool json = false, verbose = false, ignore_eos = false, dequantize = false, no_decode_graph = false;
};

// The shipped model: $MOEX_DEFAULT_MODEL; else the installed copy beside this program (<prefix>/bin/moex ->
// <prefix>/share/moex/models/moex-tiny-moe); else models/moex-tiny-moe of the source tree it was built from.
std::string default_model() {
    namespace fs = std::filesystem;
    if (const char* env = std::getenv("MOEX_DEFAULT_MODEL"); env && *env) return env;
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    if (!ec) {
        const fs::path installed = exe.parent_path() / MOEX_DATA_FROM_BIN / "models" / "moex-tiny-moe";
        if (fs::is_regular_file(installed / "config.json", ec)) return installed.lexically_normal().string();
    }
    return (fs::path(MOEX_SOURCE_DIR) / "models" / "moex-tiny-moe").string();
}

// A finite number >= lo (> lo when `open_lo`), at most `hi`: NaN and infinities never pass, and neither do the
// negative values that mean "not given" here (a --temperature -1 used to be read as absent, so the config's
// sampling ran instead).
CLI::Validator finite_number(double lo, bool open_lo, double hi = INFINITY) {
    const std::string range = std::isinf(hi) ? fmt::format("{} {}", open_lo ? ">" : ">=", lo)
                                             : fmt::format("in {}{}, {}]", open_lo ? "(" : "[", lo, hi);
    return CLI::Validator(
        [=](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v)) return "not a number: " + text;
            const bool ok = std::isfinite(v) && (open_lo ? v > lo : v >= lo) && v <= hi;
            return ok ? "" : "must be a finite number " + range + ", got " + text;
        },
        "");
}

void run(const GenerateArgs& a) {
    ModelOptions options;
    options.device = parse_device(a.device);
    if (!a.dtype.empty()) options.dtype = parse_activation_dtype(a.dtype);
    if (!a.experts.empty()) options.experts_implementation = ExpertsImplementation::parse(a.experts);
    options.num_threads = resolve_threads(a.threads);
    options.max_context = a.max_context;
    options.dequantize = a.dequantize;
    options.decode_graph = !a.no_decode_graph;
    const std::string dir = a.model.empty() ? default_model() : a.model;
    std::error_code ec;
    if (std::filesystem::is_regular_file(dir, ec))  // the library would say "no such model directory"
        fail(ErrorCode::kInvalidArgument,
             dir + ": is a file; --model takes the checkpoint directory (the folder holding config.json)");
    Model model = Model::from_pretrained(dir, options);
    MOEX_REQUIRE(model.tokenizer() != nullptr, ErrorCode::kNotFound,
                 dir + ": no tokenizer.json; moex generate needs one");

    // Sampling: the command line, else generation_config.json (do_sample, temperature, top_k, top_p), else greedy.
    const ModelConfig& c = model.config();
    SamplingOptions s;
    s.max_new_tokens = a.max_new_tokens;
    s.seed = a.seed;
    s.temperature = a.temperature >= 0 ? a.temperature : (c.do_sample ? c.temperature : 0.0);
    s.top_k = a.top_k >= 0 ? a.top_k : (c.do_sample ? c.top_k : 0);
    s.top_p = a.top_p >= 0 ? a.top_p : (c.do_sample ? c.top_p : 1.0);
    if (a.verbose && c.quant.enabled())
        std::fprintf(stderr, "moex: %s\n", quantization_summary(c.quant, a.dequantize, model.dtype()).c_str());
    if (a.verbose) {
        // One line each time the backend of the MoE layers changes (prefill, then the decode loop).
        auto last = std::make_shared<std::string>();
        model.set_experts_observer([last](int64_t, const std::string& backend, int64_t tokens) {
            if (backend == *last) return;
            *last = backend;
            std::fprintf(stderr, "moex: experts run %s (forward of %lld tokens)\n", backend.c_str(), (long long)tokens);
        });
    }
    s.stop_on_eos = !a.ignore_eos;
    std::vector<int32_t> prompt_ids;
    if (a.random_prompt > 0) {  // benchmarks: N pseudo-random ids below the tokenizer's size
        const int64_t v = std::min<int64_t>(c.vocab_size, model.tokenizer()->vocab_size());
        uint64_t x = 0x9e3779b97f4a7c15ull ^ a.seed;
        for (int64_t i = 0; i < a.random_prompt; ++i) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            prompt_ids.push_back(int32_t((x >> 33) % uint64_t(v)));
        }
    } else {
        MOEX_REQUIRE(!a.prompt.empty(), ErrorCode::kInvalidArgument, "--prompt is empty");
        prompt_ids = model.tokenizer()->encode(a.prompt, true);
    }
    // --runs N: N generations; the speeds reported are the medians, the text is the last run's.
    std::vector<double> prefill, decode;
    GenerationResult r;
    if (!a.json && a.random_prompt == 0) {
        std::fputs(a.prompt.c_str(), stdout);  // the prompt, then the continuation as it streams
        std::fflush(stdout);
    }
    for (int run = 0; run < a.runs; ++run) {
        const bool stream = !a.json && run == a.runs - 1;
        r = model.generate(prompt_ids, s, [&](int32_t, const std::string& piece) {
            if (stream) {
                std::fputs(piece.c_str(), stdout);
                std::fflush(stdout);
            }
            return true;
        });
        prefill.push_back(r.prefill_tokens_per_second());
        decode.push_back(r.decode_tokens_per_second());
    }
    std::sort(prefill.begin(), prefill.end());
    std::sort(decode.begin(), decode.end());
    if (a.json) {
        nlohmann::json j = {{"prompt_ids", r.prompt_ids}, {"new_ids", r.new_ids}, {"text", r.text}};
        std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::fputs(r.text.empty() || r.text.back() == '\n' ? "" : "\n", stdout);
    }
    const std::string graph =
        model.device() == Device::kCUDA ? fmt::format(", {} steps from a CUDA graph", r.recorded_steps) : "";
    const std::string stats =
        fmt::format("prefill: {} tokens, {:.1f} tokens/s; decode: {} tokens, {:.1f} tokens/s ({}, {}, experts {}{})",
                    r.prompt_ids.size(), prefill[prefill.size() / 2], r.new_ids.size(), decode[decode.size() / 2],
                    device_name(model.device()), dtype_name(model.dtype()), model.experts_backend(), graph);
    std::fprintf(a.json ? stderr : stdout, "%s\n", stats.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Hugging Face MoE checkpoint");
    cmd->add_option("--model", a->model, "Checkpoint directory (default: the shipped models/moex-tiny-moe)");
    cmd->add_option("--prompt", a->prompt, "Prompt text");
    cmd->add_option("--random-prompt", a->random_prompt, "Benchmarks: a prompt of N pseudo-random token ids instead");
    cmd->add_flag("--ignore-eos", a->ignore_eos, "Do not stop on the end-of-sequence token");
    cmd->add_option("--runs", a->runs, "Generate N times; report the median speeds")->check(CLI::Range(1, 1000));
    cmd->add_option("--experts-implementation", a->experts,
                    "Backend for the experts: NAME, or KEY=NAME,... per sub-config (KEY empty = top level)");
    cmd->add_option("--device", a->device, "cpu | cuda")->capture_default_str();
    cmd->add_option("--dtype", a->dtype, "f32 | bf16 (default: the checkpoint's)");
    cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")->capture_default_str();
    cmd->add_option("--temperature", a->temperature, "0 = greedy (default: generation_config.json, else greedy)")
        ->check(finite_number(0, false));
    cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)")->check(finite_number(0, false));
    cmd->add_option("--top-p", a->top_p, "Keep the most likely tokens up to this mass (1 = off)")
        ->check(finite_number(0, true, 1));
    cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
    cmd->add_option("--threads", a->threads, "CPU threads (0 = all)")->capture_default_str();
    cmd->add_option("--max-context", a->max_context, "KV-cache length (0 = the model's, capped at 32768)");
    cmd->add_flag("--dequantize", a->dequantize,
                  "Pre-quantized checkpoints: decode the routed experts into the run dtype on load (default: they "
                  "stay FP8 / FP4 and run quantized)");
    cmd->add_flag("--no-decode-graph", a->no_decode_graph,
                  "CUDA: launch every op of each decode step instead of replaying the step recorded as a CUDA graph");
    cmd->add_flag("--json", a->json, "Print one JSON object {prompt_ids, new_ids, text}");
    cmd->add_flag("--verbose", a->verbose, "Print the experts backend of every forward pass on stderr");
    cmd->callback([a] { run(*a); });
}

}  // namespace moex::cli
