// Shape/dtype checks of checkpoint tensors against config.json, and the f32/bf16/f16 conversion into run buffers.
#include "src/model/weights/tensor.h"

#include <algorithm>
#include <cstring>

#include "moex/error.h"
#include "moex/tensor.h"
#include "src/cpu/parallel.h"
#include "src/cpu/problem.h"
#include "src/io/messages.h"

namespace moex::model {

int64_t dim_size(const ExpectedDim& dim) {
    int64_t n = 1;
    for (const ConfigFactor& f : dim) n = checked_mul(n, f.value, "expected tensor dimension");
    return n;
}

std::vector<int64_t> sizes_of(const ExpectedShape& shape) {
    std::vector<int64_t> sizes;
    for (const ExpectedDim& d : shape) sizes.push_back(dim_size(d));
    return sizes;
}

std::string config_fields(const ExpectedShape& shape) {
    std::vector<std::string> seen;
    std::string out;
    for (const ExpectedDim& d : shape)
        for (const ConfigFactor& f : d) {
            if (f.field.empty()) continue;
            const std::string item = f.field + "=" + std::to_string(f.value);
            bool dup = false;
            for (const std::string& s : seen) dup = dup || s == item;
            if (dup) continue;
            seen.push_back(item);
            out += (out.empty() ? "" : ", ") + item;
        }
    return "(" + out + ")";
}

namespace {

bool is_source_dtype(const std::string& name) { return name == "F32" || name == "BF16" || name == "F16"; }

template <class Load>
void convert_loop(const uint8_t* src, int64_t n, void* dst, DType dst_dtype, int64_t dst_offset, Load load) {
    // Large tensors are converted by all cores: a 30B checkpoint is ~60 GB, memory-bound at several GB/s per core.
    // Elementwise, so chunks on moex's pool give the same bytes for any thread count.
    constexpr int64_t kChunk = int64_t(1) << 20;
    const int threads = n >= kChunk ? cpu::resolve_threads(0) : 1;
    cpu::parallel_for((n + kChunk - 1) / kChunk, threads, [&](int64_t c) {
        const int64_t i0 = c * kChunk, i1 = std::min(n, i0 + kChunk);
        if (dst_dtype == DType::kF32) {
            float* out = static_cast<float*>(dst) + dst_offset;
            for (int64_t i = i0; i < i1; ++i) out[i] = load(src, i);
        } else {
            uint16_t* out = static_cast<uint16_t*>(dst) + dst_offset;
            const bool bf16 = dst_dtype == DType::kBF16;
            for (int64_t i = i0; i < i1; ++i) out[i] = bf16 ? f32_to_bf16(load(src, i)) : f32_to_f16(load(src, i));
        }
    });
}

inline uint16_t load_u16(const uint8_t* p, int64_t i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    return v;
}

}  // namespace

void check_source(const SafetensorsFile& file, const SafetensorsInfo& info, const ExpectedShape& expected) {
    if (info.dtype == "F8_E4M3")
        fail(ErrorCode::kFormat, file.path() + ": " + info.name +
                                     " has dtype F8_E4M3 but config.json has no quantization_config with quant_method "
                                     "fp8 (its block size and scales)");
    MOEX_REQUIRE(
        is_source_dtype(info.dtype), ErrorCode::kFormat,
        file.path() + ": " + info.name + " has dtype " + info.dtype + ", expected a float tensor (F32, BF16 or F16)");
    const std::vector<int64_t> want = sizes_of(expected);
    if (info.shape != want)
        fail(ErrorCode::kFormat, file.path() + ": " + info.name + " has shape " + io::shape_text(info.shape) +
                                     ", expected " + io::shape_text(want) + " from config.json " +
                                     config_fields(expected));
}

void convert_into(std::span<const uint8_t> src, DType src_dtype, void* dst, DType dst_dtype, int64_t dst_offset) {
    MOEX_REQUIRE(is_float_activation(src_dtype) && is_float_activation(dst_dtype), ErrorCode::kInvalidArgument,
                 "convert_into: only f32, bf16 and f16 convert");
    const int64_t n = int64_t(src.size()) / dtype_size(src_dtype);
    if (src_dtype == dst_dtype) {
        std::memcpy(static_cast<uint8_t*>(dst) + dst_offset * dtype_size(dst_dtype), src.data(), src.size());
        return;
    }
    const uint8_t* p = src.data();
    switch (src_dtype) {
        case DType::kF32:
            convert_loop(p, n, dst, dst_dtype, dst_offset, [](const uint8_t* s, int64_t i) {
                float v;
                std::memcpy(&v, s + 4 * i, 4);
                return v;
            });
            break;
        case DType::kBF16:
            convert_loop(p, n, dst, dst_dtype, dst_offset,
                         [](const uint8_t* s, int64_t i) { return bf16_to_f32(load_u16(s, i)); });
            break;
        default:  // f16 -> f32 is exact, so f16 -> bf16 rounds once
            convert_loop(p, n, dst, dst_dtype, dst_offset,
                         [](const uint8_t* s, int64_t i) { return f16_to_f32(load_u16(s, i)); });
            break;
    }
}

}  // namespace moex::model
