// Quantized weight rows decoded into bf16 rows for the bf16 tiles (quant_rows_avx512.h).
//
// Why it is exact: every e4m3 code is a bf16 (4 significant bits, exponents 2^-9..2^8), and an e2m1 code times its
// block scale (a power of two for MXFP4, an e4m3 for NVFP4) has at most 6 significant bits. An FP8 weight's f32 block
// scale is not a bf16 factor: it stays out of the rows, in weight_factors, for the GEMMs' promotion.
// GCC 12 warns inside its own AVX-512 intrinsics (their _mm512_undefined_* operands), not about this file.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include "src/cpu/quant_rows_avx512.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "moex/dtype.h"
#include "src/cpu/dequant.h"

namespace moex::cpu {

namespace {

// The decoders' constants, loaded once per decode_rows call (function-local statics in the loop cost a guard check
// per 32 codes).
struct Decoder {
    __m512i subnormal;  // bf16 of m x 2^-9 at index m < 8
    __m512 e2m1;        // the 16 signed e2m1 values
    __m512i e2m1_bf16;  // the same as bf16 at word index c < 16
    Decoder() {
        alignas(64) uint16_t t[32] = {}, b[32] = {};
        for (int m = 0; m < 8; ++m) t[m] = f32_to_bf16(float(m) / 512.0f);
        subnormal = _mm512_load_si512(t);
        alignas(64) float v[16];
        for (int c = 0; c < 16; ++c) v[c] = fp4e2m1_to_f32(uint8_t(c)), b[c] = f32_to_bf16(v[c]);
        e2m1 = _mm512_load_ps(v);
        e2m1_bf16 = _mm512_load_si512(b);
    }
};

// 32 e4m3 codes as 32 bf16, exactly: sign-extended to 16 bits, the exponent rebased (+120) and the mantissa moved
// up for normal codes; zero and the subnormal codes (exponent 0: m x 2^-9) from a table; NaN (0x7f) as a quiet NaN.
inline __m512i e4m3_to_bf16(const Decoder& d, __m256i bytes) {
    const __m512i w = _mm512_cvtepi8_epi16(bytes);
    __m512i t = _mm512_and_si512(_mm512_slli_epi16(w, 4), _mm512_set1_epi16(short(0x87f0)));
    t = _mm512_add_epi16(t, _mm512_set1_epi16(0x3c00));
    const __mmask32 sub = _mm512_testn_epi16_mask(w, _mm512_set1_epi16(0x78));
    t = _mm512_mask_permutexvar_epi16(t, sub, w, d.subnormal);  // index: the low 5 bits, the mantissa here
    t = _mm512_ternarylogic_epi32(t, w, _mm512_set1_epi16(short(0x8000)), 0xf8);  // t | (w & sign)
    const __m512i mag = _mm512_and_si512(w, _mm512_set1_epi16(0x7f));
    return _mm512_mask_mov_epi16(t, _mm512_cmpeq_epi16_mask(mag, _mm512_set1_epi16(0x7f)), _mm512_set1_epi16(0x7fc0));
}

// 32 e2m1 codes (16 bytes, the even k in each low nibble) times the f32 scale of their byte (lane i: byte i) as 16
// dwords of bf16 k pairs (even k low): the products are exact in f32 and in bf16 (their low 16 bits are zero).
inline __m512i e2m1_to_bf16_pairs(const Decoder& d, __m128i bytes, __m512 scale) {
    const __m512i x = _mm512_cvtepu8_epi32(bytes);
    const __m512 lo = _mm512_mul_ps(_mm512_permutexvar_ps(x, d.e2m1), scale);  // index: the low 4 bits
    const __m512 hi = _mm512_mul_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(x, 4), d.e2m1), scale);
    return _mm512_ternarylogic_epi32(_mm512_castps_si512(hi), _mm512_srli_epi32(_mm512_castps_si512(lo), 16),
                                     _mm512_set1_epi32(int(0xffff0000u)), 0xec);  // (hi & high half) | lo >> 16
}

// 32 e2m1 codes (16 bytes, the even k in each low nibble) times 2^s as 32 bf16 in k order, for an MXFP4 block whose
// scale 2^s keeps every nonzero weight a normal bf16 (|s| <= 125): the code's bf16 from a word table (each dword gets
// byte i's low nibble in its low word and its high nibble in its high word), then s added to the exponent of the
// nonzero ones. The same bits as e2m1_to_bf16_pairs (its product is exact there), in 6 instructions instead of 10 and
// no scalar scale decode.
inline __m512i e2m1_to_bf16_pow2(const Decoder& d, __m128i bytes, int s) {
    const __m512i x = _mm512_cvtepu8_epi32(bytes);
    const __m512i idx = _mm512_ternarylogic_epi32(x, _mm512_slli_epi32(x, 12), _mm512_set1_epi32(0x000f000f),
                                                  0xa8);                          // (x | x << 12) & mask
    const __mmask32 nonzero = _mm512_test_epi16_mask(idx, _mm512_set1_epi16(7));  // +-0 stay zero
    const __m512i v = _mm512_permutexvar_epi16(idx, d.e2m1_bf16);
    return _mm512_mask_add_epi16(v, nonzero, v, _mm512_set1_epi16(short(s * 128)));
}

}  // namespace

// Each row's codes are prefetched two rows ahead (into the next block's rows at the end): the rows are far
// apart in memory, and without it each 64-byte line waited on DRAM (measured: 28% of the kernel's samples on the
// instruction after the load). Rows issue a line per 64 bytes of codes decoded: a whole row's lines at once stalled
// the core on the prefetches themselves (mixtral-8x7b T = 64, 4 and 14 KiB rows: 31% of the samples after the burst's
// prefetcht0; spread, 1.2x faster; bench/RESULTS.md V7). FP4 rows kept the burst while their decode was slow (spread
// then ran 1.2x slower); since MXFP4's faster decode the spread is 1.1x faster there, NVFP4 alike within the noise
// (RESULTS X1).
void decode_rows(const WeightMat& b, int64_t n0, int rows, int64_t n, int64_t k0, int64_t kc, uint16_t* dst,
                 int64_t ldd) {
    const Decoder d;
    const int64_t kv = std::min(kc, b.K - k0);  // valid k of the block
    const int rows16 = (rows + 15) / 16 * 16;
    for (int i = rows; i < rows16; ++i) std::memset(dst + i * ldd, 0, size_t(kc) * 2);
    const auto* base = static_cast<const uint8_t*>(b.data);
    const bool fp8 = b.q.format == QuantFormat::kFp8;
    const int64_t at = fp8 ? k0 : k0 / 2;  // the block's first byte in a row
    // MXFP4 (ue8m0 bytes per 32 k): the power-of-two scales join the exponents (e2m1_to_bf16_pow2)
    const bool pow2 = b.q.format == QuantFormat::kMxfp4 && b.q.scale_dtype != DType::kF32 &&
                      b.q.scale_dtype != DType::kFP8E4M3 && b.q.bk == 32 && k0 % 32 == 0;
    for (int i = 0; i < rows; ++i) {
        const int64_t r = n0 + i;
        const uint8_t* ahead = r + 2 < n ? base + (r + 2) * b.ld + at : nullptr;
        const uint8_t* row = base + r * b.ld;
        const uint8_t* scale_row =
            pow2 ? static_cast<const uint8_t*>(b.q.scale) + ((b.q.row0 + r) / b.q.bn) * b.q.ld : nullptr;
        uint16_t* out = dst + i * ldd;
        for (int64_t k = 0; k < kc; k += 32) {
            const int64_t byte = fp8 ? k : k / 2;  // of the block in the row
            if (ahead != nullptr && byte % 64 == 0 && k < kv) _mm_prefetch(ahead + byte, _MM_HINT_T0);
            const int64_t valid = std::clamp<int64_t>(kv - k, 0, 32);
            __m512i v;
            if (fp8) {
                const __mmask32 mk = valid >= 32 ? ~__mmask32(0) : __mmask32((1u << valid) - 1);
                v = e4m3_to_bf16(d, _mm256_maskz_loadu_epi8(mk, row + k0 + k));
            } else {
                const int64_t bytes = valid / 2;  // K is a multiple of the scale block: 32 or 16 (even)
                const __mmask16 mk = bytes >= 16 ? __mmask16(0xffff) : __mmask16((1u << bytes) - 1);
                const int e = pow2 && valid > 0 ? scale_row[(k0 + k) / 32] : 0;  // 2^(e - 127), 0xff NaN
                if (pow2 && (valid == 0 || (e >= 2 && e <= 252))) {
                    v = valid == 0 ? _mm512_setzero_si512()
                                   : e2m1_to_bf16_pow2(d, _mm_maskz_loadu_epi8(mk, row + (k0 + k) / 2), e - 127);
                    _mm512_storeu_si512(out + k, v);
                    continue;
                }
                const float s0 = valid > 0 ? block_scale(b.q, r, k0 + k) : 0.0f;
                const float s1 = b.q.bk == 16 ? (valid > 16 ? block_scale(b.q, r, k0 + k + 16) : 0.0f) : s0;
                const __m512 scale = _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
                v = e2m1_to_bf16_pairs(d, _mm_maskz_loadu_epi8(mk, row + (k0 + k) / 2), scale);
            }
            _mm512_storeu_si512(out + k, v);
        }
    }
}

// The FP8 block scales of rows of one scale row computed once.
void weight_factors(const WeightMat& b, int64_t n0, int rows, int64_t k0, int64_t pb, int64_t nkb, float* wf) {
    for (int i = 0; i < 32; ++i) {
        const bool same = i > 0 && i < rows && (b.q.row0 + n0 + i) / b.q.bn == (b.q.row0 + n0 + i - 1) / b.q.bn;
        for (int64_t j = 0; j < nkb; ++j) {
            float& f = wf[j * 32 + i];
            if (i >= rows)
                f = 0.0f;
            else if (b.q.format != QuantFormat::kFp8)
                f = b.q.global;
            else
                f = same ? wf[j * 32 + i - 1] : quant_scale(b.q, n0 + i, k0 + j * pb);
        }
    }
}

}  // namespace moex::cpu
