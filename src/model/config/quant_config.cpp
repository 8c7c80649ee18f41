// quantization_config -> CheckpointQuant: FineGrainedFP8Config (fp8, its expert_dtype fp4), gpt-oss's Mxfp4Config
// (mxfp4) and modelopt's NVFP4; other methods are refused by name. Also the one-line summary load messages print.
#include "moex/error.h"
#include "moex/model_config.h"
#include "src/model/config/internal.h"

namespace moex {

namespace model {
namespace {

void read_fp8(const JsonFields& f, CheckpointQuant& q) {
    q.format = QuantFormat::kFp8;
    if (f.has("weight_block_size")) {
        const std::vector<int64_t> b = f.integer_list("weight_block_size").value_or(std::vector<int64_t>{});
        if (b.size() != 2 || b[0] <= 0 || b[1] <= 0 || b[0] > (1 << 20) || b[1] > (1 << 20))
            fail(ErrorCode::kFormat, f.where("weight_block_size") + " must be two positive sizes or null");
        q.block_n = b[0], q.block_k = b[1];
    } else if (!f.contains("weight_block_size")) {
        q.block_n = q.block_k = 128;  // FineGrainedFP8Config's default
    }                                 // null: one scale per tensor (0 x 0)
    const std::string scheme = f.string("activation_scheme").value_or("dynamic");
    const auto act = activation_quant_from_name(scheme);
    if (!act || *act == ActivationQuant::kNone)
        fail(ErrorCode::kFormat, f.where("activation_scheme") + " `" + scheme + "`; allowed: dynamic, static");
    q.activations = *act;
    const std::string fmt = f.string("scale_fmt").value_or("float");
    if (fmt != "float" && fmt != "ue8m0")
        fail(ErrorCode::kFormat, f.where("scale_fmt") + " `" + fmt + "`; allowed: float, ue8m0");
    const std::string experts = f.string("expert_dtype").value_or("fp8");
    if (experts != "fp8" && experts != "fp4")
        fail(ErrorCode::kFormat, f.where("expert_dtype") + " `" + experts + "`; allowed: fp8, fp4");
    if (experts == "fp4") {  // e2m1 experts with ue8m0 scales per 32 along K: MXFP4, weight-only
        q.format = QuantFormat::kMxfp4;
        q.activations = ActivationQuant::kNone;
    }
}

void read_modelopt(const JsonFields& f, CheckpointQuant& q) {
    const std::string algo = f.string("quant_algo").value_or("");
    if (algo != "NVFP4")
        fail(ErrorCode::kUnsupported,
             f.where("quant_algo") + " `" + algo + "` is not loaded by moex; of modelopt's checkpoints it loads NVFP4");
    const int64_t group = f.integer_or("group_size", 16);
    if (group != 16)
        fail(ErrorCode::kFormat,
             f.where("group_size") + " is " + std::to_string(group) + "; NVFP4 scales cover 16 elements along K");
    q.format = QuantFormat::kNvfp4;
    q.activations = ActivationQuant::kNone;  // input_scale (NVFP4 activations) is not read: weight-only
}

}  // namespace

CheckpointQuant quantization_of(const JsonFields& top) {
    CheckpointQuant q;
    const OrderedJson* v = top.get("quantization_config");
    if (v == nullptr) return q;
    if (!v->is_object()) top.fail_type("quantization_config", "an object");
    const JsonFields f(*v, top.label(), top.field("quantization_config") + ".");
    q.method = f.string("quant_method").value_or("");
    if (q.method == "fp8") {
        read_fp8(f, q);
    } else if (q.method == "mxfp4") {  // gpt-oss: only the experts are quantized (`_blocks` / `_scales`)
        q.format = QuantFormat::kMxfp4;
    } else if (q.method == "modelopt") {
        read_modelopt(f, q);
    } else {
        fail(
            ErrorCode::kUnsupported,
            f.where("quant_method") + " `" + q.method +
                "` is not loaded by moex; it loads fp8 (FineGrainedFP8Config), mxfp4 and modelopt (NVFP4) checkpoints");
    }
    return q;
}

}  // namespace model

std::string quantization_summary(const CheckpointQuant& q, bool dequantize, DType run_dtype) {
    if (!q.enabled()) return "";
    const std::string run(dtype_name(run_dtype));
    std::string s = q.method;
    if (q.method == "fp8") {
        s += ' ';
        s += q.block_n ? std::to_string(q.block_n) + "x" + std::to_string(q.block_k) : std::string("per-tensor");
    }
    if (q.format == QuantFormat::kFp8) {
        s += " (activation_scheme ";
        s += activation_quant_name(q.activations);
        s += ')';
    }
    if (dequantize) {
        s += ": routed experts dequantized to " + run;
    } else {
        s += ": routed experts stay ";
        s += quant_format_name(q.format);
        if (q.activations == ActivationQuant::kNone) s += " (weight-only)";
    }
    if (q.method != "mxfp4") s += "; the other quantized linears are dequantized to " + run + " on load";
    return s;
}

}  // namespace moex
