// Encoded checkpoint tensors: their stored form, companions and checks (kFormat / kNotFound / kUnsupported naming
// both tensors), and the decoder the loader uses for every quantized linear it does not keep resident.
#include "src/model/weights/quant.h"

#include <cstring>

#include "moex/error.h"
#include "moex/quant.h"
#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/io/messages.h"

namespace moex::model {

namespace {

using Found = CheckpointFiles::Found;

bool ends_with(const std::string& s, const std::string& suffix) {
    return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The encoded form of a tensor of safetensors dtype `dtype` under `q`; kNone when it is not one (a float tensor, or
// a dtype the method does not use, which check_source then refuses by name).
QuantFormat stored_format(const CheckpointQuant& q, const std::string& dtype, const std::string& name) {
    if (q.method == "fp8" && dtype == "F8_E4M3") return QuantFormat::kFp8;
    const bool bytes = dtype == "U8" || dtype == "I8";
    if (q.method == "fp8" && bytes) return QuantFormat::kMxfp4;  // expert_dtype fp4
    if (q.method == "mxfp4" && dtype == "U8" && ends_with(name, "_blocks")) return QuantFormat::kMxfp4;
    if (q.method == "modelopt" && dtype == "U8") return QuantFormat::kNvfp4;
    return QuantFormat::kNone;
}

int64_t numel(const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n = checked_mul(n, d, "tensor size");
    return n;
}

Found companion(CheckpointFiles& files, const std::string& name, const std::string& of) {
    const std::optional<Found> f = files.find(name);
    if (!f)
        fail(ErrorCode::kNotFound, files.dir() + ": tensor " + io::backticked(name) + " not found (the scales of " +
                                       io::backticked(of) + "); searched " + files.searched());
    return *f;
}

void require_shape(const Found& t, const std::vector<int64_t>& want, const std::string& why) {
    if (t.info->shape != want)
        fail(ErrorCode::kFormat, t.file->path() + ": " + t.info->name + " has shape " + io::shape_text(t.info->shape) +
                                     ", expected " + io::shape_text(want) + " " + why);
}

void require_dtype(const Found& t, std::initializer_list<const char*> allowed, const std::string& why) {
    std::string list;
    for (const char* a : allowed) {
        if (t.info->dtype == a) return;
        list += (list.empty() ? "" : " or ") + std::string(a);
    }
    fail(ErrorCode::kFormat,
         t.file->path() + ": " + t.info->name + " has dtype " + t.info->dtype + ", expected " + list + " " + why);
}

// fp8 `_scale_inv`: (ceil(N / bn), ceil(K / bk)) (fused gate_up: at least 2 rows, one per half, as FP8Experts keeps
// them), or one value per tensor (per expert) for 0 x 0 blocks.
void check_fp8_scales(const Found& s, const std::string& weight, const std::vector<int64_t>& shape, int64_t bn,
                      int64_t bk) {
    require_dtype(s, {"F32", "F8_E8M0", "U8"}, "(scale_fmt float, or ue8m0 bytes)");
    const bool fused = shape.size() == 3;
    const int64_t E = fused ? shape[0] : 1, N = shape[shape.size() - 2], K = shape.back();
    if (bn == 0) {
        if (numel(s.info->shape) != E)
            fail(ErrorCode::kFormat, s.file->path() + ": " + s.info->name + " has shape " +
                                         io::shape_text(s.info->shape) + ", expected " + std::to_string(E) +
                                         " value(s): weight_block_size is null (one scale per tensor of " + weight +
                                         ")");
        return;
    }
    int64_t rows = (N + bn - 1) / bn;
    const int64_t cols = (K + bk - 1) / bk;
    if (fused && s.info->shape.size() == 3 && s.info->shape[1] == 2 && rows < 2) rows = 2;
    const std::vector<int64_t> want = fused ? std::vector<int64_t>{E, rows, cols} : std::vector<int64_t>{rows, cols};
    require_shape(s, want,
                  "for " + weight + " " + io::shape_text(shape) + " in blocks of " + std::to_string(bn) + "x" +
                      std::to_string(bk));
}

// FP4 codes: K / 2 bytes per row (gpt-oss: K / 32 blocks of 16), K a multiple of the scale group.
void check_fp4_codes(const Found& w, QuantFormat f, const ExpectedShape& shape) {
    const std::vector<int64_t> want = sizes_of(shape);
    const int64_t K = want.back(), group = f == QuantFormat::kNvfp4 ? 16 : 32;
    const std::string fmt(quant_format_name(f));
    if (K % group != 0)
        fail(ErrorCode::kUnsupported, w.file->path() + ": " + w.info->name + ": its rows of K = " + std::to_string(K) +
                                          " " + config_fields({shape.back()}) + " are not a multiple of " + fmt +
                                          "'s scale group of " + std::to_string(group));
    std::vector<int64_t> codes = want;
    if (ends_with(w.info->name, "_blocks")) {
        codes.back() = K / 32;
        codes.push_back(16);
    } else {
        codes.back() = K / 2;
    }
    require_shape(
        w, codes,
        "(" + fmt + " e2m1 pairs of " + io::shape_text(want) + " from config.json " + config_fields(shape) + ")");
}

}  // namespace

DType PieceQuant::scale_dtype() const {
    const std::string& d = scale.info->dtype;
    return d == "F32" ? DType::kF32 : d == "F8_E4M3" ? DType::kFP8E4M3 : DType::kUE8M0;
}

PieceQuant check_piece(CheckpointFiles& files, const CheckpointQuant& quant, const Found& found,
                       const ExpectedShape& shape) {
    const std::string& name = found.info->name;
    PieceQuant q;
    q.format = stored_format(quant, found.info->dtype, name);
    if (q.format == QuantFormat::kNone) {
        check_source(*found.file, *found.info, shape);
        return q;
    }
    const std::vector<int64_t> want = sizes_of(shape);
    std::vector<int64_t> groups = want;  // the shape of FP4 group scales
    switch (q.format) {
        case QuantFormat::kFp8:
            if (found.info->shape != want)
                fail(ErrorCode::kFormat, found.file->path() + ": " + name + " has shape " +
                                             io::shape_text(found.info->shape) + ", expected " + io::shape_text(want) +
                                             " from config.json " + config_fields(shape));
            q.block_n = quant.block_n, q.block_k = quant.block_k;
            q.scale = companion(files, name + "_scale_inv", name);
            check_fp8_scales(q.scale, name, want, q.block_n, q.block_k);
            return q;
        case QuantFormat::kMxfp4: {
            check_fp4_codes(found, q.format, shape);
            const bool blocks = ends_with(name, "_blocks");
            const std::string sname = blocks ? name.substr(0, name.size() - 7) + "_scales" : name + "_scale_inv";
            q.scale = companion(files, sname, name);
            require_dtype(q.scale, {"F8_E8M0", "U8"}, "(mxfp4 scales are ue8m0 bytes)");
            groups.back() /= 32;
            require_shape(q.scale, groups, "(one ue8m0 scale per 32 along K of " + name + ")");
            return q;
        }
        case QuantFormat::kNvfp4: {
            check_fp4_codes(found, q.format, shape);
            q.scale = companion(files, name + "_scale", name);
            require_dtype(q.scale, {"F8_E4M3"}, "(nvfp4 block scales)");
            groups.back() /= 16;
            require_shape(q.scale, groups, "(one e4m3 scale per 16 along K of " + name + ")");
            q.global = companion(files, name + "_scale_2", name);
            require_dtype(q.global, {"F32"}, "(nvfp4's global scale)");
            const int64_t E = want.size() == 3 ? want[0] : 1;
            if (numel(q.global.info->shape) != E)
                fail(ErrorCode::kFormat, q.global.file->path() + ": " + q.global.info->name + " has shape " +
                                             io::shape_text(q.global.info->shape) + ", expected " + std::to_string(E) +
                                             " value(s) (one global scale per tensor of " + name + ")");
            return q;
        }
        case QuantFormat::kNone: break;
    }
    return q;
}

void dequantize_into(const Found& weight, const PieceQuant& q, const std::vector<int64_t>& shape, void* dst,
                     DType dst_dtype, int64_t dst_offset) {
    const bool fused = shape.size() == 3;
    const int64_t E = fused ? shape[0] : 1, N = shape[shape.size() - 2], K = shape.back();
    const uint8_t* codes = weight.file->bytes(weight.info->name).data();
    const uint8_t* scales = q.scale.file->bytes(q.scale.info->name).data();
    const DType sdt = q.scale_dtype();
    const std::vector<int64_t>& ss = q.scale.info->shape;
    const bool fp8 = q.format == QuantFormat::kFp8, per_tensor = fp8 && q.block_n == 0;
    const int64_t group = q.format == QuantFormat::kNvfp4 ? 16 : 32;
    // fp8 scale grid (rows, cols) per expert; FP4: one row of K / group per weight row.
    const int64_t srows = per_tensor ? 1 : fp8 ? ss[ss.size() - 2] : N;
    const int64_t scols = per_tensor ? 1 : fp8 ? ss.back() : K / group;
    // A fused gate_up narrower than one block keeps a scale row per half (FP8Experts' min 2 rows): N / 2 rows each.
    const int64_t bn = fp8 && !per_tensor && srows == 2 && N <= q.block_n ? N / 2 : q.block_n;
    std::vector<float> global(size_t(E), 1.0f);
    if (q.global.info) {
        const uint8_t* g = q.global.file->bytes(q.global.info->name).data();
        const bool one = numel(q.global.info->shape) == 1;
        for (int64_t e = 0; e < E; ++e) std::memcpy(&global[size_t(e)], g + 4 * (one ? 0 : e), 4);
    }
    auto scale = [&](int64_t i) -> float {
        if (sdt == DType::kF32) {
            float v;
            std::memcpy(&v, scales + 4 * i, 4);
            return v;
        }
        return sdt == DType::kFP8E4M3 ? fp8e4m3_to_f32(scales[i]) : ue8m0_to_f32(scales[i]);
    };
    const int threads = E * N * K >= (int64_t(1) << 20) ? cpu::resolve_threads(0) : 1;
    cpu::parallel_for(E * N, threads, [&](int64_t row) {  // one (expert, n) row of K values
        const int64_t e = row / N, n = row % N;
        const int64_t out0 = dst_offset + row * K;
        for (int64_t k = 0; k < K; ++k) {
            float v;
            if (fp8) {
                const int64_t s = per_tensor ? e : (e * srows + n / bn) * scols + k / q.block_k;
                v = fp8e4m3_to_f32(codes[row * K + k]) * scale(s);
            } else {
                const uint8_t byte = codes[row * (K / 2) + k / 2];
                const float s = scale(row * scols + k / group) * global[size_t(e)];
                v = fp4e2m1_to_f32(k & 1 ? uint8_t(byte >> 4) : uint8_t(byte & 15u)) * s;
            }
            if (dst_dtype == DType::kF32)
                static_cast<float*>(dst)[out0 + k] = v;
            else if (dst_dtype == DType::kBF16)
                static_cast<uint16_t*>(dst)[out0 + k] = f32_to_bf16(v);
            else
                static_cast<uint16_t*>(dst)[out0 + k] = f32_to_f16(v);
        }
    });
}

}  // namespace moex::model
