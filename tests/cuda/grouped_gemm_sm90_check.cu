// Standalone GPU check and benchmark of the sm_90a grouped GEMM (cuda/gemm/grouped_gemm_sm90.cu): every case is
// compared with a float64 reference GEMM run on the GPU; then TFLOP/s of the prefill expert GEMMs, next to cuBLAS.
// Usage: grouped_gemm_sm90_check [--check] [--bench] [--model NAME]   (default: both; exit code 1 on any failure)
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "cuda/gemm/grouped_gemm.h"
#include "cuda/gemm/sm90_config.h"
#include "tests/cuda/check_support.cuh"

using namespace moex::cuda;
using namespace moex::test::gpu;
using moex::Activation;
using moex::DType;
using moex::GateKind;

namespace {

// ---- device data ------------------------------------------------------------------------------------------
template <typename T>
__global__ void fill_uniform_kernel(T* p, int64_t n, uint64_t seed, float lo, float hi) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        p[i] = static_cast<T>(lo + (hi - lo) * hash_uniform(seed, i));
}
template <typename T>
void fill_uniform(T* p, int64_t n, uint64_t seed, float lo, float hi) {
    fill_uniform_kernel<<<2048, 256>>>(p, n, seed, lo, hi);
    CK(cudaGetLastError());
}

template <typename T>
__device__ __forceinline__ double to_d(T v) {
    return static_cast<double>(static_cast<float>(v));
}

__device__ double gate_ref(int fn, double g, double u, double alpha, double limit) {
    switch (fn) {
        case 0: return g / (1.0 + exp(-g)) * u;
        case 1: return 0.5 * g * (1.0 + erf(g / sqrt(2.0))) * u;
        case 2: return 0.5 * g * (1.0 + tanh(sqrt(2.0 / M_PI) * (g + 0.044715 * g * g * g))) * u;
        case 3: return (g > 0 ? g : 0.0) * u;
        default: {
            g = g < limit ? g : limit;
            u = u < -limit ? -limit : (u > limit ? limit : u);
            return (u + 1.0) * g / (1.0 + exp(-alpha * g));
        }
    }
}

struct RefArgs {
    const void* A;           // (P, K)
    const void* B;           // (E, N, K) | (E, K, N)
    const void* bias;        // (E, N) | nullptr
    const float* row_scale;  // (P,) | nullptr
    const int32_t* rows;     // (nrows,) rows of D to compute
    const int32_t* experts;  // (nrows,) their experts
    int32_t nrows, col_stride, ncols;
    int64_t N, K;
    bool b_n_major, gate, concatenated;
    int fn;
    double alpha, limit;
    double* out;  // (nrows, ncols)
};

// One thread per (row, sampled output column); float64 dot products of the bf16/f16 inputs.
template <typename T>
__global__ void reference_kernel(RefArgs r) {
    const int i = blockIdx.y;
    const int ci = blockIdx.x * blockDim.x + threadIdx.x;
    if (ci >= r.ncols || i >= r.nrows) return;
    const int64_t c = int64_t(ci) * r.col_stride, row = r.rows[i], e = r.experts[i];
    const T* A = static_cast<const T*>(r.A) + row * r.K;
    const T* B = static_cast<const T*>(r.B);
    const T* bias = static_cast<const T*>(r.bias);
    auto dot = [&](int64_t n) {
        double s = 0;
        if (r.b_n_major) {
            for (int64_t k = 0; k < r.K; ++k) s += to_d(A[k]) * to_d(B[(e * r.K + k) * r.N + n]);
        } else {
            const T* b = B + (e * r.N + n) * r.K;
            for (int64_t k = 0; k < r.K; ++k) s += to_d(A[k]) * to_d(b[k]);
        }
        return s + (bias ? to_d(bias[e * r.N + n]) : 0.0);
    };
    double v;
    if (!r.gate) {
        v = dot(c);
    } else {
        const int64_t I = r.N / 2;
        const double g = dot(r.concatenated ? c : 2 * c), u = dot(r.concatenated ? I + c : 2 * c + 1);
        v = gate_ref(r.fn, g, u, r.alpha, r.limit);
    }
    if (r.row_scale) v *= r.row_scale[row];
    r.out[int64_t(i) * r.ncols + ci] = v;
}

// ---- host helpers -----------------------------------------------------------------------------------------
// Routing (grouped_gemm.h) from per-expert row counts, plus `extra` unused tiles after the used ones (their
// m_tile_expert entries are valid ids: the kernel must still not touch them). Padded contiguous: P = the tiles'
// rows. Packed: experts back to back, each tile from its own first row (m_tile_row0), and kNoExpertRows rows of no
// expert (sentinel slots) between the last expert's end and P.
constexpr int64_t kNoExpertRows = 200;  // more than a tile reaches past the last expert
struct Routing {
    bool packed = false;
    std::vector<int32_t> count, start, tile_expert, tile_row0;
    int32_t num_tiles = 0;
    int64_t max_tiles = 0, P = 0;
    DevBuf d_count, d_start, d_tiles, d_row0, d_num;
    const int32_t* row0_or_null() const { return packed ? d_row0.as<int32_t>() : nullptr; }
    // Bytes of D from which nothing may be written: past the used tiles (padded), past P (packed).
    size_t untouched_from(size_t row_bytes) const {
        return (packed ? size_t(P) : size_t(num_tiles) * kRowAlign) * row_bytes;
    }
};
void build_routing(Routing& r, const std::vector<int32_t>& counts, int extra, bool packed = false) {
    const int E = static_cast<int>(counts.size());
    r.packed = packed;
    r.count = counts;
    r.start.assign(E + 1, 0);
    r.tile_expert.clear();
    r.tile_row0.clear();
    for (int e = 0; e < E; ++e) {
        const int tiles = (counts[e] + kRowAlign - 1) / kRowAlign;
        r.start[e + 1] = r.start[e] + (packed ? counts[e] : tiles * kRowAlign);
        for (int t = 0; t < tiles; ++t) r.tile_expert.push_back(e), r.tile_row0.push_back(r.start[e] + t * kRowAlign);
    }
    r.num_tiles = static_cast<int32_t>(r.tile_expert.size());
    for (int t = 0; t < extra; ++t) r.tile_expert.push_back(t % E), r.tile_row0.push_back(0);
    r.max_tiles = r.num_tiles + extra;
    r.P = packed ? r.start[E] + kNoExpertRows : r.max_tiles * kRowAlign;
    r.d_count = DevBuf(sizeof(int32_t) * E);
    r.d_start = DevBuf(sizeof(int32_t) * (E + 1));
    r.d_tiles = DevBuf(sizeof(int32_t) * std::max<int64_t>(1, r.max_tiles));
    r.d_row0 = DevBuf(sizeof(int32_t) * std::max<int64_t>(1, r.max_tiles));
    r.d_num = DevBuf(sizeof(int32_t));
    CK(cudaMemcpy(r.d_count.p, r.count.data(), sizeof(int32_t) * E, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(r.d_start.p, r.start.data(), sizeof(int32_t) * (E + 1), cudaMemcpyHostToDevice));
    if (r.max_tiles) {
        CK(cudaMemcpy(r.d_tiles.p, r.tile_expert.data(), sizeof(int32_t) * r.max_tiles, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(r.d_row0.p, r.tile_row0.data(), sizeof(int32_t) * r.max_tiles, cudaMemcpyHostToDevice));
    }
    CK(cudaMemcpy(r.d_num.p, &r.num_tiles, sizeof(int32_t), cudaMemcpyHostToDevice));
}
// Zeroes A's padding rows (the contract: padding rows of A are zero; packed: the rows of no expert up to P).
void zero_padding(const Routing& r, void* A, int64_t K, size_t esz) {
    auto zero = [&](int64_t first, int64_t last) {
        if (last > first) CK(cudaMemset(static_cast<uint8_t*>(A) + first * K * esz, 0, size_t(last - first) * K * esz));
    };
    if (r.packed) return zero(r.start.back(), r.P);
    for (size_t e = 0; e + 1 < r.start.size(); ++e) zero(r.start[e] + r.count[e], r.start[e + 1]);
}

const char* kFnNames[] = {"silu", "gelu", "gelu_tanh", "relu", "gptoss"};

struct Tolerance {
    double atol, rtol;
};
// Per output dtype, in one place (outputs are O(1)): bf16 rounds to 8 significant bits (half an ulp = 2^-9
// relative), f16 to 11 (2^-12); f32 differs from the float64 reference by the f32 accumulation order (~1e-6).
// A real indexing or pipeline bug shows up as O(1) errors.
Tolerance tolerance(bool d_f32, DType t) {
    if (d_f32) return {1e-4, 1e-4};
    return t == DType::kBF16 ? Tolerance{1e-3, 8e-3} : Tolerance{1e-4, 2e-3};
}

int g_failures = 0, g_passes = 0;

// ---- correctness --------------------------------------------------------------------------------------------
struct Case {
    DType dtype;
    bool b_n_major;
    int epi;  // 0 store dtype, 1 store f32, 2 gate
    bool concatenated;
    int fn;  // gate function (0..4, 4 = gpt-oss)
    bool bias, scale;
    int64_t E, K, N;
    int dist;  // 0 uniform, 1 some empty, 2 one expert takes all, 3 random, 4 all empty
    int base;  // rows scale of the distribution
};

std::vector<int32_t> make_counts(int dist, int64_t E, int base, std::mt19937& rng) {
    std::vector<int32_t> c(E, 0);
    std::uniform_int_distribution<int> u(0, 2 * base);
    for (int64_t e = 0; e < E; ++e) {
        switch (dist) {
            case 0: c[e] = base; break;
            case 1: c[e] = (e % 3 == 1) ? 0 : 1 + u(rng); break;
            case 2: c[e] = (e == E / 2) ? 5 * base + 17 : 0; break;
            case 3: c[e] = (e % 4 == 0) ? 128 : (e % 4 == 1 ? 1 : u(rng)); break;
            default: c[e] = 0; break;
        }
    }
    return c;
}

// Runs one case with one configuration; returns true when every real row matches and nothing outside was touched.
bool run_case(const Case& cs, const Routing& rt, const char* cfg_name, const Sm90GemmConfig* forced, bool expect_run,
              const DevBuf& A, const DevBuf& B, const DevBuf& bias, const DevBuf& scale, const std::vector<double>& ref,
              const std::vector<int32_t>& ref_rows) {
    const bool gate = cs.epi == 2, d_f32 = cs.epi == 1;
    const int64_t n_out = gate ? cs.N / 2 : cs.N;
    const size_t d_esz = d_f32 ? 4 : 2;
    const int64_t guard_rows = 64;
    DevBuf D(size_t(rt.P + guard_rows) * n_out * d_esz);
    CK(cudaMemset(D.p, 0xFF, D.bytes));  // poison: NaN in every output type
    GroupedGemmArgs a{};
    a.A = A.p, a.B = B.p, a.D = D.p, a.bias = cs.bias ? bias.p : nullptr;
    a.row_scale = cs.scale ? scale.as<float>() : nullptr;
    a.m_tile_expert = rt.d_tiles.as<int32_t>(), a.num_m_tiles = rt.d_num.as<int32_t>();
    a.expert_row_start = rt.d_start.as<int32_t>(), a.expert_row_count = rt.d_count.as<int32_t>();
    a.m_tile_row0 = rt.row0_or_null();
    a.P = rt.P, a.N = cs.N, a.K = cs.K, a.E = cs.E, a.max_m_tiles = rt.max_tiles;
    a.dtype = cs.dtype, a.b_n_major = cs.b_n_major, a.d_f32 = d_f32;
    a.epilogue = gate ? Epilogue::kGate : Epilogue::kStore;
    a.gate = {.activation = cs.fn < 4 ? Activation(cs.fn) : Activation::kSilu,
              .kind = cs.fn == 4 ? GateKind::kGptOss : GateKind::kDefault,
              .concatenated = cs.concatenated,
              .alpha = 1.702f,
              .limit = 1.5f};
    a.b_dtype = a.dtype;
    bool ran = false;
    try {
        ran = forced ? launch_grouped_gemm_sm90_with(a, *forced, nullptr) : launch_grouped_gemm_sm90(a, nullptr);
        sync_or_die(cfg_name);
    } catch (const std::exception& ex) {
        std::printf("FAIL %s: exception %s\n", cfg_name, ex.what());
        return false;
    }
    if (ran != expect_run) {
        std::printf("FAIL %s: launcher returned %d, expected %d\n", cfg_name, ran, expect_run);
        return false;
    }
    if (!ran) return true;
    std::vector<uint8_t> h(D.bytes);
    CK(cudaMemcpy(h.data(), D.p, D.bytes, cudaMemcpyDeviceToHost));
    const int kind = d_f32 ? 2 : (cs.dtype == DType::kBF16 ? 0 : 1);
    const Tolerance tol = tolerance(d_f32, cs.dtype);
    int64_t bad = 0;
    double max_err = 0, sxy = 0, sxx = 0;
    for (size_t i = 0; i < ref_rows.size(); ++i) {
        for (int64_t c = 0; c < n_out; ++c) {
            const double want = ref[i * n_out + c];
            const double got = host_to_float(h.data(), size_t(ref_rows[i]) * n_out + c, kind);
            const double err = std::fabs(got - want);
            if (!(err <= tol.atol + tol.rtol * std::fabs(want))) {
                if (bad < 3)
                    std::printf("    mismatch row %d col %lld: got %.6g want %.6g\n", ref_rows[i], (long long)c, got,
                                want);
                ++bad;
            }
            if (std::isfinite(err)) max_err = std::max(max_err, err);
            sxy += got * want, sxx += got * got + want * want;
        }
    }
    // Rows of tiles past *num_m_tiles (packed: past P), and the guard rows past P, must still hold the poison. The
    // packed layout's rows of each expert's next one are checked above: they hold the next expert's outputs.
    int64_t touched = 0;
    const size_t row_bytes = n_out * d_esz;
    for (size_t b = rt.untouched_from(row_bytes); b < h.size(); ++b) touched += h[b] != 0xFF;
    const double diff = sxx > 0 ? 1.0 - 2.0 * sxy / sxx : 0.0;
    const bool ok = bad == 0 && touched == 0;
    std::printf("%s %s: max_err %.3g diff %.2e bad %lld untouched-region writes %lld\n", ok ? "ok  " : "FAIL", cfg_name,
                max_err, diff, (long long)bad, (long long)touched);
    return ok;
}

void check_case(const Case& cs, uint64_t seed, bool packed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    Routing rt;
    build_routing(rt, make_counts(cs.dist, cs.E, cs.base, rng), 2, packed);
    const bool gate = cs.epi == 2;
    const int64_t n_out = gate ? cs.N / 2 : cs.N;
    const size_t esz = 2;
    DevBuf A(size_t(rt.P) * cs.K * esz), B(size_t(cs.E) * cs.N * cs.K * esz), bias(size_t(cs.E) * cs.N * esz),
        scale(size_t(rt.P) * 4);
    const float bscale = 3.0f / std::sqrt(float(cs.K));  // acc ~ N(0, 1)
    if (cs.dtype == DType::kBF16) {
        fill_uniform(A.as<__nv_bfloat16>(), rt.P * cs.K, seed + 1, -1.f, 1.f);
        fill_uniform(B.as<__nv_bfloat16>(), cs.E * cs.N * cs.K, seed + 2, -bscale, bscale);
        fill_uniform(bias.as<__nv_bfloat16>(), cs.E * cs.N, seed + 3, -0.5f, 0.5f);
    } else {
        fill_uniform(A.as<__half>(), rt.P * cs.K, seed + 1, -1.f, 1.f);
        fill_uniform(B.as<__half>(), cs.E * cs.N * cs.K, seed + 2, -bscale, bscale);
        fill_uniform(bias.as<__half>(), cs.E * cs.N, seed + 3, -0.5f, 0.5f);
    }
    fill_uniform(scale.as<float>(), rt.P, seed + 4, 0.5f, 1.5f);
    zero_padding(rt, A.p, cs.K, esz);  // rows of the unused tiles stay random: they must not be read into D

    // Reference on every real row.
    std::vector<int32_t> rows, experts;
    for (int64_t e = 0; e < cs.E; ++e)
        for (int32_t r = 0; r < rt.count[e]; ++r) rows.push_back(rt.start[e] + r), experts.push_back(int32_t(e));
    std::vector<double> ref(rows.size() * n_out);
    if (!rows.empty()) {
        DevBuf d_rows(rows.size() * 4), d_exp(rows.size() * 4), d_ref(ref.size() * 8);
        CK(cudaMemcpy(d_rows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_exp.p, experts.data(), rows.size() * 4, cudaMemcpyHostToDevice));
        const RefArgs r{.A = A.p,
                        .B = B.p,
                        .bias = cs.bias ? bias.p : nullptr,
                        .row_scale = cs.scale ? scale.as<float>() : nullptr,
                        .rows = d_rows.as<int32_t>(),
                        .experts = d_exp.as<int32_t>(),
                        .nrows = int32_t(rows.size()),
                        .col_stride = 1,
                        .ncols = int32_t(n_out),
                        .N = cs.N,
                        .K = cs.K,
                        .b_n_major = cs.b_n_major,
                        .gate = gate,
                        .concatenated = cs.concatenated,
                        .fn = cs.fn,
                        .alpha = 1.702,
                        .limit = 1.5,
                        .out = d_ref.as<double>()};
        const dim3 grid(unsigned((n_out + 127) / 128), unsigned(rows.size()));
        if (cs.dtype == DType::kBF16)
            reference_kernel<__nv_bfloat16><<<grid, 128>>>(r);
        else
            reference_kernel<__half><<<grid, 128>>>(r);
        CK(cudaGetLastError());
        CK(cudaMemcpy(ref.data(), d_ref.p, ref.size() * 8, cudaMemcpyDeviceToHost));
    }
    std::printf("case %s B%s %s%s%s%s E=%lld K=%lld N=%lld dist=%d tiles=%d%s\n",
                cs.dtype == DType::kBF16 ? "bf16" : "f16", cs.b_n_major ? "(E,K,N)" : "(E,N,K)",
                cs.epi == 0 ? "store" : (cs.epi == 1 ? "store-f32" : "gate"),
                gate ? (cs.concatenated ? "-concat-" : "-interleaved-") : "", gate ? kFnNames[cs.fn] : "",
                std::string(cs.bias ? " +bias" : "").append(cs.scale ? " +scale" : "").c_str(), (long long)cs.E,
                (long long)cs.K, (long long)cs.N, cs.dist, rt.num_tiles, packed ? " packed" : "");
    Sm90GemmConfig c1, c2;
    c2.cluster_m = 2;
    const struct {
        const char* name;
        const Sm90GemmConfig* cfg;
    } runs[] = {{"  chosen   ", nullptr}, {"  cluster1 ", &c1}, {"  cluster2 ", &c2}};
    for (const auto& run : runs) {
        const bool ok = run_case(cs, rt, run.name, run.cfg, true, A, B, bias, scale, ref, rows);
        ok ? ++g_passes : ++g_failures;
    }
}

// The routing changes on the device between graph replays; the captured launch must follow it.
void check_graph() {
    const Case cs{DType::kBF16, false, 2, true, 0, true, false, 6, 256, 512, 3, 200};
    std::mt19937 rng(7);
    Routing rt1, rt2;
    build_routing(rt1, make_counts(3, cs.E, 200, rng), 0);
    std::vector<int32_t> counts2(cs.E, 0);
    counts2[1] = 100, counts2[4] = 300;  // fewer tiles than rt1: the same capacity, different data
    build_routing(rt2, counts2, 0);
    const int64_t P = rt1.P, n_out = cs.N / 2;
    DevBuf A(size_t(P) * cs.K * 2), B(size_t(cs.E) * cs.N * cs.K * 2), bias(size_t(cs.E) * cs.N * 2),
        D(size_t(P) * n_out * 2);
    fill_uniform(A.as<__nv_bfloat16>(), P * cs.K, 11, -1.f, 1.f);
    fill_uniform(B.as<__nv_bfloat16>(), cs.E * cs.N * cs.K, 12, -0.2f, 0.2f);
    fill_uniform(bias.as<__nv_bfloat16>(), cs.E * cs.N, 13, -0.5f, 0.5f);
    GroupedGemmArgs a{};
    a.A = A.p, a.B = B.p, a.D = D.p, a.bias = bias.p, a.row_scale = nullptr;
    a.m_tile_expert = rt1.d_tiles.as<int32_t>(), a.num_m_tiles = rt1.d_num.as<int32_t>();
    a.expert_row_start = rt1.d_start.as<int32_t>(), a.expert_row_count = rt1.d_count.as<int32_t>();
    a.P = P, a.N = cs.N, a.K = cs.K, a.E = cs.E, a.max_m_tiles = rt1.max_tiles;
    a.dtype = DType::kBF16, a.b_dtype = DType::kBF16, a.epilogue = Epilogue::kGate;
    a.gate = {.activation = Activation::kSilu, .kind = GateKind::kDefault, .concatenated = true};
    cudaStream_t s;
    CK(cudaStreamCreate(&s));
    launch_grouped_gemm_sm90(a, s);  // first call outside capture: one-time attribute setup
    sync_or_die("graph test warm-up launch");
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    const bool ran = launch_grouped_gemm_sm90(a, s);
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    // Swap in the second routing (same capacity) and replay.
    zero_padding(rt2, A.p, cs.K, 2);
    CK(cudaMemcpy(rt1.d_count.p, rt2.count.data(), 4 * cs.E, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(rt1.d_start.p, rt2.start.data(), 4 * (cs.E + 1), cudaMemcpyHostToDevice));
    CK(cudaMemcpy(rt1.d_tiles.p, rt2.tile_expert.data(), 4 * rt2.max_tiles, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(rt1.d_num.p, &rt2.num_tiles, 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(D.p, 0xFF, D.bytes));
    CK(cudaGraphLaunch(ge, s));
    sync_or_die("graph replay");  // s is a blocking stream: the watchdog's legacy-stream event waits for it
    std::vector<int32_t> rows, experts;
    for (int64_t e = 0; e < cs.E; ++e)
        for (int32_t r = 0; r < rt2.count[e]; ++r) rows.push_back(rt2.start[e] + r), experts.push_back(int32_t(e));
    DevBuf d_rows(rows.size() * 4), d_exp(rows.size() * 4), d_ref(rows.size() * n_out * 8);
    CK(cudaMemcpy(d_rows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(d_exp.p, experts.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    const RefArgs r{.A = A.p,
                    .B = B.p,
                    .bias = bias.p,
                    .row_scale = nullptr,
                    .rows = d_rows.as<int32_t>(),
                    .experts = d_exp.as<int32_t>(),
                    .nrows = int32_t(rows.size()),
                    .col_stride = 1,
                    .ncols = int32_t(n_out),
                    .N = cs.N,
                    .K = cs.K,
                    .b_n_major = false,
                    .gate = true,
                    .concatenated = true,
                    .fn = 0,
                    .alpha = 1.702,
                    .limit = 7.0,
                    .out = d_ref.as<double>()};
    reference_kernel<__nv_bfloat16><<<dim3(unsigned((n_out + 127) / 128), unsigned(rows.size())), 128>>>(r);
    CK(cudaGetLastError());
    std::vector<double> ref(rows.size() * n_out);
    std::vector<uint8_t> h(D.bytes);
    CK(cudaMemcpy(ref.data(), d_ref.p, ref.size() * 8, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(h.data(), D.p, D.bytes, cudaMemcpyDeviceToHost));
    int64_t bad = 0, touched = 0;
    for (size_t i = 0; i < rows.size(); ++i)
        for (int64_t c = 0; c < n_out; ++c) {
            const double got = host_to_float(h.data(), size_t(rows[i]) * n_out + c, 0), want = ref[i * n_out + c];
            bad += !(std::fabs(got - want) <= 1e-2 + 1e-2 * std::fabs(want));
        }
    for (size_t b = size_t(rt2.num_tiles) * kRowAlign * n_out * 2; b < h.size(); ++b) touched += h[b] != 0xFF;
    const bool ok = ran && bad == 0 && touched == 0;
    std::printf("%s graph replay with new device routing: bad %lld, writes past num_m_tiles %lld\n",
                ok ? "ok  " : "FAIL", (long long)bad, (long long)touched);
    ok ? ++g_passes : ++g_failures;
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(s));
}

void check_unsupported() {
    struct U {
        const char* what;
        DType dt;
        int64_t K, N;
        bool gate, d_f32;
    } us[] = {{"K % 8 != 0", DType::kBF16, 100, 256, false, false},
              {"N % 8 != 0", DType::kBF16, 128, 100, false, false},
              {"f32 inputs", DType::kF32, 128, 256, false, false},
              {"gate N/2 % 8 != 0", DType::kBF16, 128, 24, true, false},
              {"gate with f32 output", DType::kBF16, 128, 256, true, true}};
    for (const U& u : us) {
        GroupedGemmArgs a{};
        int32_t dummy_i = 0;
        static __align__(16) uint8_t dummy[16];
        a.A = a.B = a.D = dummy;
        a.m_tile_expert = a.num_m_tiles = a.expert_row_start = a.expert_row_count = &dummy_i;
        a.P = 128, a.N = u.N, a.K = u.K, a.E = 1, a.max_m_tiles = 1, a.dtype = u.dt, a.b_dtype = u.dt;
        a.d_f32 = u.d_f32;
        a.epilogue = u.gate ? Epilogue::kGate : Epilogue::kStore;
        const Sm90GemmConfig c = choose_grouped_gemm_sm90_config(a, 132);
        const bool ok = c.why_not != nullptr && !launch_grouped_gemm_sm90(a, nullptr);  // never launches: host dummies
        std::printf("%s unsupported %-22s -> %s\n", ok ? "ok  " : "FAIL", u.what, c.why_not ? c.why_not : "(accepted)");
        ok ? ++g_passes : ++g_failures;
    }
}

void run_checks() {
    const int64_t Es[] = {1, 4, 9};
    const int64_t Ks[] = {64, 200, 520, 1032};
    const int64_t Ns_store[] = {256, 200, 776, 1032};
    const int64_t Ns_gate[] = {256, 336, 784, 1040};
    const int bases[] = {100, 128, 300, 250};
    int idx = 0;
    for (int dist = 0; dist < 4; ++dist)
        for (int bnm = 0; bnm < 2; ++bnm)
            for (int epi = 0; epi < 4; ++epi) {  // store, store f32, gate concat, gate interleaved
                Case cs{};
                cs.dtype = idx % 3 == 2 ? DType::kF16 : DType::kBF16;
                cs.b_n_major = bnm;
                cs.epi = epi < 2 ? epi : 2;
                cs.concatenated = epi == 2;
                cs.fn = idx % 5;
                cs.bias = idx % 2 == 0 || epi >= 2;
                cs.scale = epi == 1 || idx % 3 == 0;
                cs.E = Es[idx % 3];
                cs.K = Ks[idx % 4];
                cs.N = cs.epi == 2 ? Ns_gate[(idx / 2) % 4] : Ns_store[(idx / 2) % 4];
                cs.dist = dist;
                cs.base = bases[(idx / 3) % 4];
                for (const bool packed : {false, true}) check_case(cs, 1000 + idx, packed);
                ++idx;
            }
    // Long K (many trips round the 4-stage ring), big N tile count, every gate function on one shape.
    for (const bool packed : {false, true}) {
        check_case({DType::kBF16, false, 0, false, 0, true, true, 3, 4096, 512, 0, 384}, 77, packed);
        for (int fn = 0; fn < 5; ++fn)
            check_case({DType::kBF16, fn % 2 == 1, 2, fn % 2 == 0, fn, true, true, 4, 192, 528, 3, 160}, 90 + fn,
                       packed);
        // No rows at all: nothing may be written (packed: nothing past P; the rows of no expert may be).
        check_case({DType::kBF16, false, 0, false, 0, true, true, 5, 128, 256, 4, 0}, 99, packed);
    }
    check_graph();
    check_unsupported();
}

// ---- benchmark ----------------------------------------------------------------------------------------------
struct Model {
    const char* name;
    int64_t H, I, E, k;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// Times fn(i) (i = repetition) with CUDA events; median in milliseconds.
template <typename F>
double time_ms(F&& fn, int warmup, int reps) {
    for (int i = 0; i < warmup; ++i) fn(i);
    CK(cudaDeviceSynchronize());
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        CK(cudaEventRecord(a));
        fn(warmup + i);
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return median(t);
}

// One GEMM of the experts layer: up (N = 2I, K = H, gate) or down (N = H, K = I, row_scale, f32 out).
void bench_gemm(const Model& m, int64_t T, bool up, cublasHandle_t blas) {
    const int64_t S = T * m.k, E = m.E;
    std::vector<int32_t> counts(E);
    for (int64_t e = 0; e < E; ++e) counts[e] = int32_t(S / E + (e < S % E ? 1 : 0));
    Routing rt;
    build_routing(rt, counts, 0);
    const int64_t K = up ? m.H : m.I, N = up ? 2 * m.I : m.H, n_out = up ? m.I : m.H;
    const size_t d_esz = up ? 2 : 4;
    const size_t a_bytes = size_t(rt.P) * K * 2, b_bytes = size_t(E) * N * K * 2,
                 d_bytes = size_t(rt.P) * n_out * d_esz;
    // Rotate whole input/output sets so that no repetition finds its operands in the 60 MB L2.
    const size_t set_bytes = a_bytes + b_bytes + d_bytes;
    const int sets = int(std::min<size_t>(8, std::max<size_t>(1, (size_t(128) << 20) / set_bytes + 1)));
    std::vector<DevBuf*> As, Bs, Ds;
    for (int s = 0; s < sets; ++s) {
        As.push_back(new DevBuf(a_bytes));
        Bs.push_back(new DevBuf(b_bytes));
        Ds.push_back(new DevBuf(d_bytes));
        fill_uniform(As[s]->as<__nv_bfloat16>(), rt.P * K, 500 + s, -1.f, 1.f);
        fill_uniform(Bs[s]->as<__nv_bfloat16>(), E * N * K, 600 + s, -3.f / std::sqrt(float(K)),
                     3.f / std::sqrt(float(K)));
        zero_padding(rt, As[s]->p, K, 2);
    }
    DevBuf scale(size_t(rt.P) * 4);
    fill_uniform(scale.as<float>(), rt.P, 700, 0.5f, 1.5f);
    auto args_for = [&](int s) {
        GroupedGemmArgs a{};
        a.A = As[s]->p, a.B = Bs[s]->p, a.D = Ds[s]->p, a.bias = nullptr,
        a.row_scale = up ? nullptr : scale.as<float>();
        a.m_tile_expert = rt.d_tiles.as<int32_t>(), a.num_m_tiles = rt.d_num.as<int32_t>();
        a.expert_row_start = rt.d_start.as<int32_t>(), a.expert_row_count = rt.d_count.as<int32_t>();
        a.P = rt.P, a.N = N, a.K = K, a.E = E, a.max_m_tiles = rt.max_tiles;
        a.dtype = DType::kBF16, a.b_n_major = false, a.d_f32 = !up;
        a.epilogue = up ? Epilogue::kGate : Epilogue::kStore, a.b_dtype = DType::kBF16;
        a.gate = {.activation = Activation::kSilu, .kind = GateKind::kDefault, .concatenated = true};
        return a;
    };
    const double useful = 2.0 * double(S) * double(N) * double(K);
    const double padded = 2.0 * double(rt.num_tiles) * kRowAlign * double(N) * double(K);
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const Sm90GemmConfig chosen = choose_grouped_gemm_sm90_config(args_for(0), sms);
    Sm90GemmConfig c1 = chosen, c2 = chosen;
    c1.cluster_m = 1, c2.cluster_m = 2;
    const double est_ms = padded / 600e12 * 1e3;
    const int reps = int(std::clamp(400.0 / std::max(est_ms, 1e-3), 5.0, 50.0));
    std::printf("%-12s T=%-6lld %-4s E=%-3lld N=%-6lld K=%-6lld rows/expert=%-5lld P=%-7lld sets=%d reps=%d\n", m.name,
                (long long)T, up ? "up" : "down", (long long)E, (long long)N, (long long)K, (long long)(S / E),
                (long long)(int64_t(rt.num_tiles) * kRowAlign), sets, reps);
    const struct {
        const char* name;
        const Sm90GemmConfig* cfg;
    } cfgs[] = {{"chosen", &chosen}, {"cluster1", &c1}, {"cluster2", &c2}};
    for (const auto& c : cfgs) {
        if (c.cfg != &chosen && c.cfg->cluster_m == chosen.cluster_m) continue;
        bool ok = launch_grouped_gemm_sm90_with(args_for(0), *c.cfg, nullptr);
        sync_or_die(c.name, 60.0);
        const double ms = time_ms(
            [&](int i) {
                const GroupedGemmArgs a = args_for(i % sets);
                ok = launch_grouped_gemm_sm90_with(a, *c.cfg, nullptr) && ok;
            },
            2, reps);
        std::printf("    sm90 %-9s (cluster %d) %9.3f ms  %6.1f TFLOP/s useful  %6.1f TFLOP/s issued%s\n", c.name,
                    c.cfg->cluster_m, ms, useful / ms * 1e-9, padded / ms * 1e-9, ok ? "" : "  (NOT RUN)");
        if (!ok) ++g_failures;
    }
    // cuBLAS, same padded rows against expert 0's weights as one dense GEMM: the ceiling for this shape.
    {
        const float alpha = 1.f, beta = 0.f;
        const int64_t M = int64_t(rt.num_tiles) * kRowAlign;
        DevBuf C(size_t(M) * N * d_esz);  // (M, N): the up GEMM's dense output is twice D (no gate)
        cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
        const double ms = time_ms(
            [&](int i) {
                const int s = i % sets;
                const cublasStatus_t r =
                    cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, int(N), int(M), int(K), &alpha, Bs[s]->p, CUDA_R_16BF,
                                 int(K), As[s]->p, CUDA_R_16BF, int(K), &beta, C.p, up ? CUDA_R_16BF : CUDA_R_32F,
                                 int(N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
                if (r != CUBLAS_STATUS_SUCCESS) st = r;
            },
            2, reps);
        std::printf("    cuBLAS dense %lldx%lldx%lld%s  %9.3f ms  %6.1f TFLOP/s%s\n", (long long)M, (long long)N,
                    (long long)K, up ? " (no gate)" : "", ms, padded / ms * 1e-9,
                    st == CUBLAS_STATUS_SUCCESS ? "" : "  (cuBLAS error)");
    }
    // Spot check of the last sm90 output against the float64 reference: first/last rows of a few experts.
    {
        const int s = (2 + reps - 1) % sets;
        const GroupedGemmArgs a = args_for(s);
        CK(cudaMemset(Ds[s]->p, 0xFF, d_bytes));
        launch_grouped_gemm_sm90_with(a, chosen, nullptr);
        sync_or_die("spot check launch", 60.0);
        std::vector<int32_t> rows, experts;
        for (int64_t e : {int64_t(0), E / 2, E - 1})
            for (int32_t r : {0, counts[e] - 1}) rows.push_back(rt.start[e] + r), experts.push_back(int32_t(e));
        const int stride = int(std::max<int64_t>(1, n_out / 1024));
        const int ncols = int((n_out + stride - 1) / stride);
        DevBuf d_rows(rows.size() * 4), d_exp(rows.size() * 4), d_ref(rows.size() * ncols * 8);
        CK(cudaMemcpy(d_rows.p, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(d_exp.p, experts.data(), rows.size() * 4, cudaMemcpyHostToDevice));
        const RefArgs r{.A = As[s]->p,
                        .B = Bs[s]->p,
                        .bias = nullptr,
                        .row_scale = a.row_scale,
                        .rows = d_rows.as<int32_t>(),
                        .experts = d_exp.as<int32_t>(),
                        .nrows = int32_t(rows.size()),
                        .col_stride = stride,
                        .ncols = ncols,
                        .N = N,
                        .K = K,
                        .b_n_major = false,
                        .gate = up,
                        .concatenated = true,
                        .fn = 0,
                        .alpha = 1.702,
                        .limit = 7.0,
                        .out = d_ref.as<double>()};
        reference_kernel<__nv_bfloat16><<<dim3(unsigned((ncols + 127) / 128), unsigned(rows.size())), 128>>>(r);
        CK(cudaGetLastError());
        std::vector<double> ref(rows.size() * ncols);
        CK(cudaMemcpy(ref.data(), d_ref.p, ref.size() * 8, cudaMemcpyDeviceToHost));
        const Tolerance tol = tolerance(!up, DType::kBF16);
        int64_t bad = 0;
        double max_err = 0;
        std::vector<uint8_t> row(n_out * d_esz);
        for (size_t i = 0; i < rows.size(); ++i) {
            CK(cudaMemcpy(row.data(), Ds[s]->as<uint8_t>() + size_t(rows[i]) * n_out * d_esz, row.size(),
                          cudaMemcpyDeviceToHost));
            for (int ci = 0; ci < ncols; ++ci) {
                const double got = host_to_float(row.data(), size_t(ci) * stride, up ? 0 : 2),
                             want = ref[i * ncols + ci];
                const double err = std::fabs(got - want);
                bad += !(err <= tol.atol + tol.rtol * std::fabs(want));
                if (std::isfinite(err)) max_err = std::max(max_err, err);
            }
        }
        std::printf("    %s spot check (%zu rows x %d cols): max_err %.3g bad %lld\n", bad ? "FAIL" : "ok  ",
                    rows.size(), ncols, max_err, (long long)bad);
        bad ? ++g_failures : ++g_passes;
    }
    for (int s = 0; s < sets; ++s) delete As[s], delete Bs[s], delete Ds[s];
}

void run_bench(const char* only) {
    const Model models[] = {{"mixtral", 4096, 14336, 8, 2},
                            {"deepseek-v3", 7168, 2048, 256, 8},
                            {"qwen1.5-moe", 2048, 1408, 60, 4},
                            {"qwen3-30b", 2048, 768, 128, 8}};
    cublasHandle_t blas;
    if (cublasCreate(&blas) != CUBLAS_STATUS_SUCCESS) {
        std::printf("FAIL cublasCreate\n");
        ++g_failures;
        return;
    }
    for (const Model& m : models) {
        if (only && std::strcmp(only, m.name) != 0) continue;
        for (int64_t T : {int64_t(4096), int64_t(16384)}) {
            bench_gemm(m, T, true, blas);
            bench_gemm(m, T, false, blas);
        }
    }
    cublasDestroy(blas);
}

}  // namespace

int main(int argc, char** argv) {
    bool check = false, bench = false;
    const char* only = nullptr;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--check"))
            check = true;
        else if (!std::strcmp(argv[i], "--bench"))
            bench = true;
        else if (!std::strcmp(argv[i], "--model") && i + 1 < argc)
            only = argv[++i];
    }
    if (!check && !bench) check = bench = true;
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
        std::printf("no CUDA device: nothing checked (exit 77, the CTest skip code)\n");
        return 77;
    }
    cudaDeviceProp prop{};
    CK(cudaGetDeviceProperties(&prop, 0));
    std::printf("device: %s, sm_%d%d, %d SMs, L2 %d MB\n", prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                prop.l2CacheSize >> 20);
    if (check) run_checks();
    if (bench) run_bench(only);
    std::printf("%d passed, %d failed\n", g_passes, g_failures);
    return g_failures ? 1 : 0;
}
