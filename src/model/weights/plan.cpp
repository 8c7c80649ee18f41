// Tensor names of the four families (plain and composite prefixes, mlp. / block_sparse_moe., per-expert or fused
// experts, hub or Mixtral expert names) resolved into a LoadPlan, each tensor checked against config.json.
#include "src/model/weights/plan.h"

#include "moex/error.h"
#include "src/io/messages.h"
#include "src/model/config/internal.h"
#include "src/model/weights/tensor.h"

namespace moex::model {

namespace {

using Found = CheckpointFiles::Found;
using L = LayerWeights;

// Decoder prefixes: plain models, then the text model of a composite one (transformers 5 and 4.x layouts).
const char* const kDecoderPrefixes[] = {"model.", "model.language_model.", "language_model.model."};
const char* const kLmHeadNames[] = {"lm_head.weight", "language_model.lm_head.weight"};
const char* const kMoePrefixes[] = {"mlp.", "block_sparse_moe."};  // Mixtral 4.x checkpoints use the second
struct ExpertNames {
    const char *gate, *up, *down;
};
const ExpertNames kExpertNames[] = {{"gate_proj", "up_proj", "down_proj"}, {"w1", "w3", "w2"}};

class Planner {
   public:
    Planner(CheckpointFiles& files, const ModelConfig& c)
        : files_(files),
          c_(c),
          fields_(c.text_config_key.empty() ? "" : c.text_config_key + "."),
          names_(expert_field_names(c.arch)) {}

    LoadPlan run();

   private:
    ConfigFactor f(const std::string& field, int64_t v) const { return {fields_ + field, v}; }
    ExpectedDim H() const { return {f("hidden_size", c_.hidden_size)}; }
    ExpectedDim q_rows() const {
        return {f("num_attention_heads", c_.num_attention_heads), f("head_dim", c_.head_dim)};
    }
    ExpectedDim kv_rows() const {
        return {f("num_key_value_heads", c_.num_key_value_heads), f("head_dim", c_.head_dim)};
    }
    ExpectedDim E() const { return {f(names_.num_experts, c_.num_experts)}; }
    ExpectedDim I() const { return {f(names_.expert_intermediate, c_.moe_intermediate_size)}; }

    [[noreturn]] void missing(const std::vector<std::string>& names) const;
    PlanPiece piece(const std::string& name, const ExpectedShape& shape, int64_t offset);
    void add(WeightSlot slot, std::vector<int64_t> shape, std::vector<PlanPiece> pieces);
    void single(WeightSlot slot, const std::string& name, const ExpectedShape& shape);
    // Rows of several tensors stacked along dimension 0 (q/k/v, gate/up).
    void stacked(WeightSlot slot, const std::vector<std::pair<std::string, ExpectedShape>>& parts);

    WeightSlot at(DeviceTensor L::*member) const { return {layer_, nullptr, member}; }
    static WeightSlot top(DeviceTensor ModelWeights::*member) { return {-1, member, nullptr}; }
    void attention(const std::string& p);
    void moe(const std::string& p);
    void experts_per_expert(const std::string& m);

    CheckpointFiles& files_;
    const ModelConfig& c_;
    std::string fields_;  // "text_config." for a composite config
    ExpertFieldNames names_;
    LoadPlan plan_;
    int64_t layer_ = -1;  // the layer being planned
};

void Planner::missing(const std::vector<std::string>& names) const {
    std::string what = "tensor " + io::backticked(names.front());
    for (size_t i = 1; i < names.size(); ++i) what += (i == 1 ? " (or " : ", ") + io::backticked(names[i]);
    if (names.size() > 1) what += ")";
    fail(ErrorCode::kNotFound, files_.dir() + ": " + what + " not found; searched " + files_.searched());
}

PlanPiece Planner::piece(const std::string& name, const ExpectedShape& shape, int64_t offset) {
    const std::optional<Found> found = files_.find(name);
    if (!found) missing({name});
    const bool fp8 = c_.quant.format == QuantFormat::kFp8;
    check_source(*found->file, *found->info, shape, fp8);
    plan_.total_bytes += found->info->nbytes();
    PlanPiece p{found->file, found->info, offset};
    if (found->info->dtype == "F8_E4M3") {  // its block scales, dequantized with it on load
        const std::string sname = name + "_scale_inv";
        const std::optional<Found> s = files_.find(sname);
        if (!s) missing({sname});
        check_scales(*s->file, *s->info, name, sizes_of(shape), c_.quant.block_n, c_.quant.block_k);
        plan_.total_bytes += s->info->nbytes();
        p.scales = {s->file, s->info, c_.quant.block_n, c_.quant.block_k};
    }
    return p;
}

void Planner::add(WeightSlot slot, std::vector<int64_t> shape, std::vector<PlanPiece> pieces) {
    plan_.targets.push_back({slot, std::move(shape), std::move(pieces)});
}

void Planner::single(WeightSlot slot, const std::string& name, const ExpectedShape& shape) {
    add(slot, sizes_of(shape), {piece(name, shape, 0)});
}

void Planner::stacked(WeightSlot slot, const std::vector<std::pair<std::string, ExpectedShape>>& parts) {
    std::vector<int64_t> shape = sizes_of(parts.front().second);
    shape[0] = 0;
    std::vector<PlanPiece> pieces;
    int64_t offset = 0;
    for (const auto& [name, part] : parts) {
        const std::vector<int64_t> sizes = sizes_of(part);
        pieces.push_back(piece(name, part, offset));
        shape[0] = checked_add(shape[0], sizes[0], "stacked rows");
        int64_t numel = 1;
        for (int64_t s : sizes) numel = checked_mul(numel, s, "stacked tensor");
        offset = checked_add(offset, numel, "stacked tensor");
    }
    add(slot, std::move(shape), std::move(pieces));
}

void Planner::attention(const std::string& p) {
    const std::string a = p + "self_attn.";
    stacked(at(&L::qkv), {{a + "q_proj.weight", {q_rows(), H()}},
                          {a + "k_proj.weight", {kv_rows(), H()}},
                          {a + "v_proj.weight", {kv_rows(), H()}}});
    if (c_.attention_bias)
        stacked(at(&L::qkv_bias),
                {{a + "q_proj.bias", {q_rows()}}, {a + "k_proj.bias", {kv_rows()}}, {a + "v_proj.bias", {kv_rows()}}});
    if (c_.qk_norm) {
        const ExpectedDim head = {f("head_dim", c_.head_dim)};
        single(at(&L::q_norm), a + "q_norm.weight", {c_.qk_norm_per_head ? head : q_rows()});
        single(at(&L::k_norm), a + "k_norm.weight", {c_.qk_norm_per_head ? head : kv_rows()});
    }
    single(at(&L::o_proj), a + "o_proj.weight", {H(), q_rows()});
}

void Planner::experts_per_expert(const std::string& m) {
    const ExpertNames* style = nullptr;
    for (const ExpertNames& n : kExpertNames)
        if (!style && files_.find(m + "experts.0." + n.gate + ".weight")) style = &n;
    if (style == nullptr)
        missing({m + "experts.0.gate_proj.weight", m + "experts.0.w1.weight", m + "experts.gate_up_proj"});
    const int64_t rows = c_.moe_intermediate_size, cols = c_.hidden_size;
    const int64_t block = checked_mul(rows, cols, "expert weight");  // I*H elements per projection
    std::vector<PlanPiece> gate_up, down;
    for (int64_t e = 0; e < c_.num_experts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        const int64_t base = checked_mul(checked_mul(e, 2, "experts"), block, "experts gate_up");
        gate_up.push_back(piece(x + style->gate + ".weight", {I(), H()}, base));
        gate_up.push_back(piece(x + style->up + ".weight", {I(), H()}, base + block));
        down.push_back(piece(x + style->down + ".weight", {H(), I()}, checked_mul(e, block, "experts down")));
    }
    add(at(&L::experts_gate_up), {c_.num_experts, checked_mul(2, rows, "2*I"), cols}, std::move(gate_up));
    add(at(&L::experts_down), {c_.num_experts, cols, rows}, std::move(down));
}

void Planner::moe(const std::string& p) {
    std::string m;
    for (const char* prefix : kMoePrefixes)
        if (m.empty() && files_.find(p + prefix + "gate.weight")) m = p + prefix;
    if (m.empty()) missing({p + "mlp.gate.weight", p + "block_sparse_moe.gate.weight"});
    single(at(&L::router), m + "gate.weight", {E(), H()});
    if (files_.find(m + "experts.gate_up_proj")) {  // transformers 5 fused layout
        ExpectedDim two_i = I();
        two_i.insert(two_i.begin(), ConfigFactor{"", 2});
        single(at(&L::experts_gate_up), m + "experts.gate_up_proj", {E(), two_i, H()});
        single(at(&L::experts_down), m + "experts.down_proj", {E(), H(), I()});
    } else {
        experts_per_expert(m);
    }
    if (c_.arch == Architecture::kQwen2Moe && c_.shared_expert_intermediate_size > 0) {
        const ExpectedDim is = {f("shared_expert_intermediate_size", c_.shared_expert_intermediate_size)};
        const std::string s = m + "shared_expert.";
        stacked(at(&L::shared_gate_up), {{s + "gate_proj.weight", {is, H()}}, {s + "up_proj.weight", {is, H()}}});
        single(at(&L::shared_down), s + "down_proj.weight", {H(), is});
        single(at(&L::shared_gate), m + "shared_expert_gate.weight", {{ConfigFactor{"", 1}}, H()});
    }
}

LoadPlan Planner::run() {
    std::string prefix;
    for (const char* p : kDecoderPrefixes)
        if (prefix.empty() && files_.find(std::string(p) + "embed_tokens.weight")) prefix = p;
    if (prefix.empty()) {
        std::vector<std::string> tried;
        for (const char* p : kDecoderPrefixes) tried.push_back(std::string(p) + "embed_tokens.weight");
        missing(tried);
    }
    single(top(&ModelWeights::embed), prefix + "embed_tokens.weight", {{f("vocab_size", c_.vocab_size)}, H()});
    for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
        const std::string p = prefix + "layers." + std::to_string(l) + ".";
        layer_ = l;
        single(at(&L::input_norm), p + "input_layernorm.weight", {H()});
        attention(p);
        single(at(&L::post_norm), p + "post_attention_layernorm.weight", {H()});
        if (c_.is_moe_layer(l)) {
            moe(p);
        } else {
            const ExpectedDim inter = {f("intermediate_size", c_.intermediate_size)};
            stacked(at(&L::mlp_gate_up),
                    {{p + "mlp.gate_proj.weight", {inter, H()}}, {p + "mlp.up_proj.weight", {inter, H()}}});
            single(at(&L::mlp_down), p + "mlp.down_proj.weight", {H(), inter});
        }
    }
    layer_ = -1;
    single(top(&ModelWeights::final_norm), prefix + "norm.weight", {H()});
    plan_.tie_lm_head = c_.tie_word_embeddings;
    if (!plan_.tie_lm_head) {
        std::string head;
        for (const char* n : kLmHeadNames)
            if (head.empty() && files_.find(n)) head = n;
        if (head.empty()) missing({kLmHeadNames[0], kLmHeadNames[1]});
        single(top(&ModelWeights::lm_head), head, {{f("vocab_size", c_.vocab_size)}, H()});
    }
    return std::move(plan_);
}

}  // namespace

LoadPlan plan_weights(CheckpointFiles& files, const ModelConfig& config) { return Planner(files, config).run(); }

}  // namespace moex::model
