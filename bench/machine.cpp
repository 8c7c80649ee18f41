// The machine's floor terms for `moex bench`: cache size from sysfs, a multithreaded streaming-read bandwidth test,
// and dense GEMM rates of OpenBLAS and MKL (dlopen'ed: no build dependency) and of moex::cpu::dense_gemm.
#include "bench/machine.h"

#include <dlfcn.h>
#include <fmt/format.h>
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <thread>
#include <tuple>

#include "common/random_data.h"
#include "moex/error.h"
#include "moex/tensor.h"
#include "src/cpu/gemm.h"
#include "src/cpu/placement.h"

namespace moex::bench {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// "32768K" -> bytes.
int64_t parse_cache_size(const std::string& s) {
    char* end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (end == s.c_str() || v <= 0) return 0;
    const char unit = *end;
    return int64_t(v) * (unit == 'K' ? 1024 : unit == 'M' ? 1024 * 1024 : unit == 'G' ? 1024LL * 1024 * 1024 : 1);
}

// Largest data/unified cache listed under cpu0 in sysfs (the L3 here); sysconf's value is not trusted because in a
// VM it can report the host's cache (getconf said 256 MiB on a 32 MiB guest).
std::pair<int64_t, std::string> last_level_cache() {
    int64_t best = 0;
    std::string source;
    for (int i = 0; i < 8; ++i) {
        const std::string dir = fmt::format("/sys/devices/system/cpu/cpu0/cache/index{}/", i);
        std::ifstream type(dir + "type"), size(dir + "size");
        std::string t, s;
        if (!(type >> t) || !(size >> s) || t == "Instruction") continue;
        if (int64_t b = parse_cache_size(s); b > best) best = b, source = dir + "size";
    }
    if (best == 0) return {32 << 20, "default (sysfs has no cache sizes)"};
    return {best, source};
}

// Sums n floats read as S interleaved sequential streams (n / S each, n a multiple of 8·S): one stream is what a
// plain loop does; several streams keep more cache-line fills in flight, which some server cores need to saturate.
template <int S>
__attribute__((target("avx2"))) double sum_avx2(const float* p, int64_t n) {
    const int64_t m = n / S;
    __m256 acc[S];
    for (int s = 0; s < S; ++s) acc[s] = _mm256_setzero_ps();
    for (int64_t i = 0; i < m; i += 8)
        for (int s = 0; s < S; ++s) acc[s] = _mm256_add_ps(acc[s], _mm256_load_ps(p + s * m + i));
    alignas(32) float lanes[8];
    double total = 0;
    for (int s = 0; s < S; ++s) {
        _mm256_store_ps(lanes, acc[s]);
        for (float v : lanes) total += v;
    }
    return total;
}

// The AVX-512 reads: 16 floats (one cache line) per load and stream. kNonTemporal uses vmovntdqa (a hint the core
// may drop on write-back memory), kPrefetch adds a prefetchnta 2 KiB ahead in every stream: which of them, and how
// many streams, reach DRAM's limit differs by core and by load, so the floor takes the best of all of them.
enum class Read { kPlain, kNonTemporal, kPrefetch };
template <int S, Read R>
__attribute__((target("avx512f"))) double sum_avx512(const float* p, int64_t n) {
    const int64_t m = n / S;
    __m512 acc[S];
    for (int s = 0; s < S; ++s) acc[s] = _mm512_setzero_ps();
    for (int64_t i = 0; i < m; i += 16)
        for (int s = 0; s < S; ++s) {
            const float* q = p + s * m + i;
            if constexpr (R == Read::kPrefetch) _mm_prefetch(reinterpret_cast<const char*>(q + 512), _MM_HINT_NTA);
            __m512 v;
            if constexpr (R == Read::kNonTemporal)
                v = _mm512_castsi512_ps(_mm512_stream_load_si512(const_cast<float*>(q)));
            else
                v = _mm512_load_ps(q);
            acc[s] = _mm512_add_ps(acc[s], v);
        }
    double total = 0;
    for (int s = 0; s < S; ++s) total += _mm512_reduce_add_ps(acc[s]);
    return total;
}

double sum_scalar(const float* p, int64_t n) {
    float a[8] = {};
    for (int64_t i = 0; i + 8 <= n; i += 8)
        for (int j = 0; j < 8; ++j) a[j] += p[i + j];
    return double(a[0] + a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7]);
}

struct ReadKernel {
    const char* what;
    double (*sum)(const float* p, int64_t n);  // n a multiple of 128 (16 lanes x 8 streams), p 64-byte aligned
};

// The read kernels this CPU can run.
std::vector<ReadKernel> read_kernels() {
    std::vector<ReadKernel> k;
    if (__builtin_cpu_supports("avx512f")) {
        k.push_back({"avx512 x1", sum_avx512<1, Read::kPlain>});
        k.push_back({"avx512 x4", sum_avx512<4, Read::kPlain>});
        k.push_back({"avx512 x8", sum_avx512<8, Read::kPlain>});
        k.push_back({"avx512 vmovntdqa x8", sum_avx512<8, Read::kNonTemporal>});
        k.push_back({"avx512 prefetchnta x8", sum_avx512<8, Read::kPrefetch>});
    }
    if (__builtin_cpu_supports("avx2")) {
        k.push_back({"avx2 x1", sum_avx2<1>});
        k.push_back({"avx2 x8", sum_avx2<8>});
    }
    if (k.empty()) k.push_back({"scalar", sum_scalar});
    return k;
}

// Runs fn(thread, begin, end) over [0, n) split in `threads` 4 KiB-aligned slices, on fresh std::threads.
template <class Fn>
void parallel_slices(int threads, int64_t n, Fn fn) {
    std::vector<std::thread> pool;
    const int64_t per = (n + threads - 1) / threads;
    for (int w = 0; w < threads; ++w) {
        const int64_t b = std::min(n, w * per), e = std::min(n, b + per);
        pool.emplace_back([=] { fn(w, b, e); });
    }
    for (auto& t : pool) t.join();
}

// Signatures of the cblas entry points we use (cblas.h's enums are plain ints in the ABI; bfloat16 is uint16_t).
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using SbgemmFn = void (*)(int, int, int, int, int, int, float, const uint16_t*, int, const uint16_t*, int, float,
                          float*, int);
using SetThreadsFn = void (*)(int);
constexpr int kCblasRowMajor = 101, kCblasNoTrans = 111, kCblasTrans = 112;

// Timed runs of each dense GEMM after its warm-up, the best kept: a shared VM's rate moves by a third between runs
// (bench/RESULTS.md AQ: moex's bf16 2048³ from 310 to 383 GFLOP/s), and with 3 a grouped call often beat the floor.
constexpr int kGemmTries = 7;

template <class Fn>
double best_gflops(int64_t n, int tries, Fn fn) {
    auto t0 = std::chrono::steady_clock::now();
    fn();  // warm-up: page faults, thread pools, packing buffers
    double best = seconds_since(t0);
    if (best > 2.0) tries = 1;  // a slow (generic) kernel: one more run is enough to show it
    for (int i = 0; i < tries; ++i) {
        t0 = std::chrono::steady_clock::now();
        fn();
        best = std::min(best, seconds_since(t0));
    }
    return 2.0 * double(n) * double(n) * double(n) / best * 1e-9;
}

// A BLAS with the cblas ABI, found by dlopen (no build dependency): its sgemm, and its bf16 x bf16 -> f32 GEMM.
struct Blas {
    const char* name;
    std::vector<const char*> sonames;
    const char* bf16_symbol;     // OpenBLAS >= 0.3.10 built with BUILD_BFLOAT16; MKL (AMX where the CPU has it)
    const char* threads_symbol;  // sets the library's thread count
    const char* missing;         // how to get it
};

// cblas_sgemm, and the library's bf16 GEMM (bf16 A and B, f32 C) when the weights are bf16.
void measure_blas(const Blas& blas, MachineFloor& f, int threads, DType weight_dtype, const float* A, const float* B,
                  float* C, int64_t n) {
    void* lib = nullptr;
    for (const char* name : blas.sonames)
        if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    if (lib == nullptr) {
        f.notes.push_back(fmt::format("{} not measured: {} not found ({})", blas.name, blas.sonames[0], blas.missing));
        return;
    }
    auto sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    auto set_threads = reinterpret_cast<SetThreadsFn>(dlsym(lib, blas.threads_symbol));
    if (sgemm == nullptr) {
        f.notes.push_back(fmt::format("{} not measured: no cblas_sgemm symbol", blas.name));
        return;
    }
    if (set_threads != nullptr) set_threads(threads);
    const int N = int(n);
    const double g = best_gflops(n, kGemmTries, [&] {
        sgemm(kCblasRowMajor, kCblasNoTrans, kCblasTrans, N, N, N, 1.0f, A, N, B, N, 0.0f, C, N);
    });
    f.gemms.push_back({fmt::format("{} cblas_sgemm f32", blas.name), g});
    auto bf16 = reinterpret_cast<SbgemmFn>(dlsym(lib, blas.bf16_symbol));
    if (weight_dtype == DType::kBF16 && bf16 != nullptr) {
        Tensor A16(DType::kBF16, {n, n}), B16(DType::kBF16, {n, n});
        common::fill_random(A16.view(), 1.0, 3, common::Distribution::kUniform, threads);
        common::fill_random(B16.view(), 0.02, 4, common::Distribution::kUniform, threads);
        const auto* a16 = static_cast<const uint16_t*>(A16.data());
        const auto* b16 = static_cast<const uint16_t*>(B16.data());
        const double g16 = best_gflops(n, kGemmTries, [&] {
            bf16(kCblasRowMajor, kCblasNoTrans, kCblasTrans, N, N, N, 1.0f, a16, N, b16, N, 0.0f, C, N);
        });
        f.gemms.push_back({fmt::format("{} {} bf16 x bf16", blas.name, blas.bf16_symbol), g16});
    } else if (weight_dtype == DType::kBF16) {
        f.notes.push_back(
            fmt::format("{} bf16 GEMM not measured: this library has no {}", blas.name, blas.bf16_symbol));
    }
    // The library stays loaded: its worker threads may still be parked, and unloading under them is unsafe.
}

}  // namespace

CpuInfo probe_cpu() {
    CpuInfo c;
    std::ifstream info("/proc/cpuinfo");
    for (std::string line; std::getline(info, line);)
        if (line.rfind("model name", 0) == 0) {
            c.model = line.substr(line.find(':') + 2);
            break;
        }
    c.hardware_threads = int(std::max(1u, std::thread::hardware_concurrency()));
    std::tie(c.llc_bytes, c.llc_source) = last_level_cache();
    __builtin_cpu_init();
    const std::pair<const char*, bool> flags[] = {
        {"avx2", __builtin_cpu_supports("avx2")},         {"fma", __builtin_cpu_supports("fma")},
        {"f16c", __builtin_cpu_supports("f16c")},         {"avx512f", __builtin_cpu_supports("avx512f")},
        {"avx512bw", __builtin_cpu_supports("avx512bw")}, {"avx512bf16", __builtin_cpu_supports("avx512bf16")},
        {"amx-bf16", __builtin_cpu_supports("amx-bf16")},
    };
    for (const auto& [name, on] : flags)
        if (on) c.isa += (c.isa.empty() ? "" : " ") + std::string(name);
    if (!__builtin_cpu_supports("avx512f")) c.isa += " (no AVX-512)";
    const std::string_view table = cpu::gemm_kernels();
    // What the experts' GEMMs run in each table (src/cpu/kernels.h).
    const char* what =
        table == "amx"           ? "prefill: AMX-BF16 tiles (32x32 f32 blocks of TDPBF16PS) for bf16 and for FP8 / FP4 "
                                   "weights decoded into bf16 panels (scale blocks promoted in f32), AVX-512F 12x32 f32 tile "
                                   "otherwise; decode: AVX-512 GEMV (AVX2 for 1 row and transposed weights), AVX-512 "
                                   "quantized GEMV"
        : table == "avx512_bf16" ? "prefill: vdpbf16ps 12x32 tile for bf16 (weights read in place up to 64 rows) and, "
                                   "on AMD, for FP8 / FP4 weights decoded into bf16 rows, AVX-512F 12x32 f32 tile "
                                   "otherwise; decode: AVX-512 GEMV (AVX2 for 1 row and transposed weights), on AMD "
                                   "FP8 on vdpbf16ps up to 24 rows, AVX-512 quantized GEMV"
        : table == "avx512"      ? "prefill: AVX-512F 12x32 f32 tile; decode: AVX-512 GEMV (AVX2 for 1 row and "
                                   "transposed weights), AVX-512 quantized GEMV"
        : table == "avx2"        ? "prefill: AVX2 6x16 f32 tile; decode: AVX2 GEMV"
                                 : "portable C++";
    c.kernels = fmt::format("{} ({})", table, what);
    c.pinning = cpu::pinning_summary();
    return c;
}

// One timed pass of `sum` over [0, n) on `threads` threads, started before the clock: each thread reads its own
// slice (the one it first touched) in 4 MiB chunks claimed from that slice's counter, then helps finish the other
// slices, so a slow core does not hold the pass back (the experts' task pool balances the same way). Seconds from
// the release of the waiting threads to the last chunk; the sums land in sums[thread].
double read_pass(int threads, const float* p, int64_t n, double (*sum)(const float*, int64_t), double* sums) {
    constexpr int64_t kChunk = int64_t(1) << 20;  // floats: 4 MiB, a multiple of every kernel's 256
    const int64_t per = (n + threads - 1) / threads;
    std::vector<std::atomic<int64_t>> next(static_cast<size_t>(threads));
    for (int w = 0; w < threads; ++w) next[size_t(w)] = std::min(n, w * per);
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
            double acc = 0;
            for (int i = 0; i < threads; ++i) {
                const int s = (w + i) % threads;
                const int64_t end = std::min(n, (s + 1) * per);
                for (int64_t b; (b = next[size_t(s)].fetch_add(kChunk)) < end;)
                    acc += sum(p + b, std::min(kChunk, end - b));
            }
            sums[w] = acc;
        });
    while (ready.load() < threads) std::this_thread::yield();
    const auto t0 = std::chrono::steady_clock::now();
    go.store(true, std::memory_order_release);
    for (auto& t : pool) t.join();
    return seconds_since(t0);
}

ReadBandwidth measure_read_bandwidth(int threads, int64_t bytes, int tries, double settle_seconds) {
    const int64_t unit = int64_t(threads) * 8 * 1024;  // whole 4 KiB pages per thread, 16-stream divisible
    const int64_t n = std::max<int64_t>(1, bytes / 4 / unit) * unit;
    Tensor buf(DType::kF32, {n});
    float* p = static_cast<float*>(buf.data());
    parallel_slices(threads, n, [&](int, int64_t b, int64_t e) {  // first touch by the reading threads
        for (int64_t i = b; i < e; ++i) p[i] = 1.0f;
    });
    const std::vector<ReadKernel> kernels = read_kernels();
    std::vector<double> sums(static_cast<size_t>(threads)), best(kernels.size(), 1e30);
    // Untimed passes first: the first reads of a buffer just written ran slow on a VM (bench/RESULTS.md AF, AG5).
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < settle_seconds)
        read_pass(threads, p, n, kernels[0].sum, sums.data());
    for (int i = 0; i < tries; ++i)  // round-robin, so a burst of load from elsewhere hits every kernel alike
        for (size_t k = 0; k < kernels.size(); ++k) {
            best[k] = std::min(best[k], read_pass(threads, p, n, kernels[k].sum, sums.data()));
        }
    double total = 0;  // keep the sums alive so the loads cannot be optimised away
    for (double s : sums) total += s;
    if (total < 0) std::abort();
    ReadBandwidth r;
    for (size_t k = 0; k < kernels.size(); ++k) {
        const double gbps = double(n) * 4.0 / best[k] * 1e-9;
        r.all += fmt::format("{}{} {:.1f}", r.all.empty() ? "" : ", ", kernels[k].what, gbps);
        if (gbps > r.gbps) r.gbps = gbps, r.best = kernels[k].what;
    }
    return r;
}

// The dense GEMMs of size n³ this machine has for the compute term, appended to f.gemms (named with n): OpenBLAS, and
// MKL where it is on the library path (it uses AMX on CPUs with AMX-BF16), beside moex's own.
void measure_gemms(MachineFloor& f, int threads, DType weight_dtype, int64_t n) {
    Tensor A(DType::kF32, {n, n}), B(DType::kF32, {n, n}), C(DType::kF32, {n, n});
    common::fill_random(A.view(), 1.0, 1, common::Distribution::kUniform, threads);
    common::fill_random(B.view(), 0.02, 2, common::Distribution::kUniform, threads);
    const float* a = static_cast<const float*>(A.data());
    const Blas blases[] = {
        {"OpenBLAS",
         {"libopenblas.so.0", "libopenblas.so"},
         "cblas_sbgemm",
         "openblas_set_num_threads",
         "apt-get install libopenblas0"},
        {"MKL",
         {"libmkl_rt.so.2", "libmkl_rt.so.3", "libmkl_rt.so"},
         "cblas_gemm_bf16bf16f32",
         "MKL_Set_Num_Threads",
         "pip install mkl, its lib/ on LD_LIBRARY_PATH, MKL_THREADING_LAYER=GNU"},
    };
    const size_t first = f.gemms.size();
    for (const Blas& blas : blases)
        measure_blas(blas, f, threads, weight_dtype, a, static_cast<const float*>(B.data()),
                     static_cast<float*>(C.data()), n);
    float* c = static_cast<float*>(C.data());
    const double g32 =
        best_gflops(n, kGemmTries, [&] { cpu::dense_gemm(a, B.data(), DType::kF32, c, n, n, n, threads); });
    f.gemms.push_back({"moex dense_gemm f32", g32});
    if (weight_dtype != DType::kF32) {
        Tensor B16(weight_dtype, {n, n});
        common::fill_random(B16.view(), 0.02, 2, common::Distribution::kUniform, threads);
        // bf16: A rounded to bf16 like the experts' rows (x of a bf16 model, h rounded): what sends a GEMM to the amx
        // and avx512_bf16 tiles, so the floor is the rate the experts can reach (the f32 tile runs alike on either).
        std::vector<float> a16(a, a + n * n);
        if (weight_dtype == DType::kBF16)
            for (float& v : a16) v = bf16_to_f32(f32_to_bf16(v));
        const double g16 = best_gflops(
            n, kGemmTries, [&] { cpu::dense_gemm(a16.data(), B16.data(), weight_dtype, c, n, n, n, threads); });
        f.gemms.push_back({fmt::format("moex dense_gemm {}-weight", dtype_name(weight_dtype)), g16});
    }
    for (size_t i = first; i < f.gemms.size(); ++i) f.gemms[i].what += fmt::format(" {}³", n);
}

MachineFloor measure_floor(int threads, DType weight_dtype, int64_t read_bytes, int64_t gemm_n, double settle_seconds) {
    MachineFloor f;
    f.read_buffer_bytes = read_bytes;
    const ReadBandwidth rb = measure_read_bandwidth(threads, read_bytes, 5, settle_seconds);
    f.read_gbps = rb.gbps;
    f.read_what =
        fmt::format("best of 5 passes of each read kernel (xS: S streams per thread): {}; all: {}", rb.best, rb.all);
    // Many threads share a gemm_n³ GEMM in few tasks, and the rate it shows is below what the experts' larger
    // grouped GEMMs reach (measured on a 16-core AMX Xeon: 2.0 TFLOP/s against 2.3, bench/RESULTS.md C2): there twice
    // the size is measured too. The floor takes the best GEMM of every size.
    measure_gemms(f, threads, weight_dtype, gemm_n);
    const size_t larger = f.gemms.size();  // the first GEMM of the 2·gemm_n sizes, if any
    if (threads > 4) measure_gemms(f, threads, weight_dtype, 2 * gemm_n);
    for (size_t i = 0; i < f.gemms.size(); ++i)
        if (f.gemms[i].gflops > f.gemm_gflops) {
            f.gemm_gflops = f.gemms[i].gflops, f.gemm_best = f.gemms[i].what;
            f.gemm_size = i < larger ? gemm_n : 2 * gemm_n;
        }
    MOEX_REQUIRE(f.gemm_gflops > 0, ErrorCode::kUnsupported,
                 "no dense GEMM could be measured for the compute floor (neither OpenBLAS nor moex dense_gemm)");
    return f;
}

}  // namespace moex::bench
