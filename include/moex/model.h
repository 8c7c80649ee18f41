// Model: a Hugging Face MoE checkpoint (qwen2_moe, qwen3_moe, mixtral, olmoe; also the text model of a composite
// checkpoint) loaded for inference on the CPU or a CUDA GPU, with its experts run by a named backend.
// The experts_implementation API mirrors transformers':
//   from_pretrained(dir, {.experts_implementation = ExpertsImplementation::name("batched_mm")})
//   from_pretrained(dir, {.experts_implementation = ExpertsImplementation::per_config_map({{"text_config", "eager"}})})
//   set_experts_implementation(...)   switches at run time, without reloading
//   get_experts_implementation()      {"": top-level value, "<sub_config>": value, ...}
// The default is grouped_mm. Names are checked against ExpertsInterface::global() (user backends included).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "moex/model_config.h"
#include "moex/tokenizer.h"

namespace moex {

// A backend name for the whole model, or a map of sub-config key -> name ("" = the top level); keys a map leaves out
// keep their current value.
struct ExpertsImplementation {
    std::optional<std::string> all;
    std::map<std::string, std::string> per_config;

    static ExpertsImplementation name(std::string n) { return {std::move(n), {}}; }
    static ExpertsImplementation per_config_map(std::map<std::string, std::string> m) {
        return {std::nullopt, std::move(m)};
    }
    // "grouped_mm" or "text_config=eager,=batched_mm" (the command line's spelling; "" key written as empty).
    static ExpertsImplementation parse(const std::string& text);
    bool empty() const { return !all && per_config.empty(); }
};

// Observes every experts call of a forward pass (tests and `moex generate --verbose`): layer, backend, tokens.
using ExpertsObserver = std::function<void(int64_t layer, const std::string& backend, int64_t tokens)>;

struct ModelOptions {
    Device device = Device::kCPU;
    int device_index = 0;
    std::optional<DType> dtype;  // f32 | bf16; default: the checkpoint's dtype (f16 checkpoints run in f32 on CPU)
    ExpertsImplementation experts_implementation;  // empty: config.json's value, else grouped_mm
    int num_threads = 0;                           // CPU threads; 0 = all
    bool progress = true;                          // loading progress bar on stderr when it is a terminal
    bool load_tokenizer = true;                    // read tokenizer.json when the directory has one
    int64_t max_context = 0;                       // KV-cache rows; 0 = max_position_embeddings (capped at 32768)
    // Pre-quantized checkpoints (quantization_config fp8 | mxfp4 | modelopt NVFP4): the routed experts stay in their
    // format in memory and run through the backend quantized; true decodes them into the run dtype on load
    // (transformers' dequantize=True). The other quantized linears are always decoded on load.
    bool dequantize = false;
    // CUDA: generate() records its decode step (T = 1: every layer, the router, the experts call, the lm_head and
    // the greedy argmax) into a CUDA graph once and replays it per token, the position read from device memory;
    // false launches every op per token (debugging, and the A/B of the graph). Backends that synchronise the host
    // (host_synchronizes) and models whose attention the decode kernel cannot take run unrecorded either way.
    bool decode_graph = true;
};

struct SamplingOptions {
    int64_t max_new_tokens = 32;
    double temperature = 0.0;  // 0 = greedy
    int64_t top_k = 0;         // 0 = off
    double top_p = 1.0;        // 1 = off
    uint64_t seed = 0;
    bool stop_on_eos = true;
    std::vector<int32_t> eos_token_ids;  // empty: the config's
};

struct GenerationResult {
    std::vector<int32_t> prompt_ids;
    std::vector<int32_t> new_ids;
    std::string text;  // decoded new tokens (when the model has a tokenizer)
    bool stopped_on_eos = false;
    double prefill_seconds = 0, decode_seconds = 0;
    int64_t recorded_steps = 0;  // decode steps that ran as a replayed CUDA graph (ModelOptions::decode_graph)
    double prefill_tokens_per_second() const;
    double decode_tokens_per_second() const;  // tokens after the first / decode time
};

class Model {
   public:
    // Loads DIR (config.json, model.safetensors[.index.json], tokenizer.json). Errors are moex::Error naming the file.
    static Model from_pretrained(const std::string& dir, const ModelOptions& options = {});

    Model(Model&&) noexcept;
    Model& operator=(Model&&) noexcept;
    ~Model();

    const ModelConfig& config() const;
    Device device() const;
    DType dtype() const;
    const Tokenizer* tokenizer() const;  // nullptr without tokenizer.json

    // transformers' semantics: unknown names are rejected listing the valid ones; a name that cannot run on this
    // model's device is rejected with the backend's reason; switching into or out of a load-time backend
    // (deepgemm_megamoe) at run time is refused. During generate()'s decode phase get_experts_implementation() and
    // experts_backend() report what runs (batched_mm where grouped_mm was chosen, on CUDA).
    void set_experts_implementation(const ExpertsImplementation& impl);
    std::map<std::string, std::string> get_experts_implementation() const;
    // The backend the decoder's MoE layers run now.
    const std::string& experts_backend() const;

    // Forward of `ids` appended to the KV cache; returns the last position's logits (f32, vocab_size) on the host.
    // reset() empties the cache. A sequence longer than max_context is a kInvalidArgument error.
    std::vector<float> forward(const std::vector<int32_t>& ids);
    void reset();
    int64_t cache_length() const;
    int64_t max_context() const;

    // Prefill with the prompt, then decode. On CUDA every grouped_mm entry runs batched_mm for the decode loop and
    // grouped_mm again afterwards (also when on_token throws or returns false to cancel); on the CPU nothing switches.
    // A set_experts_implementation() from on_token applies from the next token on and stays after the call.
    GenerationResult generate(const std::vector<int32_t>& prompt_ids, const SamplingOptions& sampling,
                              const std::function<bool(int32_t id, const std::string& text)>& on_token = {});
    GenerationResult generate(const std::string& prompt, const SamplingOptions& sampling,
                              const std::function<bool(int32_t id, const std::string& text)>& on_token = {});

    void set_experts_observer(ExpertsObserver observer);

   private:
    struct Impl;
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// The decode-stage map transformers uses: on a non-CPU device, every "grouped_mm" value becomes "batched_mm";
// other values, and everything on the CPU, stay. Exposed for tests.
std::map<std::string, std::string> decode_experts_implementation(const std::map<std::string, std::string>& current,
                                                                 Device device);

}  // namespace moex
