// Portable scalar kernels (any CPU) and the run-time choice of the kernel table (cpuid, MOEX_CPU_KERNELS).
// Same contracts as the AVX2 table; each element is a plain sequential sum over k (c += a*b, no fused multiply-add).
#include <cstdlib>
#include <string_view>

#include "src/cpu/config.h"
#include "src/cpu/dequant.h"
#include "src/cpu/gate.h"
#include "src/cpu/kernels.h"

namespace moex::cpu {

extern const KernelTable kAvx2Table;  // gemm_avx2.cpp; its code runs only after the cpuid checks below
// The AVX-512 kernels (gemm_avx512.cpp, stream_fused_avx512.cpp), called only after the checks below.
bool stream_fused_avx512(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
void stream_avx512(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc);
void micro_avx512(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                  int nr, bool acc);
void micro_direct_avx512(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c,
                         int64_t ldc, int nr, bool acc);
bool rows_bf16_avx512(const float* const* a, int64_t m, int64_t K, uint16_t* dst, int64_t ldd);
void to_bf16_avx512(const float* src, int64_t n, uint16_t* dst);
void outer_bf16_avx512(const float* P, int64_t M, const float* Q, int64_t L, int64_t m, uint16_t* out);
void pack_b_bf16_avx512(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, uint32_t* dst);
void micro_bf16_avx512(const uint16_t* a, int64_t lda, int mr, int64_t k0, const uint32_t* panel, int64_t kc, float* c,
                       int64_t ldc, int nr, bool acc);
// AVX512_BF16 (called only where the CPU has it): rounded rows as codes (gemm_avx512.cpp), the FP8 decode GEMV on
// vdpbf16ps (stream_quant_avx512.cpp).
bool rows_codes_avx512(const float* const* a, const float* const* s, int64_t m, int64_t K, int64_t group, uint16_t* dst,
                       int64_t ldd, float* st, int64_t ldst);
bool stream_quant_avx512(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                         float* c, int64_t ldc);
void gemm_quant_bf16_avx512(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b,
                            int64_t n, float* c, int64_t ldc, const uint32_t* packed);
void round_e4m3_avx512(const float* src, float* dst, int64_t n, float q, bool divide, float s);  // act_quant_avx512.cpp
float abs_max_avx512(const float* src, int64_t n);
// The AMX kernels (gemm_amx.cpp), called only after the checks below.
bool amx_request_tile_state();
void gemm_bf16_amx(const uint16_t* a, int64_t lda, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc,
                   const uint32_t* packed);
// The quantized AMX kernels (gemm_quant_amx.cpp), likewise.
void gemm_quant_amx(const uint16_t* a, int64_t lda, int64_t m, const RowScales& rs, const WeightMat& b, int64_t n,
                    float* c, int64_t ldc, const uint32_t* packed);

namespace {

float elem(const WeightMat& b, int64_t n, int64_t k) {
    const int64_t i = b.transposed ? k * b.ld + n : n * b.ld + k;
    switch (b.dtype) {
        case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(b.data)[i]);
        case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(b.data)[i]);
        default: return static_cast<const float*>(b.data)[i];
    }
}

void stream_scalar(const float* const* a, int64_t m, const WeightMat& b, int64_t n, float* c, int64_t ldc) {
    for (int64_t r = 0; r < m; ++r)
        for (int64_t j = 0; j < n; ++j) c[r * ldc + j] = 0.0f;
    if (!b.transposed) {
        for (int64_t j = 0; j < n; ++j)
            for (int64_t r = 0; r < m; ++r) {
                float s = 0.0f;
                for (int64_t kk = 0; kk < b.K; ++kk) s += a[r][kk] * elem(b, j, kk);
                c[r * ldc + j] = s;
            }
        return;
    }
    for (int64_t kk = 0; kk < b.K; ++kk)
        for (int64_t j = 0; j < n; ++j) {
            const float w = elem(b, j, kk);
            for (int64_t r = 0; r < m; ++r) c[r * ldc + j] += a[r][kk] * w;
        }
}

void pack_b_scalar(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst) {
    for (int64_t p = 0; p < n; p += kNr)
        for (int64_t kk = 0; kk < kc; ++kk)
            for (int c = 0; c < kNr; ++c) *dst++ = p + c < n ? elem(b, p + c, k0 + kk) : 0.0f;
}

void micro_scalar(const float* const* a, int mr, int64_t k0, const float* panel, int64_t kc, float* c, int64_t ldc,
                  int nr, bool acc) {
    for (int r = 0; r < mr; ++r)
        for (int j = 0; j < nr; ++j) {
            float s = acc ? c[r * ldc + j] : 0.0f;
            for (int64_t kk = 0; kk < kc; ++kk) s += a[r][k0 + kk] * panel[kk * kNr + j];
            c[r * ldc + j] = s;
        }
}

void micro_direct_scalar(const float* const* a, int mr, int64_t k0, const WeightMat& b, int64_t kc, float* c,
                         int64_t ldc, int nr, bool acc) {
    for (int r = 0; r < mr; ++r)
        for (int j = 0; j < nr; ++j) {
            float s = acc ? c[r * ldc + j] : 0.0f;
            for (int64_t kk = 0; kk < kc; ++kk) s += a[r][k0 + kk] * elem(b, j, k0 + kk);
            c[r * ldc + j] = s;
        }
}

void dequant_scalar(const WeightMat& b, int64_t n, int64_t k0, int64_t kc, float* dst, int64_t ldd) {
    for (int64_t r = 0; r < n; ++r)
        for (int64_t kk = 0; kk < kc; ++kk) dst[r * ldd + kk] = quant_elem(b, r, k0 + kk);
}

const KernelTable kScalarTable{.name = "scalar",
                               .stream = stream_scalar,
                               .pack_b = pack_b_scalar,
                               .mr = 6,
                               .nr = kNr,
                               .micro = micro_scalar,
                               .micro_direct = micro_direct_scalar,
                               .dequant = dequant_scalar,
                               .stream_fused = nullptr,
                               .gate_row = gate_row_scalar};

}  // namespace

const KernelTable& scalar_kernels() { return kScalarTable; }

const KernelTable* avx2_kernels() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool ok =
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    return ok ? &kAvx2Table : nullptr;
#else
    return nullptr;
#endif
}

// The AVX2 table with the AVX-512 f32 tile (12 x 32: the AVX2 tile's fma chains, so its bits), the AVX-512 decode
// GEMV (two rows of B per zmm, each half the AVX2 dot kernel's lanes: its bits), quantized decode GEMV and activation
// rounding (the scalar codecs' bits), and on AVX512_BF16 CPUs the one-row FP8 decode GEMV on vdpbf16ps.
const KernelTable* avx512_kernels() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool ok = avx2_kernels() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
                           __builtin_cpu_supports("avx512vbmi");
    static const KernelTable table = [] {
        KernelTable t = kAvx2Table;
        t.name = "avx512";
        t.mr = 12, t.nr = 2 * kNr;
        t.stream = stream_avx512, t.micro = micro_avx512, t.micro_direct = micro_direct_avx512;
        t.stream_fused = stream_fused_avx512;
        t.round_e4m3 = round_e4m3_avx512, t.abs_max = abs_max_avx512, t.to_bf16 = to_bf16_avx512;
        t.outer_bf16 = outer_bf16_avx512;
        if (__builtin_cpu_supports("avx512bf16"))  // FP8 decode on vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4)
            t.rows_bf16 = rows_bf16_avx512, t.rows_codes = rows_codes_avx512, t.stream_quant = stream_quant_avx512,
            t.stream_quant_rows = 1;
        return t;
    }();
    return ok ? &table : nullptr;
#else
    return nullptr;
#endif
}

namespace {

// A hand-over row count for tuning: the variable's value from `least` up, else `fallback`.
int64_t rows_from_env(const char* name, int64_t fallback, int64_t least = 1) {
    const char* env = std::getenv(name);
    return env != nullptr && *env != '\0' && std::atoll(env) >= least ? std::atoll(env) : fallback;
}

}  // namespace

// The AVX-512 table plus the vdpbf16ps tile for bf16 weights against bf16-valued rows (other bits than f32's): the
// default on CPUs without AMX whose vdpbf16ps runs at the FMA's rate, else by MOEX_CPU_KERNELS=avx512_bf16.
const KernelTable* avx512_bf16_kernels() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool ok = avx512_kernels() && __builtin_cpu_supports("avx512bf16");
    static const KernelTable table = [] {  // built on any CPU (the statics run first): never from a null table
        KernelTable t = avx512_kernels() ? *avx512_kernels() : kScalarTable;
        t.name = "avx512_bf16";
        t.rows_bf16 = rows_bf16_avx512, t.pack_b_bf16 = pack_b_bf16_avx512, t.micro_bf16 = micro_bf16_avx512;
        if (vdpbf16ps_at_fma_rate()) {  // the FP8 decode GEMV for a few rows too; bf16 tasks leave the GEMV sooner;
            t.stream_quant_rows = stream_max_rows(false);  // quantized prefill on the vdpbf16ps tile
            t.tile_bf16_from_rows = rows_from_env("MOEX_CPU_BF16_TILE_FROM_ROWS", kBf16TileFromRows);
            t.bf16_in_place_max_rows = rows_from_env("MOEX_CPU_BF16_IN_PLACE_MAX_ROWS", kBf16InPlaceMaxRows, 0);
            t.gemm_quant = gemm_quant_bf16_avx512;
            t.gemm_quant_from_rows = rows_from_env("MOEX_CPU_BF16_QUANT_FROM_ROWS", kBf16QuantFromRows);
        }
        return t;
    }();
    return ok ? &table : nullptr;
#else
    return nullptr;
#endif
}

const char* amx_why_not() {
#if defined(__x86_64__)
    static const char* why = [] {
        if (avx512_kernels() == nullptr) return "this CPU has no AVX-512 F/BW/VL/DQ/VBMI";
        if (!__builtin_cpu_supports("amx-tile") || !__builtin_cpu_supports("amx-bf16"))
            return "this CPU has no AMX-TILE + AMX-BF16";
        if (!amx_request_tile_state())
            return "the OS refused the AMX tile state (arch_prctl ARCH_REQ_XCOMP_PERM, Linux >= 5.16)";
        return static_cast<const char*>(nullptr);
    }();
    return why;
#else
    return "AMX is x86-64 only";
#endif
}

// The AVX-512 table whose bf16 x bf16 GEMMs (bf16 weights, bf16-valued rows, kAmxFromRows rows or more) and quantized
// GEMMs (FP8 / FP4 weights against bf16-valued or rounded rows, kAmxQuantFromRows rows or more) run on AMX tiles;
// everything else (f32, f16, decode) is the avx512 table's.
const KernelTable* amx_kernels() {
    static const KernelTable table = [] {
        KernelTable t = avx512_kernels() ? *avx512_kernels() : kScalarTable;
        t.name = "amx";
        t.rows_bf16 = rows_bf16_avx512, t.pack_b_bf16 = pack_b_bf16_avx512, t.gemm_bf16 = gemm_bf16_amx;
        t.gemm_quant = gemm_quant_amx, t.rows_codes = rows_codes_avx512;
        t.gemm_bf16_from_rows = rows_from_env("MOEX_CPU_AMX_FROM_ROWS", kAmxFromRows);
        t.gemm_quant_from_rows = rows_from_env("MOEX_CPU_AMX_QUANT_FROM_ROWS", kAmxQuantFromRows);
        return t;
    }();
    return amx_why_not() == nullptr ? &table : nullptr;
}

// vdpbf16ps (32 bf16 products a zmm) against vfmadd231ps (16 f32 ones): on the 2-core Xeon with AVX-512 BF16 of
// bench/RESULTS.md M it issues 1.3 G/s against 5.2 G/s (its pairs give half the f32 tile's products per second); on
// the Zen 4 EPYC of RESULTS AQ the vdpbf16ps tile runs bf16 prefill 1.6-2.3x faster than the f32 tile; on the Zen 5
// EPYC of RESULTS AR2 both issue about two zmm a cycle. By vendor, not by a timing at start-up, so that a process's
// bits never depend on how loaded the machine was when it started.
bool vdpbf16ps_at_fma_rate() {
#if defined(__x86_64__) || defined(__i386__)
    static const bool amd = __builtin_cpu_is("amd") && __builtin_cpu_supports("avx512bf16");
    return amd;
#else
    return false;
#endif
}

// MOEX_CPU_KERNELS=scalar|avx2|avx512|amx caps the table at that one (to test each on one machine, or compare them); a
// table this CPU lacks gives the best one below it, so amx (the default where the CPU and the OS allow it) falls back
// to avx512. Without AMX, avx512_bf16 is the default where vdpbf16ps runs at the FMA's rate (vdpbf16ps_at_fma_rate),
// else it is taken only when asked for.
const KernelTable& kernels() {
    static const KernelTable* best = [] {
        const char* env = std::getenv("MOEX_CPU_KERNELS");
        const std::string_view force = env ? env : "";
        if (force == "scalar") return &kScalarTable;
        const KernelTable* t = force == "avx512_bf16" ? avx512_bf16_kernels() : nullptr;
        if (t == nullptr && force != "avx2" && force != "avx512") t = amx_kernels();
        if (t == nullptr && force != "avx2" && force != "avx512" && vdpbf16ps_at_fma_rate()) t = avx512_bf16_kernels();
        if (t == nullptr && force != "avx2") t = avx512_kernels();
        if (t == nullptr) t = avx2_kernels();
        return t ? t : &kScalarTable;
    }();
    return *best;
}

}  // namespace moex::cpu
