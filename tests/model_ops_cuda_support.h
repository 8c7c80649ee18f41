// Helpers of the CUDA model-ops tests (test_model_ops_cuda*.cpp): random device matrices with their exact host
// values in double, column-block views of them (the row-strided q/k/v views of a fused qkv row), read-back, and the
// rounding of a double to the run dtype that the float64 references use.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "moex/device.h"
#include "moex/error.h"
#include "src/model/ops/ops.h"
#include "tests/test_support.h"

namespace moex::test::model_ops {

#define MOEX_SKIP_WITHOUT_CUDA()                                                                          \
    do {                                                                                                  \
        if (::moex::cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device (or a build without CUDA)"; \
    } while (0)

inline double round_to(double v, DType dt) {
    if (dt == DType::kBF16) return bf16_to_f32(f32_to_bf16(float(v)));
    return double(float(v));
}

inline double host_value(const Tensor& t, int64_t i) {
    switch (t.view().dtype) {
        case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(t.data())[i]);
        case DType::kI32: return static_cast<const int32_t*>(t.data())[i];
        default: return static_cast<const float*>(t.data())[i];
    }
}

// A (rows, cols) device tensor and its values (exact in its dtype) on the host.
struct Mat {
    DeviceTensor dev;
    std::vector<double> host;
    int64_t rows = 0, cols = 0;
    DType dtype = DType::kF32;

    const TensorView& view() const { return dev.view(); }
    double at(int64_t r, int64_t c) const { return host[size_t(r * cols + c)]; }
    // Columns [c0, c0 + w) of every row: a row-strided view.
    TensorView block(int64_t c0, int64_t w) const {
        TensorView v = dev.view();
        v.data = static_cast<char*>(v.data) + c0 * dtype_size(dtype);
        v.shape[1] = w;
        return v;
    }
    TensorView vec() const {  // 1-D view of a single-row matrix
        TensorView v = dev.view();
        v.ndim = 1, v.shape[0] = cols, v.strides[0] = 1;
        return v;
    }
    Tensor download() const {
        Tensor t(dtype, {rows, cols});
        dev.copy_to_host(t.view());
        return t;
    }
    std::vector<double> read() const {
        const Tensor t = download();
        std::vector<double> out(size_t(rows * cols));
        for (int64_t i = 0; i < rows * cols; ++i) out[size_t(i)] = host_value(t, i);
        return out;
    }
};

// Values given on the host (rounded to dt), uploaded.
inline Mat mat_from(int64_t rows, int64_t cols, DType dt, const std::vector<double>& values) {
    Mat m;
    m.rows = rows, m.cols = cols, m.dtype = dt;
    Tensor t(dt, {rows, cols});
    m.host.resize(size_t(rows * cols));
    for (int64_t i = 0; i < rows * cols; ++i) {
        store_from_double(t.view(), i, values[size_t(i)]);
        m.host[size_t(i)] = host_value(t, i);
    }
    m.dev = DeviceTensor::from_host(t.view(), Device::kCUDA);
    return m;
}

// N(0, scale) values, redrawn until nonzero in dt.
inline Mat random_mat(int64_t rows, int64_t cols, DType dt, std::mt19937_64& rng, double scale = 1.0) {
    std::normal_distribution<double> nd(0.0, scale);
    std::vector<double> v(size_t(rows * cols));
    for (double& x : v) {
        do x = nd(rng);
        while (round_to(x, dt) == 0.0);
    }
    return mat_from(rows, cols, dt, v);
}

// An output poisoned with 0xff bytes (NaN in bf16 and f32).
inline Mat poisoned(int64_t rows, int64_t cols, DType dt) {
    Mat m = mat_from(rows, cols, dt, std::vector<double>(size_t(rows * cols), 0.0));
    m.dev.fill_bytes(0xff);
    m.host.assign(m.host.size(), std::nan(""));
    return m;
}

inline std::mt19937_64 fresh_rng() {
    const uint64_t seed = std::random_device{}();
    ::testing::Test::RecordProperty("seed", std::to_string(seed));
    return std::mt19937_64(seed);
}

inline ::testing::AssertionResult close_to(const Mat& got, const std::vector<double>& ref) {
    const Tensor t = got.download();
    return outputs_close(t.view(), ref);
}

inline std::unique_ptr<model::Ops> cuda_ops() { return model::make_cuda_ops(0, nullptr); }

}  // namespace moex::test::model_ops
