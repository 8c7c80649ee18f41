// Which AVX-512 instructions of the FP4 decode GEMV (src/cpu/stream_fused_avx512.cpp) compete for the same execution
// port on this core: the time of a group of independent instructions, alone and mixed, in nanoseconds and in units
// of one independent vfmadd231ps (so 1.0 per instruction = the FMA's rate). If two groups mixed take the sum of
// their times, they share a port; if the longer one's, they overlap. RESULTS.md AC1 has the dev Xeon's figures.
// Usage: moex_avx512_ports [iterations=50000000]
#include <immintrin.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

namespace {

using Clock = std::chrono::steady_clock;

// Eight accumulators (c*) and four integer sources (s*) the groups write, so no group waits on its own results.
struct Regs {
    __m512 c0, c1, c2, c3;
    __m512i s0, s1, s2, s3, lut, x;
};

// One timed loop of a group; the operands are: %0-%3 the f32 accumulators, %4-%7 the integer registers, %8 the
// table, %9 a bf16 source.
#define MOEX_GROUP(name, body)                                                                            \
    __attribute__((target("avx512f,avx512bw,avx512bf16,avx512vbmi"))) double name(Regs& r, long n) {      \
        __m512 c0 = r.c0, c1 = r.c1, c2 = r.c2, c3 = r.c3; /* in registers for the loop */                \
        __m512i s0 = r.s0, s1 = r.s1, s2 = r.s2, s3 = r.s3;                                               \
        const auto t0 = Clock::now();                                                                     \
        for (long i = 0; i < n; ++i)                                                                      \
            asm volatile(body                                                                             \
                         : "+v"(c0), "+v"(c1), "+v"(c2), "+v"(c3), "+v"(s0), "+v"(s1), "+v"(s2), "+v"(s3) \
                         : "v"(r.lut), "v"(r.x));                                                         \
        const double ns = std::chrono::duration<double>(Clock::now() - t0).count() * 1e9 / double(n);     \
        r.c0 = c0, r.c1 = c1, r.c2 = c2, r.c3 = c3, r.s0 = s0, r.s1 = s1, r.s2 = s2, r.s3 = s3;           \
        return ns;                                                                                        \
    }

// Eight independent chains (the integer registers taken as f32 too): enough to hide the FMA's latency.
MOEX_GROUP(fma8,
           "vfmadd231ps %0,%0,%0\n vfmadd231ps %1,%1,%1\n vfmadd231ps %2,%2,%2\n vfmadd231ps %3,%3,%3\n"
           "vfmadd231ps %4,%4,%4\n vfmadd231ps %5,%5,%5\n vfmadd231ps %6,%6,%6\n vfmadd231ps %7,%7,%7")
MOEX_GROUP(dp4, "vdpbf16ps %9,%9,%0\n vdpbf16ps %9,%9,%1\n vdpbf16ps %9,%9,%2\n vdpbf16ps %9,%9,%3")
MOEX_GROUP(permw4, "vpermw %8,%8,%4\n vpermw %8,%8,%5\n vpermw %8,%8,%6\n vpermw %8,%8,%7")
MOEX_GROUP(srlw4, "vpsrlw $4,%4,%4\n vpsrlw $4,%5,%5\n vpsrlw $4,%6,%6\n vpsrlw $4,%7,%7")
MOEX_GROUP(multishift4,
           "vpmultishiftqb %8,%8,%4\n vpmultishiftqb %8,%8,%5\n vpmultishiftqb %8,%8,%6\n"
           "vpmultishiftqb %8,%8,%7")
MOEX_GROUP(pand4, "vpandd %8,%4,%4\n vpandd %8,%5,%5\n vpandd %8,%6,%6\n vpandd %8,%7,%7")
MOEX_GROUP(permw4_srlw4,
           "vpermw %8,%8,%4\n vpsrlw $4,%5,%5\n vpermw %8,%8,%6\n vpsrlw $4,%7,%7\n"
           "vpermw %8,%8,%5\n vpsrlw $4,%4,%4\n vpermw %8,%8,%7\n vpsrlw $4,%6,%6")
MOEX_GROUP(dp4_permw4,
           "vdpbf16ps %9,%9,%0\n vpermw %8,%8,%4\n vdpbf16ps %9,%9,%1\n vpermw %8,%8,%5\n"
           "vdpbf16ps %9,%9,%2\n vpermw %8,%8,%6\n vdpbf16ps %9,%9,%3\n vpermw %8,%8,%7")
MOEX_GROUP(dp4_srlw4,
           "vdpbf16ps %9,%9,%0\n vpsrlw $4,%4,%4\n vdpbf16ps %9,%9,%1\n vpsrlw $4,%5,%5\n"
           "vdpbf16ps %9,%9,%2\n vpsrlw $4,%6,%6\n vdpbf16ps %9,%9,%3\n vpsrlw $4,%7,%7")
MOEX_GROUP(dp4_pand4,
           "vdpbf16ps %9,%9,%0\n vpandd %8,%4,%4\n vdpbf16ps %9,%9,%1\n vpandd %8,%5,%5\n"
           "vdpbf16ps %9,%9,%2\n vpandd %8,%6,%6\n vdpbf16ps %9,%9,%3\n vpandd %8,%7,%7")
// The chunk decode's mix per 64 bytes of a row: 4 vpermw, 3 shifts, 4 vdpbf16ps.
MOEX_GROUP(chunk_mix,
           "vdpbf16ps %9,%9,%0\n vpermw %8,%8,%4\n vpsrlw $4,%9,%5\n vdpbf16ps %9,%9,%1\n"
           "vpermw %8,%8,%5\n vpsrlw $4,%9,%6\n vdpbf16ps %9,%9,%2\n vpermw %8,%8,%6\n"
           "vpsrlw $4,%9,%7\n vdpbf16ps %9,%9,%3\n vpermw %8,%8,%7")
// The old decode's mix per 64 codes (two pairs of rows' 32): 2 x (vpmultishiftqb + vpermw + vdpbf16ps).
MOEX_GROUP(pair_mix,
           "vpmultishiftqb %8,%8,%4\n vpermw %8,%4,%5\n vdpbf16ps %9,%9,%0\n"
           "vpmultishiftqb %8,%8,%6\n vpermw %8,%6,%7\n vdpbf16ps %9,%9,%1")

__attribute__((target("avx512f,avx512bw"))) void init(Regs& r) {
    r.c0 = r.c1 = r.c2 = r.c3 = _mm512_set1_ps(1.0f);
    // As f32 (fma8 takes them so) 0x3f803f80 is ~1.0, a normal number: a subnormal costs a microcode assist.
    r.s0 = r.s1 = r.s2 = r.s3 = _mm512_set1_epi16(0x3f80);
    r.lut = _mm512_set1_epi16(1), r.x = _mm512_set1_epi16(0x3f80);
}

}  // namespace

int main(int argc, char** argv) {
    if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512bf16") ||
        !__builtin_cpu_supports("avx512vbmi")) {
        std::printf("moex_avx512_ports: this CPU lacks AVX-512 BW, BF16 or VBMI; nothing to measure\n");
        return 0;
    }
    const long n = argc > 1 ? std::atol(argv[1]) : 50000000L;
    static Regs r;  // static: no AVX-512 code in main, which runs on every CPU
    init(r);
    const double unit = fma8(r, n) / 8;  // ns per independent vfmadd231ps
    struct Row {
        const char* name;
        int count;
        double (*run)(Regs&, long);
    } rows[] = {{"4 vdpbf16ps", 4, dp4},
                {"4 vpermw", 4, permw4},
                {"4 vpsrlw", 4, srlw4},
                {"4 vpmultishiftqb", 4, multishift4},
                {"4 vpandd", 4, pand4},
                {"4 vpermw + 4 vpsrlw", 8, permw4_srlw4},
                {"4 vdpbf16ps + 4 vpermw", 8, dp4_permw4},
                {"4 vdpbf16ps + 4 vpsrlw", 8, dp4_srlw4},
                {"4 vdpbf16ps + 4 vpandd", 8, dp4_pand4},
                {"chunk decode: 4 dp + 4 vpermw + 3 vpsrlw", 11, chunk_mix},
                {"pair decode: 2 x (multishift + vpermw + dp)", 6, pair_mix}};
    std::printf("one independent vfmadd231ps: %.3f ns (the unit below)\n", unit);
    std::printf("%-46s %10s %8s\n", "group", "ns", "units");
    for (const Row& row : rows) {
        const double ns = row.run(r, n);
        std::printf("%-46s %10.3f %8.2f\n", row.name, ns, ns / unit);
    }
    return 0;
}
