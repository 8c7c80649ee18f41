// The CPU kernel tables against each other on one machine (src/cpu/kernels.h): every GEMM path of the AVX-512 f32
// tile has the AVX2 table's bits, the vdpbf16ps tile the bits of its documented order, the AMX tiles (where the CPU
// and OS have them, else skipped) the same bits for any row split and thread count, and every tile tail works.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "src/cpu/config.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"
#include "tests/test_support.h"

namespace moex::cpu {
namespace {

struct Case {
    int64_t m, n, K;
    bool transposed;
};

// m covers the stream (<= 24 rows: each of its tiles 1-5 and 6-row passes; transposed <= 4), direct (transposed
// <= 48) and packed paths and every tile tail (12 + 5 rows, 32 + 16 + 7 columns, odd n); K covers the k blocks (256,
// 512, 64) and the tails of 8, 32 and pairs.
const Case kCases[] = {{1, 37, 300, false},  {2, 41, 77, false},   {3, 40, 70, false},    {4, 19, 64, false},
                       {5, 9, 131, false},   {7, 23, 45, false},   {13, 1, 5, false},     {24, 33, 260, false},
                       {30, 55, 300, false}, {29, 32, 513, false}, {64, 200, 256, false}, {25, 17, 1, false},
                       {3, 40, 70, true},    {17, 55, 130, true},  {53, 71, 129, true},   {100, 600, 33, true}};
// The AMX path's blocks: 32-row and 32-column blocks with 16-wide halves (31, 33, 48 rows; 15, 16, 129, 257 columns),
// several 512-k blocks with tails of whole 32-k tiles and of pairs (1025, 1100, 2048), both layouts.
const Case kAmxCases[] = {{100, 300, 1100, false}, {77, 130, 1025, true},  {33, 129, 40, false},
                          {48, 16, 32, false},     {31, 15, 31, false},    {200, 257, 2048, false},
                          {6, 300, 700, true},     {64, 200, 256, false},  {29, 32, 513, false},
                          {53, 71, 129, true},     {420, 70, 2100, false}, {150, 70, 5000, false}};

using test::amx_skip;

// MOEX_CPU_KERNELS=amx (the amx: tests of tests/CMakeLists.txt) on a machine without AMX would run the avx512 table
// under AMX's name: skip every test instead, with the reason.
class ForcedAmxEnvironment : public ::testing::Environment {
   public:
    void SetUp() override {
        const char* force = std::getenv("MOEX_CPU_KERNELS");
        if (force != nullptr && std::string(force) == "amx" && amx_skip() != nullptr)
            GTEST_SKIP() << "MOEX_CPU_KERNELS=amx: " << amx_skip();
    }
};
const auto* const kForcedAmx = ::testing::AddGlobalTestEnvironment(new ForcedAmxEnvironment);

struct Operands {
    std::vector<float> a;    // (m, K)
    std::vector<uint8_t> b;  // (n, K) or (K, n) in dtype
    std::vector<const float*> rows;
    WeightMat w;
};

// A of bf16 values (bf16_rows) or of arbitrary floats, B random in dtype; uniform data, so no subnormal products.
Operands make(const Case& c, DType dt, bool bf16_rows, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    Operands o;
    o.a.resize(size_t(c.m * c.K));
    for (float& v : o.a) v = bf16_rows ? bf16_to_f32(f32_to_bf16(u(rng))) : u(rng);
    const int64_t es = dtype_size(dt);
    o.b.resize(size_t(c.n * c.K * es));
    for (int64_t i = 0; i < c.n * c.K; ++i) {
        const float v = 0.05f * u(rng);
        if (dt == DType::kF32) std::memcpy(o.b.data() + i * 4, &v, 4);
        const uint16_t h = dt == DType::kBF16 ? f32_to_bf16(v) : f32_to_f16(v);
        if (dt != DType::kF32) std::memcpy(o.b.data() + i * 2, &h, 2);
    }
    for (int64_t r = 0; r < c.m; ++r) o.rows.push_back(o.a.data() + r * c.K);
    o.w = WeightMat{o.b.data(), dt, c.transposed, c.transposed ? c.n : c.K, c.K};
    return o;
}

std::vector<float> run(const KernelTable& kt, const Operands& o, const Case& c) {
    std::vector<float> out(size_t(c.m * c.n), std::nanf(""));
    gemm_rows(kt, o.rows.data(), c.m, o.w, c.n, out.data(), c.n);
    return out;
}

float elem(const Operands& o, const Case& c, int64_t j, int64_t k) {
    const int64_t i = c.transposed ? k * c.n + j : j * c.K + k;
    uint16_t h;
    std::memcpy(&h, o.b.data() + i * 2, 2);
    return bf16_to_f32(h);
}

// The vdpbf16ps tile's order: pairs j in increasing order, in each the odd k first, every product exact in f32 and
// each addition rounded once (A and B zero past K).
float bf16_pair_order(const Operands& o, const Case& c, int64_t r, int64_t j) {
    float s = 0.0f;
    for (int64_t k = 0; k < c.K; k += 2) {
        const float odd = k + 1 < c.K ? o.a[size_t(r * c.K + k + 1)] * elem(o, c, j, k + 1) : 0.0f;
        s += odd;
        s += o.a[size_t(r * c.K + k)] * elem(o, c, j, k);
    }
    return s;
}

void expect_same_bits(const std::vector<float>& x, const std::vector<float>& y, const char* what) {
    ASSERT_EQ(x.size(), y.size());
    for (size_t i = 0; i < x.size(); ++i) {
        uint32_t bx, by;
        std::memcpy(&bx, &x[i], 4), std::memcpy(&by, &y[i], 4);
        ASSERT_EQ(bx, by) << what << ": element " << i << ": " << x[i] << " vs " << y[i];
    }
}

TEST(CpuKernels, Avx512TableHasTheAvx2Bits) {
    const KernelTable* avx2 = avx2_kernels();
    const KernelTable* avx512 = avx512_kernels();
    if (avx2 == nullptr || avx512 == nullptr) GTEST_SKIP() << "this CPU has no AVX-512 F/BW/VL/DQ/VBMI";
    for (DType dt : {DType::kF32, DType::kF16, DType::kBF16})
        for (const Case& c : kCases) {
            SCOPED_TRACE(::testing::Message() << dtype_name(dt) << " m " << c.m << " n " << c.n << " K " << c.K
                                              << (c.transposed ? " transposed" : " rows"));
            const Operands o = make(c, dt, false, uint64_t(c.m * 1000 + c.K));
            expect_same_bits(run(*avx2, o, c), run(*avx512, o, c), "avx512 vs avx2");
        }
}

TEST(CpuKernels, Bf16TileSumsInPairOrder) {
    const KernelTable* t = avx512_bf16_kernels();
    if (t == nullptr) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    for (const Case& c : kCases) {
        SCOPED_TRACE(::testing::Message()
                     << "m " << c.m << " n " << c.n << " K " << c.K << (c.transposed ? " transposed" : " rows"));
        const Operands o = make(c, DType::kBF16, true, uint64_t(c.n * 1000 + c.K));
        const std::vector<float> got = run(*t, o, c);
        if (gemm_path(*t, c.m, o.w) == GemmPath::kStream) {  // decode keeps the f32 GEMV (below tile_bf16_from_rows)
            expect_same_bits(got, run(*avx512_kernels(), o, c), "bf16 table decode vs avx512");
            continue;
        }
        std::vector<float> want(got.size());
        for (int64_t r = 0; r < c.m; ++r)
            for (int64_t j = 0; j < c.n; ++j) want[size_t(r * c.n + j)] = bf16_pair_order(o, c, r, j);
        expect_same_bits(got, want, "vdpbf16ps tile vs its pair order");
    }
}

// The tile with the weights read in place (gemm.cpp gemm_bf16_in_place) against it with the weights packed, on rows
// from 1 to past two 32-row panels, 12-row weight tiles and their tails, short and long K: the same bits, and both
// the pair order's.
TEST(CpuKernels, Bf16TileInPlaceKeepsThePackedBits) {
    const KernelTable* t = avx512_bf16_kernels();
    if (t == nullptr) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    KernelTable packed = *t, in_place = *t;
    packed.tile_bf16_from_rows = in_place.tile_bf16_from_rows = 1;
    packed.bf16_in_place_max_rows = 0, in_place.bf16_in_place_max_rows = 1 << 20;
    for (int64_t m : {1, 15, 16, 31, 32, 33, 64, 65, 100})
        for (int64_t n : {1, 12, 13, 37, 130})
            for (int64_t K : {2, 64, 258, 1030}) {
                const Case c{m, n, K, false};
                SCOPED_TRACE(::testing::Message() << "m " << m << " n " << n << " K " << K);
                const Operands o = make(c, DType::kBF16, true, uint64_t(m * 7919 + n * 31 + K));
                const std::vector<float> got = run(in_place, o, c);
                expect_same_bits(got, run(packed, o, c), "in place vs packed");
                std::vector<float> want(got.size());
                for (int64_t r = 0; r < m; ++r)
                    for (int64_t j = 0; j < n; ++j) want[size_t(r * n + j)] = bf16_pair_order(o, c, r, j);
                expect_same_bits(got, want, "in place vs its pair order");
            }
}

TEST(CpuKernels, Bf16TableKeepsF32RowsOnTheF32Tile) {
    const KernelTable* t = avx512_bf16_kernels();
    if (t == nullptr) GTEST_SKIP() << "this CPU has no AVX512_BF16";
    for (const Case& c : kCases) {
        SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " K " << c.K);
        const Operands o = make(c, DType::kBF16, false, 7);  // rows that are not bf16 values: rounding them is wrong
        expect_same_bits(run(*t, o, c), run(*avx512_kernels(), o, c), "bf16 table, f32 rows vs avx512");
    }
}

// Every table's outputs within 1e-5 of the float64 product, relative to Σ|a·b| (uniform data: no subnormals).
void expect_near_float64(const KernelTable& t, DType dt, const Case& c) {
    SCOPED_TRACE(::testing::Message() << t.name << " " << dtype_name(dt) << " m " << c.m << " n " << c.n << " K " << c.K
                                      << (c.transposed ? " transposed" : " rows"));
    const Operands o = make(c, dt, true, 11);
    const std::vector<float> got = run(t, o, c);
    for (int64_t r = 0; r < c.m; ++r)
        for (int64_t j = 0; j < c.n; ++j) {
            double want = 0, mag = 0;
            for (int64_t k = 0; k < c.K; ++k) {
                const int64_t i = c.transposed ? k * c.n + j : j * c.K + k;
                float w;
                if (dt == DType::kF32) {
                    std::memcpy(&w, o.b.data() + i * 4, 4);
                } else {
                    uint16_t h;
                    std::memcpy(&h, o.b.data() + i * 2, 2);
                    w = bf16_to_f32(h);
                }
                want += double(o.a[size_t(r * c.K + k)]) * w;
                mag += std::fabs(double(o.a[size_t(r * c.K + k)]) * w);
            }
            ASSERT_NEAR(got[size_t(r * c.n + j)], want, 1e-5 * mag + 1e-30) << "r " << r << " j " << j;
        }
}

TEST(CpuKernels, EveryTableNearTheFloat64Product) {
    const KernelTable* tables[] = {&scalar_kernels(), avx2_kernels(), avx512_kernels(), avx512_bf16_kernels(),
                                   amx_kernels()};
    for (const KernelTable* t : tables) {
        if (t == nullptr) continue;
        for (DType dt : {DType::kF32, DType::kBF16})
            for (const Case& c : kCases) expect_near_float64(*t, dt, c);
    }
}

// The AMX tiles: near float64 on their own blocks and tails; the same bits whatever rows a call holds (a task's rows
// are the tokens routed to an expert, which no thread count changes; split at 32-row blocks and off them, both halves
// past the streaming path) and on reruns; everything that is not bf16 x bf16-valued rows keeps the avx512 bits.
TEST(CpuKernels, AmxTilesNearTheFloat64Product) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    for (const Case& c : kAmxCases) expect_near_float64(*amx_kernels(), DType::kBF16, c);
    for (const Case& c : kCases) expect_near_float64(*amx_kernels(), DType::kBF16, c);
}

TEST(CpuKernels, AmxTilesGiveTheSameBitsForAnyRowSplit) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    const KernelTable& t = *amx_kernels();
    for (const Case& c : kAmxCases) {
        if (c.m < 2 * 25) continue;
        SCOPED_TRACE(::testing::Message()
                     << "m " << c.m << " n " << c.n << " K " << c.K << (c.transposed ? " transposed" : " rows"));
        const Operands o = make(c, DType::kBF16, true, uint64_t(c.n * 31 + c.K));
        const std::vector<float> whole = run(t, o, c);
        expect_same_bits(whole, run(t, o, c), "amx rerun");
        for (int64_t split : {int64_t(32), int64_t(25), c.m - 25}) {
            std::vector<float> parts(whole.size(), std::nanf(""));
            gemm_rows(t, o.rows.data(), split, o.w, c.n, parts.data(), c.n);
            gemm_rows(t, o.rows.data() + split, c.m - split, o.w, c.n, parts.data() + split * c.n, c.n);
            expect_same_bits(whole, parts, "amx whole vs split rows");
        }
    }
}

// Up to kAmxWeightTileMaxRows rows the weights' rows are the tiles' A operand (weight tiles), above it they are
// packed as the B operand: the same products summed in the same order, so a task's rows give the same bits on
// either side of the hand-over (blocks of k and of rows, partial tiles and K tails included).
TEST(CpuKernels, AmxWeightTilesAreThePackedTilesBitForBit) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    const KernelTable& t = *amx_kernels();
    const int64_t over = kAmxWeightTileMaxRows + 36;
    for (const Case& c : {Case{over, 70, 5000, false}, Case{over, 257, 2048, false}, Case{over, 33, 31, false},
                          Case{over, 130, 1100, false}}) {
        SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " K " << c.K);
        const Operands o = make(c, DType::kBF16, true, uint64_t(c.n * 17 + c.K));
        const std::vector<float> packed = run(t, o, c);  // all rows on the packed tiles
        for (int64_t r0 : {int64_t(0), int64_t(16), c.m - 50}) {
            const int64_t m = std::min<int64_t>(kAmxWeightTileMaxRows, c.m - r0);
            std::vector<float> part(size_t(m * c.n), std::nanf(""));
            gemm_rows(t, o.rows.data() + r0, m, o.w, c.n, part.data(), c.n);
            expect_same_bits(part, std::vector<float>(packed.begin() + r0 * c.n, packed.begin() + (r0 + m) * c.n),
                             "weight tiles vs packed tiles");
        }
    }
}

TEST(CpuKernels, AmxTableKeepsTheAvx512BitsElsewhere) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    for (const Case& c : kCases) {
        SCOPED_TRACE(::testing::Message() << "m " << c.m << " n " << c.n << " K " << c.K);
        for (DType dt : {DType::kF32, DType::kF16}) {
            const Operands o = make(c, dt, true, 5);
            expect_same_bits(run(*amx_kernels(), o, c), run(*avx512_kernels(), o, c), "amx table, f32/f16 weights");
        }
        const Operands f32_rows = make(c, DType::kBF16, false, 7);  // rows that are not bf16 values: the f32 tile
        expect_same_bits(run(*amx_kernels(), f32_rows, c), run(*avx512_kernels(), f32_rows, c), "amx table, f32 rows");
        if (gemm_path(*amx_kernels(), c.m, f32_rows.w) == GemmPath::kStream) {  // decode keeps the f32 GEMV
            const Operands o = make(c, DType::kBF16, true, 9);
            expect_same_bits(run(*amx_kernels(), o, c), run(*avx512_kernels(), o, c), "amx table decode");
        }
    }
}

// bf16 x bf16 tasks leave the GEMV for the tiles at gemm_bf16_from_rows, below the f32 tiles' hand-over, except
// batched_mm's groups (gemv): each of their outputs stays its pair's lone GEMV, the avx512 table's bits.
TEST(CpuKernels, AmxTakesSmallBf16TasksButNotBatchedGroups) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    const KernelTable& t = *amx_kernels();
    ASSERT_GE(t.gemm_bf16_from_rows, 1);
    ASSERT_LE(t.gemm_bf16_from_rows, stream_max_rows(false));
    const Case small{t.gemm_bf16_from_rows, 70, 300, false};
    const Operands o = make(small, DType::kBF16, true, 11);
    EXPECT_EQ(gemm_path(t, small.m, o.w), GemmPath::kAmx);
    EXPECT_EQ(gemm_path(t, small.m, o.w, /*gemv=*/true), GemmPath::kStream);
    expect_near_float64(t, DType::kBF16, small);
    std::vector<float> gemv(size_t(small.m * small.n), std::nanf(""));
    gemm_rows(t, o.rows.data(), small.m, o.w, small.n, gemv.data(), small.n, /*gemv=*/true);
    expect_same_bits(gemv, run(*avx512_kernels(), o, small), "amx table, batched group");
    for (int64_t r = 0; r < small.m; ++r) {  // and each row alone: the GEMV of its pair
        std::vector<float> one(size_t(small.n), std::nanf(""));
        gemm_rows(t, o.rows.data() + r, 1, o.w, small.n, one.data(), small.n, /*gemv=*/true);
        expect_same_bits(one, std::vector<float>(gemv.begin() + r * small.n, gemv.begin() + (r + 1) * small.n),
                         "amx table, one row of a batched group");
    }
}

// dense_gemm splits rows and columns into tasks by shape alone, so any thread count gives the same bits; on the amx
// table (where kernels() picks it) with bf16-valued A that is the AMX path, its tiles set up on every worker thread.
TEST(CpuKernels, AmxDenseGemmSameBitsForAnyThreadCount) {
    if (amx_skip()) GTEST_SKIP() << amx_skip();
    if (std::string(kernels().name) != "amx") GTEST_SKIP() << "MOEX_CPU_KERNELS chose " << kernels().name;
    const Case c{1100, 300, 1100, false};
    const Operands o = make(c, DType::kBF16, true, 3);
    std::vector<float> first(size_t(c.m * c.n));
    dense_gemm(o.a.data(), o.b.data(), DType::kBF16, first.data(), c.m, c.n, c.K, 1);
    expect_same_bits(first, run(*amx_kernels(), o, c), "dense_gemm vs gemm_rows");
    for (int threads : {2, 3, 16, 0}) {
        std::vector<float> again(first.size(), std::nanf(""));
        dense_gemm(o.a.data(), o.b.data(), DType::kBF16, again.data(), c.m, c.n, c.K, threads);
        expect_same_bits(first, again, "dense_gemm threads");
    }
}

// MOEX_CPU_KERNELS (tests/CMakeLists.txt reruns tests under each value) selects that table where the CPU has it;
// unforced, amx wherever the CPU and OS allow it, else avx512_bf16 where vdpbf16ps runs at the FMA's rate, else
// avx512 (avx512_bf16 only when asked for).
// The vector f32 -> bf16 conversions give f32_to_bf16's bits: ties to even both ways, the largest finite values (which
// round to inf), inf, NaNs of either sign and payload (quieted, sign kept), signed zeros, f32 subnormals (kept, where
// vcvtneps2bf16 would flush them), random values; every length up to 40 for the tails.
TEST(CpuKernels, VectorBf16ConversionIsTheScalarOne) {
    std::vector<uint32_t> bits = {0x00000000u, 0x80000000u, 0x00000001u, 0x807fffffu, 0x00018000u,
                                  0x3f808000u, 0x3f818000u, 0x3f807fffu, 0x3f808001u, 0x7f7fffffu,
                                  0xff7fffffu, 0x7f7f8000u, 0x7f800000u, 0xff800000u, 0x7fc00000u,
                                  0xffc00001u, 0x7f800001u, 0xff812345u, 0x7fbfffffu};
    std::mt19937 rng(7);
    for (int i = 0; i < 4000; ++i) bits.push_back(uint32_t(rng()));
    std::vector<float> v(bits.size());
    for (size_t i = 0; i < bits.size(); ++i) std::memcpy(&v[i], &bits[i], 4);
    int tables = 0;
    for (const KernelTable* t : {avx2_kernels(), avx512_kernels()}) {
        if (t == nullptr || t->to_bf16 == nullptr) continue;
        ++tables;
        SCOPED_TRACE(t->name);
        for (int64_t n :
             {int64_t(v.size()), int64_t(1), int64_t(7), int64_t(9), int64_t(15), int64_t(17), int64_t(40)}) {
            std::vector<uint16_t> got(size_t(n) + 1, 0xabcd);
            t->to_bf16(v.data(), n, got.data());
            for (int64_t i = 0; i < n; ++i)
                ASSERT_EQ(got[size_t(i)], f32_to_bf16(v[size_t(i)]))
                    << "n " << n << " value bits " << std::hex << bits[size_t(i)];
            EXPECT_EQ(got[size_t(n)], 0xabcd) << "wrote past n = " << n;
        }
    }
    if (tables == 0) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
}

void expect_outer_is_the_gemm(const KernelTable& t) {
    std::mt19937 rng(11);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (const int64_t m : {1, 2, 3, 4, 5, 8})
        for (const auto& [M, L] : {std::pair<int64_t, int64_t>{7, 16}, {24, 100}, {40, 136}, {13, 200}}) {
            SCOPED_TRACE("m " + std::to_string(m) + " M " + std::to_string(M) + " L " + std::to_string(L));
            std::vector<float> P(size_t(m * M)), Q(size_t(m * L)), pt(size_t(M * m)), c(size_t(M * L));
            for (float& v : P) v = nd(rng);
            for (float& v : Q) v = nd(rng);
            for (int64_t r = 0; r < m; ++r)
                for (int64_t i = 0; i < M; ++i) pt[size_t(i * m + r)] = P[size_t(r * M + i)];
            std::vector<const float*> rows(static_cast<size_t>(M));
            for (int64_t i = 0; i < M; ++i) rows[size_t(i)] = pt.data() + i * m;
            gemm_rows(t, rows.data(), M, WeightMat{Q.data(), DType::kF32, true, L, m}, L, c.data(), L);
            std::vector<uint16_t> got(size_t(M * L) + 1, 0xabcd);
            t.outer_bf16(P.data(), M, Q.data(), L, m, got.data());
            for (int64_t i = 0; i < M * L; ++i) ASSERT_EQ(got[size_t(i)], f32_to_bf16(c[size_t(i)])) << "element " << i;
            EXPECT_EQ(got[size_t(M * L)], 0xabcd);
        }
}

// outer_bf16 gives the bits of gemm_rows (Pᵀ's rows against Q as transposed f32 weights) rounded by to_bf16, for the
// row counts the backward hands it and column counts with tails.
TEST(CpuKernels, OuterProductIsTheGemmsBits) {
    int tables = 0;
    for (const KernelTable* t : {avx2_kernels(), avx512_kernels()}) {
        if (t == nullptr || t->outer_bf16 == nullptr) continue;
        ++tables;
        SCOPED_TRACE(t->name);
        expect_outer_is_the_gemm(*t);
    }
    if (tables == 0) GTEST_SKIP() << "this CPU has neither AVX2 nor AVX-512";
}

TEST(CpuKernels, ForcedTableIsTheOneThatRuns) {
    const char* force = std::getenv("MOEX_CPU_KERNELS");
    const std::string want = force ? force : "";
    if (want.empty()) {
        if (amx_kernels() != nullptr)
            EXPECT_EQ(&kernels(), amx_kernels()) << "amx is the default where it runs";
        else if (avx512_bf16_kernels() != nullptr && vdpbf16ps_at_fma_rate())
            EXPECT_EQ(&kernels(), avx512_bf16_kernels()) << "vdpbf16ps at the FMA's rate: its tile is the default";
        else
            EXPECT_STRNE(kernels().name, "avx512_bf16") << "vdpbf16ps slower than the FMA: its table only when asked";
        return;
    }
    const KernelTable* t = want == "scalar"        ? &scalar_kernels()
                           : want == "avx2"        ? avx2_kernels()
                           : want == "avx512"      ? avx512_kernels()
                           : want == "avx512_bf16" ? avx512_bf16_kernels()
                           : want == "amx"         ? amx_kernels()
                                                   : nullptr;
    if (t == nullptr) GTEST_SKIP() << "this CPU has no " << want;
    EXPECT_EQ(&kernels(), t);
}

}  // namespace
}  // namespace moex::cpu
