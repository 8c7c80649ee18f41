// The CPU experts backward. Per expert e and its routed rows (slots sorted by expert, token-major), in blocks of
// kRowBlock rows:  A = X Wuᵀ + bu (recomputed),  h = gate(A),  G = dO Wd (m, I),  dw = G·h + dO·bd,
// dA = gate'(A) ⊙ (w G),  dX_rows = dA Wu,  dWu += dAᵀ X,  dWd += (w dO)ᵀ h,  dbu += Σ dA,  dbd += Σ w dO.
// G = Wdᵀ dO serves both dw (so y = Wd h is never formed) and dh. Then dx[t] = Σ_j dX_rows[(t, j)] in slot order.
#include "src/cpu/backward.h"

#include <cstring>
#include <vector>

#include "src/cpu/combine.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"
#include "src/cpu/routing.h"

namespace moex::cpu {
namespace {

// Rows per block: the block's scratch (A, dA: N; G, h: I; X, w·dO: H floats per row) stays a few MiB per thread at
// H = 4096, and the f32 weight-gradient accumulators absorb one block at a time. Fixed, so the float order of every
// sum depends on the routing only.
constexpr int64_t kRowBlock = 256;

// Element `offset` of a gradient tensor.
char* at(const TensorView& t, int64_t offset) { return static_cast<char*>(t.data) + offset * dtype_size(t.dtype); }

void store_zeros(const TensorView& t, int64_t offset, int64_t n) {
    if (!t.defined() || n == 0) return;
    std::memset(at(t, offset), 0, size_t(n * dtype_size(t.dtype)));
}

// The transposed view of an expert's weights, as the B operand of C = A·Bᵀ: the B of the products by W itself.
WeightMat flipped(const WeightMat& w, int64_t n_rows) {
    WeightMat f = w;
    f.transposed = !w.transposed;  // same storage, read the other way
    f.K = n_rows;
    return f;
}

struct Scratch {
    FloatBuffer a, h, g, da, x, wdo, pt, tmp, bias, acc_up, acc_down, acc_bu, acc_bd;
    std::vector<const float*> ptrs;
    const float** rows(int64_t n) {
        if (int64_t(ptrs.size()) < n) ptrs.resize(size_t(n));
        return ptrs.data();
    }
};

// The M rows of Pᵀ for P (m, M) row-major, as the A rows of C = Pᵀ Q.
const float** transposed_rows(Scratch& s, const float* P, int64_t M, int64_t m) {
    float* pt = s.pt.get(M * m);
    for (int64_t r = 0; r < m; ++r)
        for (int64_t i = 0; i < M; ++i) pt[i * m + r] = P[r * M + i];
    const float** a = s.rows(M);
    for (int64_t i = 0; i < M; ++i) a[i] = pt + i * m;
    return a;
}

// C (M, L) (+)= Pᵀ Q for P (m, M), Q (m, L) row-major: rows of Pᵀ against Q read as a transposed (L, m) B, so each
// element sums the m rows in order. accumulate: C += (through tmp), else C =.
void outer(Scratch& s, const float* P, int64_t M, const float* Q, int64_t L, int64_t m, float* C, bool accumulate) {
    const float** a = transposed_rows(s, P, M, m);
    const WeightMat q{Q, DType::kF32, true, L, m};
    float* dst = accumulate ? s.tmp.get(M * L) : C;
    gemm_rows(a, M, q, L, dst, L);
    if (accumulate)
        for (int64_t i = 0; i < M * L; ++i) C[i] += dst[i];
}

// C (M, L) = Pᵀ Q as outer() computes it, stored straight into `out` (M, L) in dtype dt, kOuterRows rows of C at a
// time through an f32 slab that stays in cache: an expert whose rows fit one block needs no (M, L) f32 accumulator
// written, read back and converted (at qwen3-30b-a3b T = 512 those passes moved ~6 GB per call).
constexpr int64_t kOuterRows = 128;
// Up to this many rows, a bf16 gradient comes from the table's outer_bf16 (the same bits, no packed tile; at 16 and 32
// rows the packed tile, which reuses each B load over 12 output rows, was faster: RESULTS Y4).
constexpr int64_t kOuterDirectRows = 8;
void outer_store(Scratch& s, const float* P, int64_t M, const float* Q, int64_t L, int64_t m, DType dt, void* out) {
    if (dt == DType::kBF16 && m <= kOuterDirectRows && kernels().outer_bf16 != nullptr)
        return kernels().outer_bf16(P, M, Q, L, m, static_cast<uint16_t*>(out));
    const float** a = transposed_rows(s, P, M, m);
    const WeightMat q{Q, DType::kF32, true, L, m};
    float* slab = s.tmp.get(kOuterRows * L);
    for (int64_t i0 = 0; i0 < M; i0 += kOuterRows) {
        const int64_t mc = M - i0 < kOuterRows ? M - i0 : kOuterRows;
        gemm_rows(a + i0, mc, q, L, slab, L);
        from_f32(slab, mc * L, dt, static_cast<char*>(out) + i0 * L * dtype_size(dt));
    }
}

struct Pass {
    const CpuProblem& cp;
    const ExpertsGrads& g;
    const Routing& r;
    const float* x;                    // (T, H) f32
    const float* dout;                 // (T, H) f32
    const std::vector<int64_t>& slot;  // (rows,) slot t·k + j of each row
    float* dx_rows;                    // (rows, H) or null
    bool want_up, want_down, want_bu, want_bd;
};

// Rows [r0, r0 + m) of expert e; first: the first block of the expert (accumulators are written, not added to);
// only: the expert's one block (its weight gradients are stored here, without the accumulators).
void block(const Pass& ps, Scratch& s, int64_t e, int64_t r0, int64_t m, bool first, bool only) {
    const CpuProblem& cp = ps.cp;
    const int64_t H = cp.H, I = cp.I, N = cp.up_width, es = dtype_size(cp.dtype);
    const float** xr = s.rows(m);
    float* x = s.x.get(m * H);  // (m, H) gathered: the outer product needs contiguous rows
    for (int64_t i = 0; i < m; ++i)
        std::memcpy(x + i * H, ps.x + int64_t(ps.r.token[size_t(r0 + i)]) * H, size_t(H) * 4);
    for (int64_t i = 0; i < m; ++i) xr[i] = x + i * H;
    float* a = s.a.get(m * N);  // (m, N) in the weight rows' order
    gemm_rows(xr, m, cp.up(e), N, a, N);
    if (cp.up_bias) {
        float* b = s.bias.get(N);
        to_f32(static_cast<const char*>(cp.up_bias) + e * N * es, cp.dtype, N, b);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < N; ++c) a[i * N + c] += b[c];
    }
    float* wdo = s.wdo.get(m * H);  // (m, H) w·dO
    for (int64_t i = 0; i < m; ++i) xr[i] = ps.dout + int64_t(ps.r.token[size_t(r0 + i)]) * H;
    float* gm = s.g.get(m * I);  // (m, I) = dO Wd
    gemm_rows(xr, m, flipped(cp.down(e), H), I, gm, I);
    float* bd = nullptr;  // after the up bias: both live in s.bias
    if (cp.down_bias) {
        bd = s.bias.get(H);
        to_f32(static_cast<const char*>(cp.down_bias) + e * H * es, cp.dtype, H, bd);
    }
    float* h = s.h.get(m * I);
    float* da = s.da.get(m * N);
    for (int64_t i = 0; i < m; ++i) {
        const int64_t sl = ps.slot[size_t(r0 + i)];
        const float w = cp.route_weight(sl / cp.k, sl % cp.k);
        const float* dor = xr[i];
        float* hi = h + i * I;
        gate_values(cp, a + i * N, hi);
        float dw = 0.0f;
        for (int64_t c = 0; c < I; ++c) dw += gm[i * I + c] * hi[c];
        if (bd)
            for (int64_t c = 0; c < H; ++c) dw += dor[c] * bd[c];
        if (ps.g.top_k_weights.defined()) from_f32(&dw, 1, ps.g.top_k_weights.dtype, at(ps.g.top_k_weights, sl));
        for (int64_t c = 0; c < I; ++c) gm[i * I + c] *= w;  // dh
        gate_grads(cp, a + i * N, gm + i * I, da + i * N);
        for (int64_t c = 0; c < H; ++c) wdo[i * H + c] = w * dor[c];
    }
    if (ps.dx_rows) {
        for (int64_t i = 0; i < m; ++i) xr[i] = da + i * N;
        gemm_rows(xr, m, flipped(cp.up(e), N), H, ps.dx_rows + r0 * H, H);
    }
    const bool tr = cp.p->is_transposed;
    const ExpertsGrads& g = ps.g;
    // C (M, L) = Pᵀ Q into the accumulator acc, or (only) straight into the gradient tensor t at element offset off.
    auto weight_grad = [&](const float* P, int64_t M, const float* Q, int64_t L, FloatBuffer& acc, const TensorView& t,
                           int64_t off) {
        if (only)
            outer_store(s, P, M, Q, L, m, t.dtype, at(t, off));
        else
            outer(s, P, M, Q, L, m, acc.get(M * L), !first);
    };
    if (ps.want_up)
        tr ? weight_grad(x, H, da, N, s.acc_up, g.gate_up_proj, e * N * H)
           : weight_grad(da, N, x, H, s.acc_up, g.gate_up_proj, e * N * H);
    if (ps.want_down)
        tr ? weight_grad(h, I, wdo, H, s.acc_down, g.down_proj, e * H * I)
           : weight_grad(wdo, H, h, I, s.acc_down, g.down_proj, e * H * I);
    auto column_sums = [&](const float* v, int64_t n, float* acc) {
        if (first)
            for (int64_t c = 0; c < n; ++c) acc[c] = 0.0f;
        for (int64_t i = 0; i < m; ++i)
            for (int64_t c = 0; c < n; ++c) acc[c] += v[i * n + c];
    };
    if (ps.want_bu) column_sums(da, N, s.acc_bu.get(N));
    if (ps.want_bd) column_sums(wdo, H, s.acc_bd.get(H));
}

// All of expert e's rows (group gi, or none when gi < 0), then its gradients stored once.
void expert_task(const Pass& ps, int64_t e, int64_t gi) {
    const CpuProblem& cp = ps.cp;
    const ExpertsGrads& g = ps.g;
    const int64_t H = cp.H, I = cp.I, N = cp.up_width;
    if (gi < 0) {  // no token reaches it: zero gradients
        store_zeros(g.gate_up_proj, e * N * H, N * H);
        store_zeros(g.down_proj, e * H * I, H * I);
        store_zeros(g.gate_up_bias, e * N, N);
        store_zeros(g.down_bias, e * H, H);
        return;
    }
    thread_local Scratch s;
    const int64_t b0 = ps.r.begin[size_t(gi)], b1 = ps.r.begin[size_t(gi) + 1];
    const bool only = b1 - b0 <= kRowBlock;
    for (int64_t r0 = b0; r0 < b1; r0 += kRowBlock)
        block(ps, s, e, r0, b1 - r0 < kRowBlock ? b1 - r0 : kRowBlock, r0 == b0, only);
    if (ps.want_up && !only) from_f32(s.acc_up.get(N * H), N * H, g.gate_up_proj.dtype, at(g.gate_up_proj, e * N * H));
    if (ps.want_down && !only) from_f32(s.acc_down.get(H * I), H * I, g.down_proj.dtype, at(g.down_proj, e * H * I));
    if (ps.want_bu) from_f32(s.acc_bu.get(N), N, g.gate_up_bias.dtype, at(g.gate_up_bias, e * N));
    if (ps.want_bd) from_f32(s.acc_bd.get(H), H, g.down_bias.dtype, at(g.down_bias, e * H));
}

}  // namespace

void run_backward(const ExpertsProblem& p, const TensorView& grad_out, const ExpertsGrads& g, int num_threads) {
    const CpuProblem cp = unpack_problem(p);
    const int threads = resolve_threads(num_threads);
    const int64_t T = cp.T, H = cp.H, k = cp.k;
    // The calling thread's buffers, kept between calls as the forward keeps its own (experts_cpu.cpp): fresh ones take
    // first-touch page faults every call (2-3% of qwen3 T = 64 and 512 on the dev Xeon, inside the noise: RESULTS Y4).
    struct CallBuffers {
        FloatBuffer x, dout, dx_rows;
    };
    thread_local CallBuffers buffers;
    FloatBuffer &xbuf = buffers.x, &dbuf = buffers.dout, &dxbuf = buffers.dx_rows;
    const float* x = x_as_f32(cp, 0, T, xbuf, threads);
    CpuProblem dcp = cp;  // grad_out read as the hidden states are
    dcp.x = grad_out.data;
    const float* dout = x_as_f32(dcp, 0, T, dbuf, threads);
    const Routing r = route_by_expert(cp, 0, T);
    std::vector<int64_t> slot(size_t(r.rows())), group(size_t(cp.E), -1);
    for (int64_t s = 0; s < T * k; ++s)
        if (r.slot_row[size_t(s)] >= 0) slot[size_t(r.slot_row[size_t(s)])] = s;
    for (int64_t gi = 0; gi < r.groups(); ++gi) group[size_t(r.expert[size_t(gi)])] = gi;
    if (g.top_k_weights.defined()) store_zeros(g.top_k_weights, 0, T * k);  // sentinel slots keep their 0
    float* dx_rows = g.hidden_states.defined() ? dxbuf.get(r.rows() * H) : nullptr;
    const Pass ps{cp,
                  g,
                  r,
                  x,
                  dout,
                  slot,
                  dx_rows,
                  g.gate_up_proj.defined(),
                  g.down_proj.defined(),
                  g.gate_up_bias.defined(),
                  g.down_bias.defined()};
    parallel_for(cp.E, threads, [&](int64_t e) { expert_task(ps, e, group[size_t(e)]); });
    if (!dx_rows) return;
    parallel_for(T, T * H >= (1 << 14) ? threads : 1, [&](int64_t t) {
        thread_local std::vector<float> sum;
        sum.assign(size_t(H), 0.0f);
        for (int64_t j = 0; j < k; ++j) {
            const int64_t row = r.slot_row[size_t(t * k + j)];
            if (row < 0) continue;  // sentinel: contributes nothing
            const float* d = dx_rows + row * H;
            for (int64_t c = 0; c < H; ++c) sum[size_t(c)] += d[c];
        }
        from_f32(sum.data(), H, g.hidden_states.dtype, at(g.hidden_states, t * H));
    });
}

}  // namespace moex::cpu
