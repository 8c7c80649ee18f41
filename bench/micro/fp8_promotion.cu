// Microbenchmark of the FP8 consumer loop of cuda/gemm/grouped_gemm_sm90.cuh (issue #11: why FP8 prefill runs at
// ~40% of the tensor pipe): two math warpgroups run wgmma e4m3 over one shared-memory stage again and again (no TMA,
// no epilogue), each variant a different way to promote the per-128-K partial sums onto the f32 accumulators.
// Prints TFLOP/s per variant; what it measured is in bench/RESULTS.md L7. Build target: moex_fp8_promotion_micro.
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "cuda/gemm/sm90_tma.cuh"
#include "cuda/gemm/sm90_wgmma.cuh"

namespace {

using namespace moex::cuda::sm90;
using moex::cuda::smem_u32;

#define CHECK(x)                                                                                     \
    do {                                                                                             \
        cudaError_t e_ = (x);                                                                        \
        if (e_ != cudaSuccess) {                                                                     \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(1);                                                                            \
        }                                                                                            \
    } while (0)

// d(64 x N) (+)= A(64 x 32) . B(32 x N), e4m3, both operands from shared memory.
__device__ __forceinline__ void mma_n64(float (&d)[32], uint64_t a, uint64_t b, uint32_t acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, "
        "1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void mma_n96(float (&d)[48], uint64_t a, uint64_t b, uint32_t acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %50, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n96k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47}, %48, %49, p, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47])
        : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void mma_n128(float (&d)[64], uint64_t a, uint64_t b, uint32_t acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(a), "l"(b), "r"(acc));
}
__device__ __forceinline__ void mma_n256(float (&d)[128], uint64_t a, uint64_t b, uint32_t acc) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, "
        "%13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, "
        "%35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, "
        "%57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "
        "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, "
        "%100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, "
        "%118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]), "+f"(d[64]),
          "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]), "+f"(d[72]),
          "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]), "+f"(d[80]),
          "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]), "+f"(d[88]),
          "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]), "+f"(d[96]),
          "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]), "+f"(d[104]),
          "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]),
          "+f"(d[119]), "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]),
          "+f"(d[126]), "+f"(d[127])
        : "l"(a), "l"(b), "r"(acc));
}

template <int kN, int kW>
struct Tile {
    static constexpr int kPieces = kN / kW;
};

template <int kR>
__device__ __forceinline__ void fence(float (&d)[kR]) {
    fence_accumulators(d);
}

template <int kW>
__device__ __forceinline__ void issue(float (&t)[kW / 2], uint64_t da, uint64_t db, uint32_t b_off) {
    wgmma_fence();
#pragma unroll
    for (uint32_t k = 0; k < 4; ++k) {
        const uint64_t a = desc_advance(da, k * 32), b = desc_advance(db, b_off + k * 32);
        if constexpr (kW == 64) mma_n64(t, a, b, k);
        if constexpr (kW == 96) mma_n96(t, a, b, k);
        if constexpr (kW == 128) mma_n128(t, a, b, k);
        if constexpr (kW == 256) mma_n256(t, a, b, k);
    }
    wgmma_commit();
    fence(t);
}

template <int kR>
__device__ __forceinline__ void promote(float* acc, float (&t)[kR], float s_lo, float s_hi) {
#pragma unroll
    for (int i = 0; i < kR; ++i) acc[i] = fmaf(t[i], (i % 4) < 2 ? s_lo : s_hi, acc[i]);
}

// kV: 0 = today's loop (N 256 as two n128 halves, wait 0 and promote per half); 1 = no promotion at all (n256
// accumulating straight into acc, wait 1: the ceiling); 2 = N 256 as four n64 pieces in two temporaries, one piece
// always in flight while the previous one is promoted; 3 = the same with N 192 as two n96 pieces; 4 = N 128 as one
// n128 piece per K block, two temporaries alternating; 5 = N 128, one temporary, wait 0 and promote per K block
// (DeepGEMM's loop at BLOCK_N 128). ptxas serialises the wgmma of 2, 3 and 4 (warning C7514: the promotion reads
// one temporary while the other's MMAs are in flight), so what they show is that serialised form.
template <int kV>
__global__ void __launch_bounds__(256, 1) loop_kernel(int iters, float s, float* sink) {
    extern __shared__ uint8_t raw[];
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
    for (int i = threadIdx.x; i < 48 * 1024; i += blockDim.x) smem[i] = static_cast<uint8_t>((i * 37) & 0x3f);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const uint32_t wg = threadIdx.x / 128;
    const uint64_t da = make_smem_desc(smem_u32(smem) + wg * 8192, 16, 1024);
    const uint64_t db = make_smem_desc(smem_u32(smem) + 16384, 16, 1024);
    const float s_lo = s, s_hi = s * 0.5f;
    constexpr int kN = kV == 3 ? 192 : kV >= 4 && kV <= 5 ? 128 : 256;
    float acc[kN / 2];
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) acc[i] = 0.f;
    if constexpr (kV == 0) {
        float t[64];
        for (int kb = 0; kb < iters; ++kb) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                issue<128>(t, da, db, h * 16384);
                wgmma_wait<0>();
                fence(t);
                promote(acc + 64 * h, t, s_lo, s_hi);
            }
        }
    } else if constexpr (kV == 1) {
        for (int kb = 0; kb < iters; ++kb) {
            fence(acc);
            wgmma_fence();
#pragma unroll
            for (uint32_t k = 0; k < 4; ++k) mma_n256(acc, desc_advance(da, k * 32), desc_advance(db, k * 32), 1);
            wgmma_commit();
            fence(acc);
            wgmma_wait<1>();
        }
        wgmma_wait<0>();
        fence(acc);
    } else if constexpr (kV == 2) {
        float ta[32], tb[32];
        issue<64>(ta, da, db, 0);
        for (int kb = 0; kb < iters; ++kb) {
            issue<64>(tb, da, db, 8192);
            wgmma_wait<1>(), fence(ta), promote(acc, ta, s_lo, s_hi);
            issue<64>(ta, da, db, 16384);
            wgmma_wait<1>(), fence(tb), promote(acc + 32, tb, s_lo, s_hi);
            issue<64>(tb, da, db, 24576);
            wgmma_wait<1>(), fence(ta), promote(acc + 64, ta, s_lo, s_hi);
            issue<64>(ta, da, db, 0);  // the next K block's first piece
            wgmma_wait<1>(), fence(tb), promote(acc + 96, tb, s_lo, s_hi);
        }
        wgmma_wait<0>();
        fence(ta);
    } else if constexpr (kV == 3) {
        float ta[48], tb[48];
        issue<96>(ta, da, db, 0);
        for (int kb = 0; kb < iters; ++kb) {
            issue<96>(tb, da, db, 12288);
            wgmma_wait<1>(), fence(ta), promote(acc, ta, s_lo, s_hi);
            issue<96>(ta, da, db, 0);
            wgmma_wait<1>(), fence(tb), promote(acc + 48, tb, s_lo, s_hi);
        }
        wgmma_wait<0>();
        fence(ta);
    } else if constexpr (kV == 4) {
        float ta[64], tb[64];
        issue<128>(ta, da, db, 0);
        for (int kb = 0; kb < iters; kb += 2) {
            issue<128>(tb, da, db, 0);
            wgmma_wait<1>(), fence(ta), promote(acc, ta, s_lo, s_hi);
            issue<128>(ta, da, db, 0);
            wgmma_wait<1>(), fence(tb), promote(acc, tb, s_lo, s_hi);
        }
        wgmma_wait<0>();
        fence(ta);
    } else {
        float t[64];
        for (int kb = 0; kb < iters; ++kb) {
            issue<128>(t, da, db, 0);
            wgmma_wait<0>();
            fence(t);
            promote(acc, t, s_lo, s_hi);
        }
    }
    float sum = 0.f;
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) sum += acc[i];
    if (sum == 12345.f) sink[threadIdx.x] = sum;  // keeps the loop alive
}

template <int kV>
void time_variant(const char* name, int sms, int iters, float* sink) {
    constexpr int kN = kV == 3 ? 192 : kV >= 4 && kV <= 5 ? 128 : 256;
    const int smem = 48 * 1024 + 1024;
    CHECK(cudaFuncSetAttribute(loop_kernel<kV>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    loop_kernel<kV><<<sms, 256, smem>>>(iters / 10, 1.f, sink);  // warm-up
    CHECK(cudaGetLastError());
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaEventRecord(a));
    loop_kernel<kV><<<sms, 256, smem>>>(iters, 1.f, sink);
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    const double flops = double(sms) * iters * 2 /* warpgroups */ * 2.0 * 64 * kN * 128;
    std::printf("%-58s N %3d  %8.1f TFLOP/s\n", name, kN, flops / (ms * 1e-3) / 1e12);
}

}  // namespace

int main() {
    int dev = 0, sms = 0;
    CHECK(cudaGetDevice(&dev));
    CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    float* sink = nullptr;
    CHECK(cudaMalloc(&sink, 256 * sizeof(float)));
    const int iters = 20000;
    std::printf("FP8 consumer loop, %d CTAs x 2 math warpgroups, %d K blocks of 128 each, operands in shared memory\n",
                sms, iters);
    time_variant<1>("1 ceiling: n256 into acc, wait 1, no promotion", sms, iters, sink);
    time_variant<0>("0 today: 2 x n128 halves, wait 0 + promote per half", sms, iters, sink);
    time_variant<2>("2 N 256 as 4 x n64, one piece in flight while promoting", sms, iters, sink);
    time_variant<3>("3 N 192 as 2 x n96, one piece in flight while promoting", sms, iters, sink);
    time_variant<4>("4 N 128, two temporaries alternating per K block", sms, iters, sink);
    time_variant<5>("5 N 128, wait 0 + promote per K block (DeepGEMM)", sms, iters, sink);
    CHECK(cudaFree(sink));
    return 0;
}
