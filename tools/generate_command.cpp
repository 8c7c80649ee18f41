// `moex generate [--model DIR] --prompt TEXT [--experts-implementation NAME | KEY=NAME,...] [--device cpu|cuda]
//  [--dtype f32|bf16] [--max-new-tokens N] [--temperature T] [--top-k K] [--top-p P] [--seed S] [--json]`:
// loads a Hugging Face MoE checkpoint (default: the small model shipped in models/moex-tiny-moe), streams the
// generated text to stdout, then prints prefill and decode tokens/s. With --json it prints one object
// {"prompt_ids": [...], "new_ids": [...], "text": "..."} instead. Greedy when the temperature is 0.
#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>

#include "moex/error.h"
#include "moex/model.h"
#include "tools/cli.h"

#ifndef MOEX_SOURCE_DIR
#define MOEX_SOURCE_DIR "."
#endif

namespace moex::cli {
namespace {

struct GenerateArgs {
    std::string model, prompt, experts, device = "cpu", dtype;
    int64_t max_new_tokens = 64, top_k = -1, max_context = 0;
    double temperature = -1, top_p = -1;
    uint64_t seed = 0;
    int threads = 0;
    bool json = false, verbose = false;
};

// The shipped model: $MOEX_DEFAULT_MODEL, else models/moex-tiny-moe of the source tree this binary was built from.
std::string default_model() {
    if (const char* env = std::getenv("MOEX_DEFAULT_MODEL"); env && *env) return env;
    return (std::filesystem::path(MOEX_SOURCE_DIR) / "models" / "moex-tiny-moe").string();
}

void run(const GenerateArgs& a) {
    ModelOptions options;
    options.device = parse_device(a.device);
    if (!a.dtype.empty()) options.dtype = parse_activation_dtype(a.dtype);
    if (!a.experts.empty()) options.experts_implementation = ExpertsImplementation::parse(a.experts);
    options.num_threads = resolve_threads(a.threads);
    options.max_context = a.max_context;
    const std::string dir = a.model.empty() ? default_model() : a.model;
    Model model = Model::from_pretrained(dir, options);
    MOEX_REQUIRE(model.tokenizer() != nullptr, ErrorCode::kNotFound, dir + ": no tokenizer.json; moex generate needs one");

    // Sampling: the command line, else generation_config.json (do_sample, temperature, top_k, top_p), else greedy.
    const ModelConfig& c = model.config();
    SamplingOptions s;
    s.max_new_tokens = a.max_new_tokens;
    s.seed = a.seed;
    s.temperature = a.temperature >= 0 ? a.temperature : (c.do_sample ? c.temperature : 0.0);
    s.top_k = a.top_k >= 0 ? a.top_k : (c.do_sample ? c.top_k : 0);
    s.top_p = a.top_p >= 0 ? a.top_p : (c.do_sample ? c.top_p : 1.0);
    if (a.verbose) {
        // One line each time the backend of the MoE layers changes (prefill, then the decode loop).
        auto last = std::make_shared<std::string>();
        model.set_experts_observer([last](int64_t, const std::string& backend, int64_t tokens) {
            if (backend == *last) return;
            *last = backend;
            std::fprintf(stderr, "moex: experts run %s (forward of %lld tokens)\n", backend.c_str(), (long long)tokens);
        });
    }
    const bool stream = !a.json;
    const GenerationResult r = model.generate(a.prompt, s, [&](int32_t, const std::string& piece) {
        if (stream) {
            std::fputs(piece.c_str(), stdout);
            std::fflush(stdout);
        }
        return true;
    });
    if (a.json) {
        nlohmann::json j = {{"prompt_ids", r.prompt_ids}, {"new_ids", r.new_ids}, {"text", r.text}};
        std::puts(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str());
    } else {
        std::fputs(r.text.empty() || r.text.back() == '\n' ? "" : "\n", stdout);
    }
    const std::string stats =
        fmt::format("prefill: {} tokens, {:.1f} tokens/s; decode: {} tokens, {:.1f} tokens/s ({}, {}, experts {})",
                    r.prompt_ids.size(), r.prefill_tokens_per_second(), r.new_ids.size(),
                    r.decode_tokens_per_second(), device_name(model.device()), dtype_name(model.dtype()),
                    model.experts_backend());
    std::fprintf(a.json ? stderr : stdout, "%s\n", stats.c_str());
}

}  // namespace

void add_generate_command(CLI::App& app) {
    auto a = std::make_shared<GenerateArgs>();
    CLI::App* cmd = app.add_subcommand("generate", "Generate text with a Hugging Face MoE checkpoint");
    cmd->add_option("--model", a->model, "Checkpoint directory (default: the shipped models/moex-tiny-moe)");
    cmd->add_option("--prompt", a->prompt, "Prompt text")->required();
    cmd->add_option("--experts-implementation", a->experts,
                    "Backend for the experts: NAME, or KEY=NAME,... per sub-config (KEY empty = top level)");
    cmd->add_option("--device", a->device, "cpu | cuda")->capture_default_str();
    cmd->add_option("--dtype", a->dtype, "f32 | bf16 (default: the checkpoint's)");
    cmd->add_option("--max-new-tokens", a->max_new_tokens, "Tokens to generate at most")->capture_default_str();
    cmd->add_option("--temperature", a->temperature, "0 = greedy (default: generation_config.json, else greedy)");
    cmd->add_option("--top-k", a->top_k, "Keep the k most likely tokens (0 = off)");
    cmd->add_option("--top-p", a->top_p, "Keep the most likely tokens up to this mass (1 = off)");
    cmd->add_option("--seed", a->seed, "Sampling seed")->capture_default_str();
    cmd->add_option("--threads", a->threads, "CPU threads (0 = all)")->capture_default_str();
    cmd->add_option("--max-context", a->max_context, "KV-cache length (0 = the model's, capped at 32768)");
    cmd->add_flag("--json", a->json, "Print one JSON object {prompt_ids, new_ids, text}");
    cmd->add_flag("--verbose", a->verbose, "Print the experts backend of every forward pass on stderr");
    cmd->callback([a] { run(*a); });
}

}  // namespace moex::cli
