// Quantized weights on the AMX tiles (src/cpu/gemm_quant_amx.cpp) and on the vdpbf16ps tile
// (src/cpu/gemm_quant_avx512.cpp: the avx512_bf16 table's where vdpbf16ps runs at the FMA's rate), the FP8 decode GEMV
// on vdpbf16ps (src/cpu/stream_quant_avx512.cpp) and the AVX-512 activation rounding (src/cpu/act_quant_avx512.cpp):
// every FP8 / FP4 scheme against the float64 product of the dequantized weights, every e4m3 code and e2m1 code x scale
// decoded exactly, the same bits for any row split, column split and k blocking, rows that are not codes x scales
// refused, and the rounding's bits equal to the scalar codecs'. The AMX and vdpbf16ps tests skip themselves where the
// CPU or the OS lacks them (the backends' tests run the kernels end to end: test_quant.cpp).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "moex/quant.h"
#include "src/cpu/act_quant.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"
#include "src/cpu/problem.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

struct QScheme {
    const char* name;
    QuantFormat format;
    int64_t block_n, block_k;
    DType scale_dtype;
};
const QScheme kQSchemes[] = {
    {"fp8_128_float", QuantFormat::kFp8, 128, 128, DType::kF32},
    {"fp8_128_ue8m0", QuantFormat::kFp8, 128, 128, DType::kUE8M0},
    {"fp8_32x64_float", QuantFormat::kFp8, 32, 64, DType::kF32},
    {"fp8_per_tensor", QuantFormat::kFp8, 0, 0, DType::kF32},
    {"mxfp4", QuantFormat::kMxfp4, 0, 0, DType::kUE8M0},
    {"nvfp4", QuantFormat::kNvfp4, 0, 0, DType::kFP8E4M3},
};

// One expert's gate_up weights (N = 2 * I rows of K) quantized by the library's quantizer, as the CPU kernels see them.
class QuantWeights {
   public:
    QuantWeights(int64_t N, int64_t K, const QScheme& s, uint64_t seed) : host_(1, K, N / 2, 1, 1, Variant{}, seed) {
        p_ = host_.problem();
        q_ = quantize_experts(p_, s.format, s.block_n, s.block_k, s.scale_dtype);
        w_ = cpu::unpack_problem(p_).up(0);
    }
    const cpu::WeightMat& w() const { return w_; }
    std::vector<float> dequantized(int64_t n) const {  // the f32 weights every path agrees on (code x scale x global)
        std::vector<float> d(size_t(n * w_.K));
        cpu::scalar_kernels().dequant(w_, n, 0, w_.K, d.data(), w_.K);
        return d;
    }

   private:
    HostProblem host_;
    ExpertsProblem p_;
    QuantizedExperts q_;
    cpu::WeightMat w_;
};

// FP8 weights for the every-code tests: n rows of K codes under a per-tensor scale of 1, row j holding codes
// (k + 37 j) mod 256 with the NaN codes zeroed, the last row one NaN code `nan` at k = 5 among zeros (0 x NaN is NaN:
// every output of that row). Not copyable: w points into it.
struct EveryFp8Code {
    const int64_t n, K;
    std::vector<uint8_t> codes;
    const float one = 1.0f;
    cpu::WeightMat w;
    EveryFp8Code(int64_t n_, int64_t K_, uint8_t nan) : n(n_), K(K_), codes(size_t(n_ * K_)) {
        for (int64_t j = 0; j < n; ++j)
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t code = uint8_t((k + 37 * j) & 255);
                codes[size_t(j * K + k)] = j == n - 1 ? (k == 5 ? nan : 0) : (code & 0x7f) == 0x7f ? 0 : code;
            }
        w = cpu::WeightMat{codes.data(), DType::kFP8E4M3, false, K, K};
        w.q = cpu::WeightQuant{QuantFormat::kFp8, &one, DType::kF32, 1, int64_t(1) << 40, int64_t(1) << 40, 0, 1.0f};
    }
    EveryFp8Code(const EveryFp8Code&) = delete;
    EveryFp8Code& operator=(const EveryFp8Code&) = delete;
    // Output (j, k) of a one-hot row k is weight (j, k) exactly (a -0 code as +0: a sum with +0 products), NaN in the
    // last row.
    ::testing::AssertionResult decodes(int64_t j, int64_t k, float got) const {
        const uint8_t code = codes[size_t(j * K + k)];
        const float want = j == n - 1 ? std::numeric_limits<float>::quiet_NaN() : fp8e4m3_to_f32(code);
        if (std::isnan(want) ? std::isnan(got) : got == want) return ::testing::AssertionSuccess();
        return ::testing::AssertionFailure() << "e4m3 code " << int(code) << ": " << got << " want " << want;
    }
};

// A rows: bf16 values, or (scaled) rounded to e4m3 per `group` k with amax / 448 scales as act_quant.h does.
struct Rows {
    std::vector<float> a, s;  // (m, K), (m, groups)
    int64_t m, K, group, groups;
    Rows(int64_t m_, int64_t K_, int64_t group_, uint64_t seed) : m(m_), K(K_), group(group_) {
        groups = group > 0 ? (K + group - 1) / group : 0;
        a.resize(size_t(m * K));
        for (size_t i = 0; i < a.size(); ++i)
            a[i] = bf16_to_f32(f32_to_bf16(float(std::sin(0.37 * double(i) + double(seed)) * (1.0 + double(i % 7)))));
        if (group == 0) return;
        s.resize(size_t(m * groups));
        for (int64_t r = 0; r < m; ++r)
            for (int64_t g = 0; g < groups; ++g) {
                float* x = a.data() + r * K + g * group;
                const int64_t len = std::min(group, K - g * group);
                float amax = 0.0f;
                for (int64_t k = 0; k < len; ++k) amax = std::fmax(amax, std::fabs(x[k]));
                const float scale = amax / 448.0f, inv = dynamic_inverse(amax);
                for (int64_t k = 0; k < len; ++k) x[k] = fp8e4m3_to_f32(f32_to_fp8e4m3(x[k] * inv)) * scale;
                s[size_t(r * groups + g)] = scale;
            }
    }
    const float* row(int64_t r) const { return a.data() + r * K; }
    const float* scales(int64_t r) const { return s.empty() ? nullptr : s.data() + r * groups; }
};

// Whether got is within 1e-5 of Σ|w·a| of the float64 product of x's row r with the dequantized weight row j of d
// (rows of x.K values).
bool near_float64(const std::vector<float>& d, int64_t j, const Rows& x, int64_t r, float got) {
    double ref = 0, mag = 0;
    for (int64_t k = 0; k < x.K; ++k) {
        const double p = double(d[size_t(j * x.K + k)]) * double(x.a[size_t(r * x.K + k)]);
        ref += p, mag += std::fabs(p);
    }
    return std::fabs(double(got) - ref) <= 1e-5 * mag + 1e-30;
}

// K one-hot rows of K values: row r picks each weight row's element r (the every-code tests).
Rows one_hot_rows(int64_t K) {
    Rows x(K, K, 0, 0);
    std::fill(x.a.begin(), x.a.end(), 0.0f);
    for (int64_t r = 0; r < K; ++r) x.a[size_t(r * K + r)] = 1.0f;
    return x;
}

// The tables here with a whole-task quantized GEMM (gemm_quant): amx where the CPU and OS allow it, avx512_bf16 where
// vdpbf16ps runs at the FMA's rate.
std::vector<const cpu::KernelTable*> quant_gemm_tables() {
    std::vector<const cpu::KernelTable*> out;
    if (cpu::amx_kernels() != nullptr) out.push_back(cpu::amx_kernels());
    const cpu::KernelTable* bf16 = cpu::avx512_bf16_kernels();
    if (bf16 != nullptr && bf16->gemm_quant != nullptr) out.push_back(bf16);
    return out;
}

// body(t) on each of quant_gemm_tables(), traced by the table's name.
template <class Body>
void on_quant_gemm_tables(Body&& body) {
    for (const cpu::KernelTable* t : quant_gemm_tables()) {
        SCOPED_TRACE(t->name);
        body(*t);
    }
}

// C (m, n) of rows [r0, r1) through gemm_rows on table t with the rows prepared as the experts path does.
std::vector<float> tile_gemm(const cpu::KernelTable& t, const Rows& x, int64_t r0, int64_t r1, const cpu::WeightMat& w,
                             int64_t n) {
    const int64_t m = r1 - r0;
    std::vector<const float*> rows, scales;
    for (int64_t r = r0; r < r1; ++r) rows.push_back(x.row(r)), scales.push_back(x.scales(r));
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(m, w.K, cpu::RowsFor::kPackedTiles, x.groups) + 16));
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
    cpu::Bf16Rows prepared;
    EXPECT_TRUE(cpu::prepare_bf16_rows(t, rows.data(), m, w.K, cpu::RowsFor::kPackedTiles, aligned, prepared,
                                       x.group ? scales.data() : nullptr, x.group));
    std::vector<float> c(size_t(m * n), std::numeric_limits<float>::quiet_NaN());  // poisoned
    cpu::gemm_rows(t, rows.data(), m, w, n, c.data(), n, false, &prepared);
    return c;
}

// Every scheme, with bf16 rows and (FP8) rows rounded per block_k (or all of K), at row counts of one and several
// 32-row blocks and tails, against float64 on the dequantized weights; whole against split rows and columns bit for
// bit. K 2048 at 400 rows takes two k blocks of the packed rows, each half one.
TEST(QuantTiles, GemmNearFloat64AndTheSameBitsForAnySplit) {
    if (quant_gemm_tables().empty()) GTEST_SKIP() << "no quantized GEMM on tiles here: " << amx_skip();
    on_quant_gemm_tables([&](const cpu::KernelTable& t) {
        struct Shape {
            int64_t m, n, K;
        };
        for (const QScheme& s : kQSchemes)
            for (const Shape sh : {Shape{37, 160, 384}, Shape{8, 70, 256}, Shape{100, 96, 512}, Shape{400, 64, 2048}})
                for (bool rounded : {false, true}) {
                    if (rounded && s.format != QuantFormat::kFp8) continue;
                    const QuantWeights qw(256, sh.K, s, 11);      // I = 128: the down projection divides too
                    const cpu::WeightMat w = qw.w().from_row(3);  // off the scale rows' boundaries
                    const int64_t n = std::min<int64_t>(sh.n, 150), m = sh.m;
                    const std::string what = std::string(s.name) + " m=" + std::to_string(m) +
                                             " K=" + std::to_string(sh.K) + (rounded ? " rounded" : " bf16");
                    if (m < t.gemm_quant_from_rows) continue;  // the decode GEMV's rows on this table
                    ASSERT_EQ(cpu::gemm_path(t, m, w), cpu::GemmPath::kAmx) << what;
                    const Rows x(m, sh.K, rounded ? (s.block_k > 0 ? s.block_k : sh.K) : 0, 5);
                    const std::vector<float> c = tile_gemm(t, x, 0, m, w, n);
                    const std::vector<float> d = qw.dequantized(n + 3);
                    int64_t far = 0;
                    for (int64_t r = 0; r < m; ++r)
                        for (int64_t j = 0; j < n; ++j) far += !near_float64(d, j + 3, x, r, c[size_t(r * n + j)]);
                    EXPECT_EQ(far, 0) << what;
                    // rows in two parts (each still on the tiles), and columns from an odd offset: the same bits
                    const int64_t half = m / 2 + 1;
                    if (m - half >= t.gemm_quant_from_rows) {
                        std::vector<float> parts = tile_gemm(t, x, 0, half, w, n);
                        const std::vector<float> rest = tile_gemm(t, x, half, m, w, n);
                        parts.insert(parts.end(), rest.begin(), rest.end());
                        EXPECT_EQ(std::memcmp(parts.data(), c.data(), c.size() * 4), 0) << what << " row split";
                    }
                    const std::vector<float> cols = tile_gemm(t, x, 0, m, w.from_row(5), n - 5);
                    int64_t differ = 0;
                    for (int64_t r = 0; r < m; ++r)
                        differ +=
                            std::memcmp(&cols[size_t(r * (n - 5))], &c[size_t(r * n + 5)], size_t(n - 5) * 4) != 0;
                    EXPECT_EQ(differ, 0) << what << " column split";
                }
    });
}

// Every e4m3 code (NaN included) and every e2m1 code times MXFP4 / NVFP4 scales comes out of the panels exactly:
// one-hot rows pick single weights, so C holds the decoded values themselves (a -0 weight as +0: a sum with +0
// products).
TEST(QuantTiles, EveryCodeDecodesExactly) {
    if (quant_gemm_tables().empty()) GTEST_SKIP() << "no quantized GEMM on tiles here: " << amx_skip();
    on_quant_gemm_tables([&](const cpu::KernelTable& t) {
        const int64_t K = 256, m = K, n = 3;
        const Rows x = one_hot_rows(K);
        const EveryFp8Code f8(n, K, 0xff);
        std::vector<float> c = tile_gemm(t, x, 0, m, f8.w, n);
        for (int64_t j = 0; j < n; ++j)
            for (int64_t k = 0; k < K; ++k) EXPECT_TRUE(f8.decodes(j, k, c[size_t(k * n + j)]));
        // FP4: bytes (k / 2 + 5 j) mod 256, so each row sees every pair of codes; MXFP4 ue8m0 and NVFP4 e4m3 scales
        std::vector<uint8_t> packed(size_t(n * K / 2)), ue8m0(size_t(n * K / 32)), e4m3(size_t(n * K / 16));
        for (int64_t j = 0; j < n; ++j)
            for (int64_t i = 0; i < K / 2; ++i) packed[size_t(j * K / 2 + i)] = uint8_t((i + 5 * j) & 255);
        for (size_t i = 0; i < ue8m0.size(); ++i) ue8m0[i] = uint8_t(100 + 3 * i);        // 2^-27 .. 2^43
        for (size_t i = 0; i < e4m3.size(); ++i) e4m3[i] = uint8_t(1 + (11 * i) % 0x7e);  // subnormal to 448
        for (bool nv : {false, true}) {
            cpu::WeightMat f{packed.data(), DType::kU8, false, K / 2, K};
            f.q = nv ? cpu::WeightQuant{QuantFormat::kNvfp4, e4m3.data(), DType::kFP8E4M3, K / 16, 1, 16, 0, 0.75f}
                     : cpu::WeightQuant{QuantFormat::kMxfp4, ue8m0.data(), DType::kUE8M0, K / 32, 1, 32, 0, 1.0f};
            c = tile_gemm(t, x, 0, m, f, n);
            for (int64_t j = 0; j < n; ++j)
                for (int64_t k = 0; k < K; ++k) {
                    const uint8_t byte = packed[size_t(j * K / 2 + k / 2)];
                    const float code = fp4e2m1_to_f32((k & 1) ? byte >> 4 : byte & 15);
                    const float scale = nv ? fp8e4m3_to_f32(e4m3[size_t(j * K / 16 + k / 16)])
                                           : ue8m0_to_f32(ue8m0[size_t(j * K / 32 + k / 32)]);
                    const float want = code * scale * f.q.global, got = c[size_t(k * n + j)];  // code x scale is exact
                    EXPECT_EQ(got, want) << (nv ? "nvfp4" : "mxfp4") << " j=" << j << " k=" << k << ": " << got
                                         << " want " << want;
                }
        }
    });
}

// MXFP4 scales at the ends of the range: the panels add the scale's exponent where every nonzero weight stays a normal
// bf16 (2^-125 .. 2^125) and multiply in f32 elsewhere; both give code x scale exactly, and a weight below 2^-126 (a
// scale of 2^-127 or 2^-126) reads as zero on the tiles, as every bf16 subnormal does.
TEST(QuantTiles, Mxfp4ScalesAtTheRangeEndsDecodeExactly) {
    if (quant_gemm_tables().empty()) GTEST_SKIP() << "no quantized GEMM on tiles here: " << amx_skip();
    on_quant_gemm_tables([&](const cpu::KernelTable& t) {
        const uint8_t edges[] = {0, 1, 2, 3, 126, 127, 128, 250, 251, 252};  // 2^-127 .. 2^125
        const int64_t blocks = int64_t(sizeof(edges)), K = 32 * blocks, m = K, n = 2;
        const Rows x = one_hot_rows(K);
        std::vector<uint8_t> packed(size_t(n * K / 2)), ue8m0(size_t(n * blocks));
        for (int64_t i = 0; i < n * K / 2; ++i) packed[size_t(i)] = uint8_t((i * 7 + 3) & 255);
        for (int64_t j = 0; j < n; ++j)
            for (int64_t b = 0; b < blocks; ++b) ue8m0[size_t(j * blocks + b)] = edges[(b + j) % blocks];
        cpu::WeightMat f{packed.data(), DType::kU8, false, K / 2, K};
        f.q = cpu::WeightQuant{QuantFormat::kMxfp4, ue8m0.data(), DType::kUE8M0, blocks, 1, 32, 0, 1.0f};
        const std::vector<float> c = tile_gemm(t, x, 0, m, f, n);
        for (int64_t j = 0; j < n; ++j)
            for (int64_t k = 0; k < K; ++k) {
                const uint8_t byte = packed[size_t(j * K / 2 + k / 2)];
                const float want =
                    fp4e2m1_to_f32((k & 1) ? byte >> 4 : byte & 15) * ue8m0_to_f32(ue8m0[size_t(j * blocks + k / 32)]);
                const float got = c[size_t(k * n + j)];
                EXPECT_EQ(got, std::fabs(want) < 0x1.0p-126f ? 0.0f : want) << "j=" << j << " k=" << k;
            }
    });
}

// Rows whose values are not their codes times the given scales are refused (the f32 kernels then run them).
TEST(QuantAmx, RowsThatAreNotCodesTimesScalesAreRefused) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    const cpu::KernelTable& t = *cpu::amx_kernels();
    Rows x(20, 256, 128, 3);
    std::vector<const float*> rows, scales;
    for (int64_t r = 0; r < x.m; ++r) rows.push_back(x.row(r)), scales.push_back(x.scales(r));
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(x.m, x.K, cpu::RowsFor::kPackedTiles, x.groups) + 16));
    float* aligned = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) / 64 * 64);
    cpu::Bf16Rows out;
    EXPECT_TRUE(cpu::prepare_bf16_rows(t, rows.data(), x.m, x.K, cpu::RowsFor::kPackedTiles, aligned, out,
                                       scales.data(), x.group));
    EXPECT_NE(out.scales.s, nullptr);
    x.a[size_t(7 * x.K + 130)] = std::nextafter(x.a[size_t(7 * x.K + 130)], 1e9f);  // off its code by one ulp
    EXPECT_FALSE(cpu::prepare_bf16_rows(t, rows.data(), x.m, x.K, cpu::RowsFor::kPackedTiles, aligned, out,
                                        scales.data(), x.group));
    x.a[size_t(7 * x.K + 130)] = std::nextafter(x.a[size_t(7 * x.K + 130)], -1e9f);
    EXPECT_TRUE(cpu::prepare_bf16_rows(t, rows.data(), x.m, x.K, cpu::RowsFor::kPackedTiles, aligned, out,
                                       scales.data(), x.group));
    x.s[size_t(9 * x.groups + 1)] = 0.0f;  // a zero scale holds zeros only
    EXPECT_FALSE(cpu::prepare_bf16_rows(t, rows.data(), x.m, x.K, cpu::RowsFor::kPackedTiles, aligned, out,
                                        scales.data(), x.group));
}

const cpu::KernelTable* stream_quant_table() {
    const cpu::KernelTable* t = cpu::avx512_kernels();
    return t != nullptr && t->stream_quant != nullptr ? t : nullptr;
}

// One row of x through the table's stream_quant, the row prepared as the experts path does (bf16 or codes).
std::vector<float> stream_quant(const cpu::KernelTable& t, const Rows& x, int64_t r, const cpu::WeightMat& w, int64_t n,
                                bool* ran = nullptr) {
    const float* row = x.row(r);
    const float* scales = x.scales(r);
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(1, w.K, cpu::RowsFor::kStream, x.groups) + 16));
    cpu::Bf16Rows prepared;
    EXPECT_TRUE(cpu::prepare_bf16_rows(t, &row, 1, w.K, cpu::RowsFor::kStream, buf.data(), prepared,
                                       x.group ? &scales : nullptr, x.group));
    std::vector<float> c(size_t(n), std::numeric_limits<float>::quiet_NaN());  // poisoned
    const bool ok = t.stream_quant(prepared.a16, prepared.lda, 1, prepared.scales, w, n, c.data(), n);
    if (ran != nullptr) *ran = ok;
    return c;
}

// All m rows of x through stream_quant at once, prepared as the experts path prepares a group's rows; (m, n).
std::vector<float> stream_quant_rows(const cpu::KernelTable& t, const Rows& x, const cpu::WeightMat& w, int64_t n) {
    std::vector<const float*> rows(size_t(x.m)), scales(size_t(x.m));
    for (int64_t r = 0; r < x.m; ++r) rows[size_t(r)] = x.row(r), scales[size_t(r)] = x.scales(r);
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(x.m, w.K, cpu::RowsFor::kStream, x.groups) + 16));
    cpu::Bf16Rows prepared;
    EXPECT_TRUE(cpu::prepare_bf16_rows(t, rows.data(), x.m, w.K, cpu::RowsFor::kStream, buf.data(), prepared,
                                       x.group ? scales.data() : nullptr, x.group));
    std::vector<float> c(size_t(x.m * n), std::numeric_limits<float>::quiet_NaN());  // poisoned
    EXPECT_TRUE(t.stream_quant(prepared.a16, prepared.lda, x.m, prepared.scales, w, n, c.data(), n));
    return c;
}

// The FP8 decode GEMV: every FP8 scheme (the 32 x 64 blocks promote per 64 k, per-tensor once over K) with bf16 rows
// and rows rounded per block_k, against float64 on the dequantized weights; columns from an odd offset (off the tile
// of 8 and the scale rows) give the same bits, and gemm_rows takes it for one row. FP4 and K not a multiple of 64 are
// refused.
TEST(QuantStreamBf16, Fp8NearFloat64AndTheSameBitsForAnyColumns) {
    const cpu::KernelTable* t = stream_quant_table();
    if (t == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
    for (const QScheme& s : kQSchemes) {
        if (s.format != QuantFormat::kFp8) continue;
        for (int64_t K : {256, 768})
            for (bool rounded : {false, true}) {
                const QuantWeights qw(256, K, s, 13);
                const cpu::WeightMat w = qw.w().from_row(3);
                const int64_t n = 141;
                const std::string what = std::string(s.name) + " K=" + std::to_string(K) + (rounded ? " rounded" : "");
                const Rows x(3, K, rounded ? (s.block_k > 0 ? s.block_k : K) : 0, 9);
                const std::vector<float> d = qw.dequantized(n + 3);
                for (int64_t r = 0; r < x.m; ++r) {
                    bool ran = false;
                    const std::vector<float> c = stream_quant(*t, x, r, w, n, &ran);
                    ASSERT_TRUE(ran) << what;
                    int64_t far = 0;
                    for (int64_t j = 0; j < n; ++j) far += !near_float64(d, j + 3, x, r, c[size_t(j)]);
                    EXPECT_EQ(far, 0) << what << " row " << r;
                    const std::vector<float> cols = stream_quant(*t, x, r, w.from_row(5), n - 5);
                    EXPECT_EQ(std::memcmp(cols.data(), c.data() + 5, size_t(n - 5) * 4), 0) << what << " columns";
                    if (rounded) continue;  // gemm_rows prepares bf16 rows itself; rounded ones come prepared
                    const float* row = x.row(r);
                    std::vector<float> g(size_t(n), std::numeric_limits<float>::quiet_NaN());
                    cpu::gemm_rows(*t, &row, 1, w, n, g.data(), n);
                    EXPECT_EQ(std::memcmp(g.data(), c.data(), size_t(n) * 4), 0) << what << " gemm_rows";
                }
            }
    }
    const Rows x(1, 256, 0, 3);
    bool ran = true;
    stream_quant(*t, x, 0, QuantWeights(64, 256, kQSchemes[4], 1).w(), 32, &ran);
    EXPECT_FALSE(ran) << "mxfp4";
    const Rows y(1, 160, 0, 3);
    stream_quant(*t, y, 0, QuantWeights(64, 160, kQSchemes[3], 1).w(), 32, &ran);
    EXPECT_FALSE(ran) << "K 160";
}

// Several rows at once (the avx512_bf16 table where vdpbf16ps runs at the FMA's rate: chunks of 4 rows against 2 rows
// of B) give each row's one-row bits, for every row count up to 9 (two whole chunks and a tail), bf16 and rounded
// rows, and tails of B; gemm_rows takes it for those rows.
TEST(QuantStreamBf16, SeveralRowsGiveEachRowsBits) {
    const cpu::KernelTable* t = cpu::avx512_bf16_kernels();
    if (t == nullptr || t->stream_quant_rows < 2) GTEST_SKIP() << "no table gives stream_quant several rows here";
    const QScheme& s = kQSchemes[0];
    ASSERT_EQ(s.format, QuantFormat::kFp8);
    const int64_t K = 512, n = 141;
    const QuantWeights qw(256, K, s, 5);
    const cpu::WeightMat w = qw.w().from_row(3);
    for (bool rounded : {false, true})
        for (int64_t m = 1; m <= 9; ++m) {
            const std::string what = "m " + std::to_string(m) + (rounded ? " rounded" : "");
            const Rows x(m, K, rounded ? (s.block_k > 0 ? s.block_k : K) : 0, 21);
            const std::vector<float> c = stream_quant_rows(*t, x, w, n);
            for (int64_t r = 0; r < m; ++r) {
                const std::vector<float> one = stream_quant(*t, x, r, w, n);
                EXPECT_EQ(std::memcmp(one.data(), c.data() + r * n, size_t(n) * 4), 0) << what << " row " << r;
            }
            if (rounded) continue;
            std::vector<const float*> rows(static_cast<size_t>(m));
            for (int64_t r = 0; r < m; ++r) rows[size_t(r)] = x.row(r);
            std::vector<float> g(size_t(m * n), std::numeric_limits<float>::quiet_NaN());
            cpu::gemm_rows(*t, rows.data(), m, w, n, g.data(), n);
            EXPECT_EQ(std::memcmp(g.data(), c.data(), size_t(m * n) * 4), 0) << what << " gemm_rows";
        }
}

// Every e4m3 code (subnormals, both zeros) comes out exactly (one-hot rows pick single weights), a NaN code makes its
// output NaN.
TEST(QuantStreamBf16, EveryCodeDecodesExactly) {
    const cpu::KernelTable* t = stream_quant_table();
    if (t == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 BF16";
    const int64_t K = 256, n = 11;
    const EveryFp8Code f8(n, K, 0x7f);
    const Rows x = one_hot_rows(K);
    for (int64_t k = 0; k < K; ++k) {
        const std::vector<float> c = stream_quant(*t, x, k, f8.w, n);
        for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(f8.decodes(j, k, c[size_t(j)]));
    }
}

// The AVX-512 rounding (act_quant_avx512.cpp) gives the scalar codecs' bits: every e4m3 rounding case (ties both ways
// in the subnormal and normal steps, the saturation, inf, NaN, signed zeros, f32 subnormals) and random values, by
// multiplication and by division; the absolute maximum ignores NaNs as std::fmax does.
TEST(QuantAmx, VectorRoundingIsTheScalarCodecs) {
    const cpu::KernelTable* t = cpu::avx512_kernels();
    if (t == nullptr || t->round_e4m3 == nullptr) GTEST_SKIP() << "this CPU has no AVX-512";
    std::vector<float> v = {0.0f,
                            -0.0f,
                            1e-40f,
                            -1e-40f,
                            448.0f,
                            449.0f,
                            464.0f,
                            465.0f,
                            480.0f,
                            1e30f,
                            -1e30f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(),
                            std::exp2(-6.0f),
                            std::exp2(-7.0f)};
    for (int q = 0; q <= 16; ++q) v.push_back(float(q) / 1024.0f);  // subnormal steps and their midpoints
    for (int e = -9; e <= 9; ++e)
        for (int m = 0; m < 16; ++m) v.push_back(std::ldexp(1.0f + float(m) / 16.0f, e));  // normal midpoints
    uint32_t state = 12345;
    for (int i = 0; i < 4000; ++i) {
        state = state * 1664525u + 1013904223u;
        v.push_back(float(int32_t(state)) / float(1 << 24) * std::exp2(float(int(state >> 27) - 16)));
    }
    const int64_t n = int64_t(v.size());
    for (int sign : {1, -1})
        for (bool divide : {false, true}) {
            std::vector<float> src(v.size()), got(v.size()), want(v.size());
            for (size_t i = 0; i < v.size(); ++i) src[i] = float(sign) * v[i];
            const float q = divide ? 0.37f : 2.7f, s = 0.011f;
            t->round_e4m3(src.data(), got.data(), n, q, divide, s);
            for (size_t i = 0; i < src.size(); ++i)
                want[i] = fp8e4m3_to_f32(f32_to_fp8e4m3(divide ? src[i] / q : src[i] * q)) * s;
            int64_t differ = 0;
            for (size_t i = 0; i < src.size(); ++i)
                differ += std::memcmp(&got[i], &want[i], 4) != 0 && !(std::isnan(got[i]) && std::isnan(want[i]));
            EXPECT_EQ(differ, 0) << "sign " << sign << (divide ? " divide" : " multiply");
        }
    std::vector<float> a = {1.0f, std::numeric_limits<float>::quiet_NaN(), -3.5f, 2.0f};
    for (int64_t len = 1; len <= 4; ++len) {
        float want = 0.0f;
        for (int64_t i = 0; i < len; ++i) want = std::fmax(want, std::fabs(a[size_t(i)]));
        EXPECT_EQ(t->abs_max(a.data(), len), want) << len;
    }
}

}  // namespace
}  // namespace moex::test
