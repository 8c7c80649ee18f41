// libFuzzer target for config.json + generation_config.json: the input is config.json, optionally followed by the
// separator "\x01GEN\x01" and generation_config.json (a byte JSON never holds outside a string, so the split is
// unambiguous). An accepted config must keep the invariants the loader relies on before it checks any tensor:
// sizes in range, top-k within the experts, few enough layers that per-layer work is bounded.
// A moex::Error is a clean rejection; a crash, sanitizer report or trap is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "moex/error.h"
#include "moex/model_config.h"

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view input(reinterpret_cast<const char*>(data), size);
    constexpr std::string_view kSeparator = "\x01GEN\x01";
    const size_t at = input.find(kSeparator);
    const std::string config(input.substr(0, at));
    const std::string generation(at == std::string_view::npos ? "" : input.substr(at + kSeparator.size()));
    try {
        const moex::ModelConfig c = moex::parse_model_config(config, generation, "config.json");
        require(c.num_hidden_layers >= 1 && c.num_hidden_layers <= 4096);
        require(c.hidden_size >= 1 && c.vocab_size >= 1 && c.head_dim >= 1);
        require(c.num_experts >= 1 && c.num_experts_per_tok >= 1 && c.num_experts_per_tok <= c.num_experts);
        require(c.num_attention_heads % c.num_key_value_heads == 0);
        require(c.top_p > 0 && c.top_p <= 1 && c.temperature >= 0 && c.top_k >= 0);
        int64_t moe = 0;
        for (int64_t l = 0; l < c.num_hidden_layers; ++l) moe += c.is_moe_layer(l) ? 1 : 0;
        require(moe <= c.num_hidden_layers);
    } catch (const moex::Error&) {
    }
    return 0;
}
