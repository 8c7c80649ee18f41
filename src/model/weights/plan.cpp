// Tensor names of the four families (plain and composite prefixes, mlp. / block_sparse_moe., per-expert or fused
// experts, hub or Mixtral expert names) resolved into a LoadPlan, each tensor checked against config.json.
#include "src/model/weights/plan.h"

#include <tuple>

#include "moex/error.h"
#include "src/io/messages.h"
#include "src/model/config/internal.h"
#include "src/model/weights/tensor.h"
#include "src/model/weights/unused.h"

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
    Planner(CheckpointFiles& files, const ModelConfig& c, bool dequantize)
        : files_(files),
          c_(c),
          dequantize_(dequantize),
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
    // The routed experts' gate_up (E, 2I, H) or down (E, H, I) from `pieces`: in the run dtype, or resident when
    // they are encoded and the load does not dequantize.
    void experts(const std::string& m, bool gate_up, std::vector<int64_t> shape, std::vector<PlanPiece> pieces);
    void experts_resident(const std::string& m, bool gate_up, const std::vector<int64_t>& shape,
                          const std::vector<PlanPiece>& pieces);
    // A target whose pieces' bytes are copied as stored, each after the one before.
    void stored(WeightSlot slot, std::vector<int64_t> shape, DType dtype, const std::vector<Found>& pieces);

    CheckpointFiles& files_;
    const ModelConfig& c_;
    bool dequantize_;
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
    PieceQuant q = check_piece(files_, c_.quant, *found, shape);
    plan_.total_bytes += found->info->nbytes();
    for (const Found* f : {&q.scale, &q.global})
        if (f->info) plan_.total_bytes += f->info->nbytes();
    return {found->file, found->info, offset, std::move(q), sizes_of(shape)};
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
    experts(m, true, {c_.num_experts, checked_mul(2, rows, "2*I"), cols}, std::move(gate_up));
    experts(m, false, {c_.num_experts, cols, rows}, std::move(down));
}

void Planner::experts(const std::string& m, bool gate_up, std::vector<int64_t> shape, std::vector<PlanPiece> pieces) {
    const QuantFormat f = pieces.front().quant.format;
    for (const PlanPiece& p : pieces)
        if (p.quant.format != f)
            fail(ErrorCode::kFormat, p.file->path() + ": " + p.info->name + " is stored " +
                                         std::string(quant_format_name(p.quant.format)) + " but " +
                                         pieces.front().info->name + " is " + std::string(quant_format_name(f)) +
                                         "; one layer's experts share one format");
    if (f == QuantFormat::kNone || dequantize_)
        return add(at(gate_up ? &L::experts_gate_up : &L::experts_down), std::move(shape), std::move(pieces));
    experts_resident(m, gate_up, shape, pieces);
}

void Planner::stored(WeightSlot slot, std::vector<int64_t> shape, DType dtype, const std::vector<Found>& sources) {
    std::vector<PlanPiece> pieces;
    int64_t offset = 0;
    for (const Found& s : sources) {
        pieces.push_back({s.file, s.info, offset});
        offset = checked_add(offset, int64_t(s.info->nbytes()) / dtype_size(dtype), "stored tensor");
    }
    int64_t numel = 1;
    for (int64_t d : shape) numel = checked_mul(numel, d, "stored tensor");
    MOEX_REQUIRE(offset == numel, ErrorCode::kFormat,
                 sources.front().file->path() + ": " + sources.front().info->name +
                     " and the tensors fused with it hold " + std::to_string(offset) + " values, expected " +
                     std::to_string(numel));
    plan_.targets.push_back({slot, std::move(shape), std::move(pieces), dtype});
}

// Resident experts keep the checkpoint's codes and scales, fused like float ones: per-expert gate and up rows
// stacked, experts one after the other. moex's kernels take whole FP8 blocks of one scale each, so a block must not
// straddle gate and up or the end of a row: I, H (and K) must be multiples of the block, else dequantize.
void Planner::experts_resident(const std::string& m, bool gate_up, const std::vector<int64_t>& shape,
                               const std::vector<PlanPiece>& pieces) {
    const PlanPiece& first = pieces.front();
    const PieceQuant& q = first.quant;
    const int64_t E = shape[0], N = shape[1], K = shape[2];
    const std::string where = first.file->path() + ": " + first.info->name;
    const std::string hint =
        "; load it with dequantize (moex generate --dequantize) to run the experts in the run dtype";
    const bool per_expert = pieces.size() > 1;
    if (q.format == QuantFormat::kFp8 && q.block_n == 0 && per_expert)
        fail(ErrorCode::kUnsupported, where +
                                          ": per-expert FP8 tensors with one scale each (weight_block_size null) "
                                          "cannot share one scale per fused expert" +
                                          hint);
    if (q.format == QuantFormat::kFp8 && q.block_n > 0) {
        const ExpectedDim n_dim = gate_up ? I() : H(), k_dim = gate_up ? H() : I();
        for (const auto& [dim, block, which] : {std::tuple{n_dim, q.block_n, 0}, std::tuple{k_dim, q.block_k, 1}})
            if (dim_size(dim) % block != 0)
                fail(ErrorCode::kUnsupported, where + ": " + dim.front().field + "=" + std::to_string(dim_size(dim)) +
                                                  " is not a multiple of weight_block_size[" + std::to_string(which) +
                                                  "]=" + std::to_string(block) +
                                                  ", so the FP8 experts cannot stay resident in whole blocks" + hint);
    }
    const bool fp8 = q.format == QuantFormat::kFp8;
    std::vector<Found> codes, scales, globals;
    const DType sdt = q.scale_dtype();
    for (const PlanPiece& p : pieces) {
        if (p.quant.scale_dtype() != sdt)
            fail(ErrorCode::kFormat, p.quant.scale.file->path() + ": " + p.quant.scale.info->name + " has dtype " +
                                         p.quant.scale.info->dtype + " but " + q.scale.info->name + " has " +
                                         q.scale.info->dtype + "; fused experts share one scale format");
        codes.push_back({p.file, p.info});
        scales.push_back(p.quant.scale);
        if (p.quant.global.info) globals.push_back(p.quant.global);
    }
    const int64_t group = q.format == QuantFormat::kNvfp4 ? 16 : 32;
    stored(at(gate_up ? &L::experts_gate_up : &L::experts_down), {E, N, fp8 ? K : K / 2},
           fp8 ? DType::kFP8E4M3 : DType::kU8, codes);
    const std::vector<int64_t> sshape = !fp8        ? std::vector<int64_t>{E, N, K / group}
                                        : q.block_n ? std::vector<int64_t>{E, N / q.block_n, K / q.block_k}
                                                    : std::vector<int64_t>{E, 1, 1};
    stored(at(gate_up ? &L::experts_gate_up_scale : &L::experts_down_scale), sshape, sdt, scales);
    if (!globals.empty())  // per-expert gate_up: gate's and up's globals, (E, 2), merged after the load
        stored(at(gate_up ? &L::experts_gate_up_global : &L::experts_down_global),
               per_expert && gate_up ? std::vector<int64_t>{E, 2} : std::vector<int64_t>{E}, DType::kF32, globals);
    if (fp8 && c_.quant.activations == ActivationQuant::kStatic) {
        if (per_expert)
            fail(ErrorCode::kUnsupported, where +
                                              ": activation_scheme static with per-expert tensors: gate_proj's "
                                              "and up_proj's activation scales cannot share one per expert" +
                                              hint);
        const std::string name = m + (gate_up ? "experts.gate_up_proj" : "experts.down_proj") + "_activation_scale";
        const std::optional<Found> a = files_.find(name);
        if (!a) missing({name});
        MOEX_REQUIRE(a->info->dtype == "F32" && a->info->shape == std::vector<int64_t>{E}, ErrorCode::kFormat,
                     a->file->path() + ": " + name + " has dtype " + a->info->dtype + " and shape " +
                         io::shape_text(a->info->shape) + ", expected F32 (" + std::to_string(E) +
                         ") (one static scale per expert)");
        plan_.total_bytes += a->info->nbytes();
        stored(at(gate_up ? &L::experts_gate_up_act_scale : &L::experts_down_act_scale), {E}, DType::kF32, {*a});
    }
    plan_.experts = {q.format, fp8 ? q.block_n : 0, fp8 ? q.block_k : 0,
                     fp8 ? c_.quant.activations : ActivationQuant::kNone};
}

void Planner::moe(const std::string& p) {
    std::string m;
    for (const char* prefix : kMoePrefixes)
        if (m.empty() && files_.find(p + prefix + "gate.weight")) m = p + prefix;
    if (m.empty()) missing({p + "mlp.gate.weight", p + "block_sparse_moe.gate.weight"});
    single(at(&L::router), m + "gate.weight", {E(), H()});
    // transformers 5's fused layout; gpt-oss's MXFP4 form stores it as `_blocks` + `_scales`.
    const std::string fused = m + "experts.gate_up_proj";
    const std::string sfx = c_.quant.method == "mxfp4" && files_.find(fused + "_blocks") ? "_blocks" : "";
    if (!sfx.empty() || files_.find(fused)) {
        ExpectedDim two_i = I();
        two_i.insert(two_i.begin(), ConfigFactor{"", 2});
        const ExpectedShape gu = {E(), two_i, H()}, d = {E(), H(), I()};
        experts(m, true, sizes_of(gu), {piece(fused + sfx, gu, 0)});
        experts(m, false, sizes_of(d), {piece(m + "experts.down_proj" + sfx, d, 0)});
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
    check_every_tensor_used(files_, plan_, c_, prefix);
    return std::move(plan_);
}

}  // namespace

LoadPlan plan_weights(CheckpointFiles& files, const ModelConfig& config, bool dequantize) {
    return Planner(files, config, dequantize).run();
}

}  // namespace moex::model
