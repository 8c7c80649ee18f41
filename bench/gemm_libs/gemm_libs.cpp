// moex_gemm_libs: the grouped expert GEMMs of `moex bench`'s shapes (per hit expert e with m_e routed rows:
// up (m_e, 2I) = X_e·W_upᵀ and down (m_e, H) = Z_e·W_downᵀ) timed through the CPU GEMM libraries (oneDNN's matmul
// when built with it, MKL and OpenBLAS cblas dlopen'ed) and moex's own gemm_rows, for issue #15's choice.
#include <dlfcn.h>
#include <fmt/format.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <tuple>
#include <vector>

#include "common/random_data.h"
#include "common/shapes.h"
#include "moex/tensor.h"
#include "src/cpu/gemm.h"
#if MOEX_HAVE_DNNL
#include <dnnl.hpp>
#endif

namespace {

using moex::DType;
using moex::Tensor;

// One grouped call: rows per expert, and the operands of every set (weights rotated past the cache).
struct Problem {
    moex::shapes::ExpertsShape s;
    DType dtype;                   // of the weights; libraries get A in it too, moex f32 rows
    std::vector<Tensor> up, down;  // per set: (E, 2I, H), (E, H, I)
    Tensor x32, z32, x16, z16;     // (S, H), (S, I): rows sorted by expert
    Tensor c_up, c_down;           // (S, 2I), (S, H) f32
    std::vector<int64_t> begin;    // (E + 1) row offsets of the current routing
    int set = 0;
    const void* w_up(int64_t e) const {  // (2I, H)
        return static_cast<const char*>(up[size_t(set)].data()) + e * 2 * s.I * s.H * moex::dtype_size(dtype);
    }
    const void* w_down(int64_t e) const {  // (H, I)
        return static_cast<const char*>(down[size_t(set)].data()) + e * s.H * s.I * moex::dtype_size(dtype);
    }
};

// A GEMM library: C (m, n) f32 = A (m, k)·Bᵀ with B (n, k) row-major, A and B in `dt`; false: not available.
using GemmFn = std::function<void(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, DType dt)>;

// Every hit expert through one library call per projection (the library threads inside each call).
void grouped_library(Problem& p, const GemmFn& gemm) {
    const bool lowp = p.dtype != DType::kF32;
    const int64_t es = lowp ? 2 : 4, H = p.s.H, I = p.s.I;
    const char* x = static_cast<const char*>(lowp ? p.x16.data() : p.x32.data());
    const char* z = static_cast<const char*>(lowp ? p.z16.data() : p.z32.data());
    for (int64_t e = 0; e < p.s.E; ++e) {
        const int64_t r0 = p.begin[size_t(e)], m = p.begin[size_t(e) + 1] - r0;
        if (m == 0) continue;
        gemm(x + r0 * H * es, p.w_up(e), static_cast<float*>(p.c_up.data()) + r0 * 2 * I, m, 2 * I, H, p.dtype);
        gemm(z + r0 * I * es, p.w_down(e), static_cast<float*>(p.c_down.data()) + r0 * H, m, H, I, p.dtype);
    }
}

// moex through the same harness: dense_gemm per expert and projection (src/cpu/gemm.h: the experts path's kernels and
// task widths on moex's pool, threads over column blocks). moex's own experts call puts every expert's tasks in one
// pool run (`moex bench` times that, gate and combine included).
void grouped_moex(Problem& p, int threads) {
    const int64_t H = p.s.H, I = p.s.I;
    const float* x = static_cast<const float*>(p.x32.data());
    const float* z = static_cast<const float*>(p.z32.data());
    for (int64_t e = 0; e < p.s.E; ++e) {
        const int64_t r0 = p.begin[size_t(e)], m = p.begin[size_t(e) + 1] - r0;
        if (m == 0) continue;
        moex::cpu::dense_gemm(x + r0 * H, p.w_up(e), p.dtype, static_cast<float*>(p.c_up.data()) + r0 * 2 * I, m, 2 * I,
                              H, threads);
        moex::cpu::dense_gemm(z + r0 * I, p.w_down(e), p.dtype, static_cast<float*>(p.c_down.data()) + r0 * H, m, H, I,
                              threads);
    }
}

// cblas entry points (the enums are ints in the ABI; bf16 is uint16_t; MKL lp64 and OpenBLAS take int sizes).
using SgemmFn = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int, float, float*, int);
using Bf16Fn = void (*)(int, int, int, int, int, int, float, const uint16_t*, int, const uint16_t*, int, float, float*,
                        int);
using SetThreadsFn = void (*)(int);
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;

struct Cblas {
    std::string name;
    SgemmFn sgemm = nullptr;
    Bf16Fn bf16 = nullptr;  // MKL cblas_gemm_bf16bf16f32, OpenBLAS cblas_sbgemm
};

Cblas open_cblas(const std::string& name, const std::string& path, const char* bf16_symbol, const char* threads_symbol,
                 int threads) {
    Cblas c{name};
    void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
        fmt::print(stderr, "{}: not measured ({})\n", name, dlerror());
        return c;
    }
    c.sgemm = reinterpret_cast<SgemmFn>(dlsym(lib, "cblas_sgemm"));
    c.bf16 = reinterpret_cast<Bf16Fn>(dlsym(lib, bf16_symbol));
    if (auto set = reinterpret_cast<SetThreadsFn>(dlsym(lib, threads_symbol))) set(threads);
    return c;
}

GemmFn cblas_gemm(const Cblas& lib) {
    return [&lib](const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, DType dt) {
        const int M = int(m), N = int(n), K = int(k);
        if (dt == DType::kF32)
            lib.sgemm(kRowMajor, kNoTrans, kTrans, M, N, K, 1.0f, static_cast<const float*>(a), K,
                      static_cast<const float*>(b), K, 0.0f, c, N);
        else
            lib.bf16(kRowMajor, kNoTrans, kTrans, M, N, K, 1.0f, static_cast<const uint16_t*>(a), K,
                     static_cast<const uint16_t*>(b), K, 0.0f, c, N);
    };
}

#if MOEX_HAVE_DNNL
// oneDNN matmul with B as the (k, n) matrix in "ba" order (the (n, k) rows in place); one primitive per shape, made
// on first use (the warm-up call), as a framework's primitive cache does.
struct Dnnl {
    dnnl::engine eng{dnnl::engine::kind::cpu, 0};
    dnnl::stream stream{eng};
    std::map<std::tuple<int64_t, int64_t, int64_t, int>, dnnl::matmul> cache;

    struct Mds {
        dnnl::memory::desc a, b, c;
    };
    static Mds mds(int64_t m, int64_t n, int64_t k, DType dt) {
        using tag = dnnl::memory::format_tag;
        const auto t = dt == DType::kF32 ? dnnl::memory::data_type::f32 : dnnl::memory::data_type::bf16;
        return {{{m, k}, t, tag::ab}, {{k, n}, t, tag::ba}, {{m, n}, dnnl::memory::data_type::f32, tag::ab}};
    }
    dnnl::matmul& get(int64_t m, int64_t n, int64_t k, DType dt) {
        auto key = std::make_tuple(m, n, k, int(dt));
        auto it = cache.find(key);
        if (it == cache.end()) {
            const Mds d = mds(m, n, k, dt);
            const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(d.a, d.b, d.c), eng);
            it = cache.emplace(key, dnnl::matmul(pd)).first;
        }
        return it->second;
    }
    void gemm(const void* a, const void* b, float* c, int64_t m, int64_t n, int64_t k, DType dt) {
        const Mds d = mds(m, n, k, dt);
        dnnl::memory am(d.a, eng, const_cast<void*>(a)), bm(d.b, eng, const_cast<void*>(b)), cm(d.c, eng, c);
        get(m, n, k, dt).execute(stream, {{DNNL_ARG_SRC, am}, {DNNL_ARG_WEIGHTS, bm}, {DNNL_ARG_DST, cm}});
        stream.wait();
    }
};
#endif

// Uniform routing (k distinct experts per token) of repetition `rep`: rows per expert.
void route(Problem& p, int64_t T, uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::vector<int64_t> count(size_t(p.s.E), 0), ids(size_t(p.s.E));
    for (int64_t t = 0; t < T; ++t) {
        for (int64_t e = 0; e < p.s.E; ++e) ids[size_t(e)] = e;
        for (int64_t j = 0; j < p.s.k; ++j) {  // partial Fisher-Yates
            const int64_t r = j + int64_t(rng() % uint64_t(p.s.E - j));
            std::swap(ids[size_t(j)], ids[size_t(r)]);
            ++count[size_t(ids[size_t(j)])];
        }
    }
    p.begin.assign(size_t(p.s.E) + 1, 0);
    for (int64_t e = 0; e < p.s.E; ++e) p.begin[size_t(e) + 1] = p.begin[size_t(e)] + count[size_t(e)];
}

Problem make_problem(const moex::shapes::ExpertsShape& s, DType dt, int64_t T, int64_t llc, int threads) {
    Problem p{s, dt};
    const int64_t set_bytes = 3 * s.E * s.H * s.I * moex::dtype_size(dt);
    const int sets = int(std::max<int64_t>(1, (4 * llc + set_bytes - 1) / set_bytes));
    for (int i = 0; i < sets; ++i) {
        p.up.push_back(Tensor(dt, {s.E, 2 * s.I, s.H}));
        p.down.push_back(Tensor(dt, {s.E, s.H, s.I}));
        moex::common::fill_random(p.up.back().view(), 0.02, 10 + i, moex::common::Distribution::kUniform, threads);
        moex::common::fill_random(p.down.back().view(), 0.02, 20 + i, moex::common::Distribution::kUniform, threads);
    }
    const int64_t S = T * s.k;
    p.x16 = Tensor(DType::kBF16, {S, s.H}), p.z16 = Tensor(DType::kBF16, {S, s.I});
    moex::common::fill_random(p.x16.view(), 1.0, 1, moex::common::Distribution::kUniform, threads);
    moex::common::fill_random(p.z16.view(), 0.1, 2, moex::common::Distribution::kUniform, threads);
    p.x32 = Tensor(DType::kF32, {S, s.H}), p.z32 = Tensor(DType::kF32, {S, s.I});
    for (int64_t i = 0; i < S * s.H; ++i)
        static_cast<float*>(p.x32.data())[i] = moex::bf16_to_f32(static_cast<const uint16_t*>(p.x16.data())[i]);
    for (int64_t i = 0; i < S * s.I; ++i)
        static_cast<float*>(p.z32.data())[i] = moex::bf16_to_f32(static_cast<const uint16_t*>(p.z16.data())[i]);
    p.c_up = Tensor(DType::kF32, {S, 2 * s.I}), p.c_down = Tensor(DType::kF32, {S, s.H});
    return p;
}

struct Timing {
    double median_ms = 0;
    int reps = 0;
    double touched = 0;  // mean experts hit per repetition
};

Timing time_grouped(Problem& p, int64_t T, double case_seconds, int max_reps, const std::function<void()>& call) {
    std::vector<double> ms;
    double spent = 0, touched = 0;
    for (int rep = 0; rep <= max_reps && (rep < 2 || spent < case_seconds); ++rep) {  // rep 0: the warm-up
        route(p, T, 1000 + uint64_t(rep));
        p.set = rep % int(p.up.size());
        const auto t0 = std::chrono::steady_clock::now();
        call();
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        spent += s;
        if (rep == 0) continue;
        ms.push_back(s * 1e3);
        for (int64_t e = 0; e < p.s.E; ++e) touched += p.begin[size_t(e) + 1] > p.begin[size_t(e)];
    }
    std::sort(ms.begin(), ms.end());
    return {ms[ms.size() / 2], int(ms.size()), touched / double(ms.size())};
}

}  // namespace

int main(int argc, char** argv) {
    CLI::App app{"Grouped expert GEMMs through oneDNN, MKL, OpenBLAS and moex (issue #15)"};
    std::vector<std::string> shape_names{"qwen3-30b-a3b", "mixtral-8x7b"}, dtypes{"bf16", "f32"};
    std::vector<std::string> libs{"moex", "onednn", "mkl", "openblas"};
    std::vector<int64_t> tokens{1, 64, 512};
    int threads = 2, max_reps = 5;
    double case_seconds = 3;
    int64_t llc_mib = 260;
    std::string mkl = "libmkl_rt.so.3", openblas = "libopenblas.so.0";
    app.add_option("--shapes", shape_names)->delimiter(',');
    app.add_option("--dtypes", dtypes, "bf16, f32")->delimiter(',');
    app.add_option("--libs", libs, "moex, onednn, mkl, openblas")->delimiter(',');
    app.add_option("--tokens", tokens)->delimiter(',');
    app.add_option("--threads", threads);
    app.add_option("--reps", max_reps);
    app.add_option("--case-seconds", case_seconds);
    app.add_option("--llc-mib", llc_mib, "weights rotated past 4x this");
    app.add_option("--mkl", mkl, "path of libmkl_rt (MKL_THREADING_LAYER=GNU keeps it on libgomp)");
    app.add_option("--openblas", openblas);
    CLI11_PARSE(app, argc, argv);

    const Cblas mkl_lib = open_cblas("mkl", mkl, "cblas_gemm_bf16bf16f32", "MKL_Set_Num_Threads", threads);
    const Cblas ob_lib = open_cblas("openblas", openblas, "cblas_sbgemm", "openblas_set_num_threads", threads);
#if MOEX_HAVE_DNNL
    Dnnl dnnl_lib;
#endif
    fmt::print("moex kernel table: {}\n\n", moex::cpu::gemm_kernels());
    fmt::print(
        "| shape | dtype | T | library | ms | GFLOP/s | GB/s of touched weights | reps "
        "|\n|---|---|---|---|---|---|---|---|\n");
    for (const auto& sn : shape_names) {
        const moex::shapes::ExpertsShape* s = nullptr;
        for (const auto& m : moex::shapes::kModelShapes)
            if (m.name == sn) s = &m;
        if (s == nullptr) return fmt::print(stderr, "unknown shape {}\n", sn), 2;
        for (const auto& dn : dtypes) {
            const DType dt = dn == "f32" ? DType::kF32 : DType::kBF16;
            const int64_t tmax = *std::max_element(tokens.begin(), tokens.end());
            Problem p = make_problem(*s, dt, tmax, llc_mib << 20, threads);
            for (int64_t T : tokens)
                for (const auto& lib : libs) {
                    std::function<void()> call;
                    if (lib == "moex") {
                        call = [&] { grouped_moex(p, threads); };
                    } else if (lib == "mkl" || lib == "openblas") {
                        const Cblas& c = lib == "mkl" ? mkl_lib : ob_lib;
                        if (!(dt == DType::kF32 ? c.sgemm != nullptr : c.bf16 != nullptr)) {
                            fmt::print("| {} | {} | {} | {} | n/a (no {} GEMM) | | | |\n", sn, dn, T, lib, dn);
                            continue;
                        }
                        call = [&, fn = cblas_gemm(c)] { grouped_library(p, fn); };
#if MOEX_HAVE_DNNL
                    } else if (lib == "onednn") {
                        try {  // every primitive made before the timing
                            for (int rep = 0; rep <= max_reps; ++rep) {
                                route(p, T, 1000 + uint64_t(rep));
                                for (int64_t e = 0; e < s->E; ++e)
                                    if (const int64_t m = p.begin[size_t(e) + 1] - p.begin[size_t(e)]; m > 0)
                                        dnnl_lib.get(m, 2 * s->I, s->H, dt), dnnl_lib.get(m, s->H, s->I, dt);
                            }
                        } catch (const dnnl::error& err) {  // e.g. oneDNN 2.6 has no bf16 matmul without AVX-512
                            fmt::print("| {} | {} | {} | {} | n/a (no {} matmul on this CPU: {}) | | | |\n", sn, dn, T,
                                       lib, dn, err.what());
                            continue;
                        }
                        call = [&] {
                            grouped_library(p, [&](const void* a, const void* b, float* c, int64_t m, int64_t n,
                                                   int64_t k, DType d) { dnnl_lib.gemm(a, b, c, m, n, k, d); });
                        };
#endif
                    } else {
                        fmt::print("| {} | {} | {} | {} | n/a (not built in) | | | |\n", sn, dn, T, lib);
                        continue;
                    }
                    const Timing t = time_grouped(p, T, case_seconds, max_reps, call);
                    const double flop = 6.0 * double(T * s->k) * double(s->H * s->I);
                    const double bytes = t.touched * 3.0 * double(s->H * s->I) * double(moex::dtype_size(dt));
                    fmt::print("| {} | {} | {} | {} | {:.2f} | {:.1f} | {:.1f} | {} |\n", sn, dn, T, lib, t.median_ms,
                               flop / t.median_ms * 1e-6, bytes / t.median_ms * 1e-6, t.reps);
                    std::fflush(stdout);
                }
        }
    }
    return 0;
}
