// The CPU's quantized decode GEMVs alone, one thread: the f32 route (the table's stream_fused) against the decode
// GEMV on vdpbf16ps (stream_quant: all m rows at once where the table gives it that many, else row by row), on FP8
// weights with 128 x 128 float scales, MXFP4 (UE8M0 per 32) or NVFP4 (e4m3 per 16 and a global), from L2 (one matrix
// read again and again) and from DRAM (matrices of a large set in turn). Prints the weight bytes read per second of
// each (0, "refused", where a kernel does not take the problem). On a table without stream_quant (AVX2) only the f32
// route is timed. Usage: moex_quant_gemv_micro [K=2048] [n=768] [m=1] [set_mib=1024] [seconds=1] [fp8|mxfp4|nvfp4]
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "moex/dtype.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"

namespace {

using Clock = std::chrono::steady_clock;

template <class F>
double rate(double bytes_per_call, double seconds, F&& call) {
    call(0);
    int64_t calls = 0;
    const auto t0 = Clock::now();
    double t = 0;
    while (t < seconds) {
        call(calls++);
        t = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    return bytes_per_call * double(calls) / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
    using namespace moex;
    const int64_t K = argc > 1 ? std::atoll(argv[1]) : 2048, n = argc > 2 ? std::atoll(argv[2]) : 768;
    const int64_t m = argc > 3 ? std::atoll(argv[3]) : 1, set_mib = argc > 4 ? std::atoll(argv[4]) : 1024;
    const double seconds = argc > 5 ? std::atof(argv[5]) : 1.0;
    const std::string fmt = argc > 6 ? argv[6] : "fp8";
    const bool nv = fmt == "nvfp4", fp4 = nv || fmt == "mxfp4";
    const cpu::KernelTable& kt = cpu::kernels();
    if (kt.stream_fused == nullptr) {
        std::printf("table %s has no stream_fused: nothing to time\n", kt.name);
        return 1;
    }
    const int64_t bytes = fp4 ? n * K / 2 : n * K, mats = std::max<int64_t>(1, set_mib * (int64_t(1) << 20) / bytes);
    std::vector<uint8_t> codes(size_t(mats * bytes));
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (auto& c : codes)  // FP8: amax / 448 scaling; FP4: any two nibbles
        c = fp4 ? uint8_t(rng()) : f32_to_fp8e4m3(std::clamp(normal(rng) * 100.0f, -448.0f, 448.0f));
    const int64_t sld = nv ? K / 16 : fp4 ? K / 32 : (K + 127) / 128, srows = fp4 ? n : (n + 127) / 128;
    std::vector<float> scales(size_t(mats * srows * sld));
    std::vector<uint8_t> e8(scales.size());
    for (auto& s : scales) s = 0.001f * float(1 + rng() % 1000);
    for (auto& e : e8) e = uint8_t(nv ? 0x30 + rng() % 0x20 : 120 + rng() % 8);  // e4m3 2^-3 .. 2^1; ue8m0 2^-7 .. 1
    auto weights = [&](int64_t i) {
        if (fp4) {
            cpu::WeightMat w{codes.data() + i * bytes, DType::kU8, false, K / 2, K};
            const uint8_t* s = e8.data() + i * srows * sld;
            w.q = nv ? cpu::WeightQuant{QuantFormat::kNvfp4, s, DType::kFP8E4M3, sld, 1, 16, 0, 0.5f}
                     : cpu::WeightQuant{QuantFormat::kMxfp4, s, DType::kUE8M0, sld, 1, 32, 0, 1.0f};
            return w;
        }
        cpu::WeightMat w{codes.data() + i * bytes, DType::kFP8E4M3, false, K, K};
        w.q = cpu::WeightQuant{QuantFormat::kFp8, scales.data() + i * srows * sld, DType::kF32, sld, 128, 128, 0, 1.0f};
        return w;
    };
    std::vector<float> a(size_t(m * K)), c(size_t(m * n));
    for (auto& v : a) v = bf16_to_f32(f32_to_bf16(std::normal_distribution<float>()(rng)));
    std::vector<const float*> rows;
    for (int64_t r = 0; r < m; ++r) rows.push_back(a.data() + r * K);
    std::vector<float> buf(size_t(cpu::bf16_rows_floats(m, K, cpu::RowsFor::kStream) + 16));
    cpu::Bf16Rows prepared;
    if (kt.stream_quant != nullptr &&
        !cpu::prepare_bf16_rows(kt, rows.data(), m, K, cpu::RowsFor::kStream, buf.data(), prepared))
        return 1;
    auto f32 = [&](int64_t i) { return kt.stream_fused(rows.data(), m, weights(i), n, c.data(), n); };
    auto bf16 = [&](int64_t i) {
        if (kt.stream_quant == nullptr) return false;  // no vdpbf16ps (the AVX2 table)
        if (m <= kt.stream_quant_rows)                 // all rows at once, as the GEMMs give them
            return kt.stream_quant(prepared.a16, prepared.lda, m, prepared.scales, weights(i), n, c.data(), n);
        bool ok = true;
        for (int64_t r = 0; r < m; ++r)
            ok = ok && kt.stream_quant(prepared.a16 + r * prepared.lda, prepared.lda, 1, prepared.scales, weights(i), n,
                                       c.data() + r * n, n);
        return ok;
    };
    const bool f32_ok = f32(0), bf16_ok = bf16(0);
    std::printf("table %s, %s, K %lld, n %lld, m %lld, %lld matrices of %.2f MiB\n", kt.name, fmt.c_str(), (long long)K,
                (long long)n, (long long)m, (long long)mats, double(bytes) / (1 << 20));
    auto print = [&](const char* where, bool dram) {
        const double a = f32_ok ? rate(double(bytes), seconds, [&](int64_t i) { f32(dram ? i % mats : 0); }) : 0;
        const double b = bf16_ok ? rate(double(bytes), seconds, [&](int64_t i) { bf16(dram ? i % mats : 0); }) : 0;
        std::printf("%-5s stream_fused %6.2f GB/s%s   stream_quant %6.2f GB/s%s\n", where, a,
                    f32_ok ? "" : " (refused)", b, bf16_ok ? "" : " (refused)");
    };
    print("L2", false);
    print("DRAM", true);
    return 0;
}
