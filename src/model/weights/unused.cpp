// The unused-tensor check of a load plan: plan targets' tensors and companions are used; known extras are the
// buffers and calibration values transformers drops too; everything else is an error that names it.
#include "src/model/weights/unused.h"

#include <string_view>
#include <unordered_set>
#include <vector>

#include "moex/error.h"
#include "src/io/messages.h"

namespace moex::model {

namespace {

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// What a checkpoint may hold that moex does not read, each as transformers treats it.
bool known_extra(const std::string& name, const ModelConfig& c, const std::string& prefix) {
    if (ends_with(name, ".rotary_emb.inv_freq")) return true;  // a buffer older transformers versions saved
    const bool lm_head = name == "lm_head.weight" || name == "language_model.lm_head.weight";
    if (lm_head) return c.tie_word_embeddings;  // a tied model's stored copy: transformers ties it to embed anyway
    // Calibration values of quantized checkpoints moex runs weight-only (modelopt's input_scale, FP8 static
    // activation scales of linears it dequantizes, KV-cache scales).
    if (c.quant.enabled())
        for (std::string_view s : {".input_scale", ".activation_scale", "_activation_scale", ".k_scale", ".v_scale"})
            if (ends_with(name, s)) return true;
    // A composite checkpoint's other sub-models (vision tower, projector, ...), outside the text model's prefix.
    return !c.text_config_key.empty() && name.compare(0, prefix.size(), prefix) != 0;
}

}  // namespace

void check_every_tensor_used(CheckpointFiles& files, const LoadPlan& plan, const ModelConfig& c,
                             const std::string& decoder_prefix) {
    std::unordered_set<std::string_view> used;
    for (const PlanTarget& t : plan.targets)
        for (const PlanPiece& p : t.pieces) {
            used.insert(p.info->name);
            for (const CheckpointFiles::Found* f : {&p.quant.scale, &p.quant.global})
                if (f->info) used.insert(f->info->name);
        }
    const std::vector<std::string> names = files.all_names();
    std::vector<const std::string*> unused;
    for (const std::string& name : names)
        if (!used.count(name) && !known_extra(name, c, decoder_prefix)) unused.push_back(&name);
    if (unused.empty()) return;
    constexpr size_t kShown = 4;
    std::string list;
    for (size_t i = 0; i < unused.size() && i < kShown; ++i) list += (i ? ", " : "") + io::backticked(*unused[i]);
    if (unused.size() > kShown) list += ", ... (" + std::to_string(unused.size() - kShown) + " more)";
    const std::string f = c.text_config_key.empty() ? "" : c.text_config_key + ".";
    fail(ErrorCode::kFormat, files.searched() + ": " + std::to_string(unused.size()) +
                                 (unused.size() == 1 ? " tensor is" : " tensors are") + " not used by the " +
                                 c.model_type + " model config.json describes (" + f +
                                 "num_hidden_layers=" + std::to_string(c.num_hidden_layers) + ", " + f +
                                 "num_experts=" + std::to_string(c.num_experts) + "): " + list +
                                 "; config.json and the weights disagree (more layers or experts than it says?)");
}

}  // namespace moex::model
