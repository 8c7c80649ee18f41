// The vdpbf16ps tile alone, one thread, on one expert-sized GEMM (m rows of bf16 values against n x K bf16 weights):
// the weights packed into panels (gemm.cpp gemm_bf16) against read in place (gemm_bf16_in_place), the two alternated
// call by call so that a shared machine's drifting speed falls on both alike. The weights come from the caches (one
// matrix again and again) or from DRAM (the matrices of a large set in turn). Prints each variant's median GFLOP/s and
// the median of the per-pair time ratio in place / packed. With `stream` last, the streaming GEMV (the path below the
// table's tile_bf16_from_rows) takes the packed tile's place. Usage: moex_bf16_tile_micro [K=2048] [n=1536] [m=32]
// [set_mib=1024] [pairs=200] [packed|stream]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string_view>
#include <vector>

#include "moex/dtype.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
    using namespace moex;
    const int64_t K = argc > 1 ? std::atoll(argv[1]) : 2048, n = argc > 2 ? std::atoll(argv[2]) : 1536;
    const int64_t m = argc > 3 ? std::atoll(argv[3]) : 32, set_mib = argc > 4 ? std::atoll(argv[4]) : 1024;
    const int pairs = argc > 5 ? std::atoi(argv[5]) : 200;
    const bool stream = argc > 6 && std::string_view(argv[6]) == "stream";
    const cpu::KernelTable* t = cpu::avx512_bf16_kernels();
    if (t == nullptr || K <= 0 || n <= 0 || m <= 0 || pairs <= 0) {
        std::printf("%s\n", t == nullptr ? "this CPU has no AVX512_BF16: nothing to time" : "bad arguments");
        return 1;
    }
    cpu::KernelTable packed = *t, in_place = *t;
    packed.tile_bf16_from_rows = stream ? 0 : 1, in_place.tile_bf16_from_rows = 1;
    packed.bf16_in_place_max_rows = 0, in_place.bf16_in_place_max_rows = int64_t(1) << 30;
    const int64_t bytes = n * K * 2, mats = std::max<int64_t>(1, set_mib * (int64_t(1) << 20) / bytes);
    std::vector<uint16_t> w(size_t(mats * n * K));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (auto& v : w) v = f32_to_bf16(0.05f * normal(rng));
    std::vector<float> a(size_t(m * K)), c(size_t(m * n));
    for (auto& v : a) v = bf16_to_f32(f32_to_bf16(normal(rng)));
    std::vector<const float*> rows;
    for (int64_t r = 0; r < m; ++r) rows.push_back(a.data() + r * K);
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(m, K, cpu::RowsFor::kBf16Tile) + 16));
    cpu::Bf16Rows prepared;
    if (!cpu::prepare_bf16_rows(*t, rows.data(), m, K, cpu::RowsFor::kBf16Tile, buf.data(), prepared)) return 1;
    auto call = [&](const cpu::KernelTable& kt, int64_t i) {
        const cpu::WeightMat b{w.data() + (i % mats) * n * K, DType::kBF16, false, K, K};
        const auto t0 = Clock::now();
        cpu::gemm_rows(kt, rows.data(), m, b, n, c.data(), n, false, &prepared);
        return std::chrono::duration<double>(Clock::now() - t0).count();
    };
    std::printf("table %s, K %lld, n %lld, m %lld, %lld matrices of %.2f MiB, %d pairs, %s\n", t->name, (long long)K,
                (long long)n, (long long)m, (long long)mats, double(bytes) / (1 << 20), pairs,
                stream ? "packed = the streaming GEMV" : "packed tile");
    const double flop = 2.0 * double(m) * double(n) * double(K);
    for (const bool dram : {false, true}) {
        std::vector<double> tp, ti, ratio;
        call(packed, 0), call(in_place, 0);
        for (int i = 0; i < pairs; ++i) {
            const int64_t j = dram ? 2 * i + 1 : 0;  // a matrix neither variant read last
            const bool first = i % 2 == 0;           // which one runs first alternates too
            const double x = first ? call(packed, j) : call(in_place, j + (dram ? 1 : 0));
            const double y = first ? call(in_place, j + (dram ? 1 : 0)) : call(packed, j);
            tp.push_back(first ? x : y), ti.push_back(first ? y : x), ratio.push_back(ti.back() / tp.back());
        }
        std::printf("%-5s packed %7.1f GFLOP/s  in place %7.1f GFLOP/s  in place / packed time: median %.3f\n",
                    dram ? "DRAM" : "cache", flop / median(tp) / 1e9, flop / median(ti) / 1e9, median(ratio));
    }
    return 0;
}
