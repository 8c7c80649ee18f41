// Causal grouped-query attention on the CPU over the layer's KV cache, with moex's GEMM kernels (src/cpu/gemm.h):
// a task is one KV head, some of its query heads and a block of tokens; scores S = Q·Kᵀ read the cache rows in place
// (rows layout), softmax in f32, then O = P·V reads V in place (transposed layout). Everything stays f32 until O is
// rounded once to the output dtype (torch's CPU sdpa kernel also takes scores, softmax and sums in f32; for bf16 it
// rounds the probabilities to bf16 before P·V, which moves ~15% of outputs by 1 bf16 ulp against ours).
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "moex/error.h"
#include "src/cpu/gemm.h"
#include "src/model/ops/cpu_ops.h"

namespace moex::model::cpu_ops {
namespace {

struct Geometry {
    int64_t T, pos0, nq, nkv, D, group, window;
    float scale;
};

// One task: KV head h, its query heads [h*group + g0, + ng), tokens [t0, t1).
struct Task {
    int64_t h, g0, ng, t0, t1;
};

void check(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
           const TensorView& v_cache, int64_t pos0, const AttentionShape& s, const TensorView& out) {
    const char* op = "attention";
    require_matrix(q, op, "q");
    require_matrix(k, op, "k");
    require_matrix(v, op, "v");
    require_matrix(k_cache, op, "k_cache");
    require_matrix(v_cache, op, "v_cache");
    require_matrix(out, op, "out");
    MOEX_REQUIRE(s.num_heads > 0 && s.num_kv_heads > 0 && s.head_dim > 0 && s.num_heads % s.num_kv_heads == 0 &&
                     s.sliding_window >= 0 && std::isfinite(s.scale),
                 ErrorCode::kInvalidArgument,
                 "ops.attention: bad shape: num_heads " + std::to_string(s.num_heads) + ", num_kv_heads " +
                     std::to_string(s.num_kv_heads) + ", head_dim " + std::to_string(s.head_dim) + ", sliding_window " +
                     std::to_string(s.sliding_window));
    const int64_t T = q.shape[0], qw = s.num_heads * s.head_dim, kw = s.num_kv_heads * s.head_dim;
    auto need = [&](const TensorView& t, const char* name, int64_t rows, int64_t cols) {
        MOEX_REQUIRE(t.shape[0] == rows && t.shape[1] == cols, ErrorCode::kInvalidArgument,
                     std::string("ops.attention: ") + name + " " + t.shape_string() + " must be (" +
                         std::to_string(rows) + ", " + std::to_string(cols) + ")");
    };
    need(q, "q", T, qw);
    need(out, "out", T, qw);
    need(k, "k", T, kw);
    need(v, "v", T, kw);
    MOEX_REQUIRE(pos0 >= 0 && pos0 + T <= k_cache.shape[0], ErrorCode::kInvalidArgument,
                 "ops.attention: rows [" + std::to_string(pos0) + ", " + std::to_string(pos0 + T) +
                     ") do not fit k_cache " + k_cache.shape_string());
    need(k_cache, "k_cache", k_cache.shape[0], kw);
    need(v_cache, "v_cache", k_cache.shape[0], kw);
}

// Splits the work into tasks: tokens in blocks of ~64 query rows (so the score GEMM has rows to fill its tiles), and
// the query heads of a KV head split further when there are fewer tasks than threads (decode: one token).
std::vector<Task> make_tasks(const Geometry& g, int threads) {
    const int64_t tb = std::max<int64_t>(1, 64 / g.group);
    const int64_t blocks = (g.T + tb - 1) / tb;
    int64_t ng = g.group;
    while (ng > 1 && g.nkv * blocks * (g.group / ng) < threads) ng = (ng + 1) / 2;
    std::vector<Task> tasks;
    for (int64_t b = 0; b < blocks; ++b)
        for (int64_t h = 0; h < g.nkv; ++h)
            for (int64_t g0 = 0; g0 < g.group; g0 += ng)
                tasks.push_back({h, g0, std::min(ng, g.group - g0), b * tb, std::min(g.T, (b + 1) * tb)});
    return tasks;
}

// e^x for x <= 0 (softmax arguments), within 2 ulp: n = round(x log2 e), r = x - n ln2 (two parts), a degree-6
// polynomial (the one of src/cpu/gate_avx2.cpp), times 2^n. Plain float code so that the softmax loops vectorise:
// with scalar libm expf, one thread took 60 ms for a 512-token prefill (32 heads, 4 KV heads, D 128, bf16) and 1.30 ms
// for a decode step over 2048 cached rows; vectorised, 42 ms and 0.78 ms.
inline float exp_nonpositive(float x) {
    // x = max(x, -87.33) (e^-87.33 ~ 2^-126, the smallest normal) in integer ops: under -ftrapping-math a float
    // compare keeps GCC from vectorising the loop. Negative floats order by magnitude as unsigned bits; NaN is kept.
    constexpr uint32_t kLow = std::bit_cast<uint32_t>(-87.33f);
    const uint32_t u = std::bit_cast<uint32_t>(x);
    const uint32_t below = 0u - uint32_t((u > kLow) & ((u & 0x7fffffffu) <= 0x7f800000u));
    x = std::bit_cast<float>((below & kLow) | (~below & u));
    const float shifted = x * 1.44269504088896341f + 12582912.0f;  // 1.5 * 2^23: rounds to an integer in the low bits
    const float n = shifted - 12582912.0f;
    float r = x - n * 0.693359375f;
    r = r - n * -2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = (p * r) * r + (r + 1.0f);
    const uint32_t two_n = (std::bit_cast<uint32_t>(shifted) - 0x4B400000u + 127u) << 23;
    return p * std::bit_cast<float>(two_n);
}

// Softmax of one score row over its keys [lo, hi) (row-local), zero elsewhere in [0, n). f32 partial sums as torch's.
void softmax_row(float* s, int64_t n, int64_t lo, int64_t hi, float scale) {
    float mx = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : mx)
    for (int64_t j = lo; j < hi; ++j) {
        s[j] *= scale;
        mx = s[j] > mx ? s[j] : mx;  // a NaN score makes the sum, hence the whole row, NaN
    }
    for (int64_t j = lo; j < hi; ++j) s[j] = exp_nonpositive(s[j] - mx);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = lo; j < hi; ++j) sum += s[j];
    const float inv = 1.0f / sum;
    for (int64_t j = 0; j < lo; ++j) s[j] = 0.0f;
    for (int64_t j = lo; j < hi; ++j) s[j] *= inv;
    for (int64_t j = hi; j < n; ++j) s[j] = 0.0f;
}

void run_task(const Geometry& g, const Task& task, const TensorView& q, const TensorView& k_cache,
              const TensorView& v_cache, const TensorView& out) {
    const int64_t D = g.D, rows_per_token = task.ng, m = (task.t1 - task.t0) * rows_per_token;
    // Keys the block can see: [kstart, kend) in cache rows.
    const int64_t kend = g.pos0 + task.t1;
    const int64_t kstart = g.window > 0 ? std::max<int64_t>(0, g.pos0 + task.t0 - g.window + 1) : 0;
    const int64_t L = kend - kstart;
    // Query rows (token-major, then head) as f32 row pointers: q itself when it is f32, else a converted copy.
    std::vector<const float*> a(static_cast<size_t>(m));
    float* qf = q.dtype == DType::kF32 ? nullptr : scratch(Slot::kTaskA, m * D);
    for (int64_t r = 0; r < m; ++r) {
        const int64_t t = task.t0 + r / rows_per_token, head = task.h * g.group + task.g0 + r % rows_per_token;
        if (qf) {
            load_row(q, t, head * D, D, qf + r * D);
            a[size_t(r)] = qf + r * D;
        } else {
            a[size_t(r)] = reinterpret_cast<const float*>(element_ptr(q, t, head * D));
        }
    }
    float* s = scratch(Slot::kTaskB, m * L);  // (m, L) scores, then probabilities
    const cpu::WeightMat keys{element_ptr(k_cache, kstart, task.h * D), k_cache.dtype, false, k_cache.strides[0], D};
    cpu::gemm_rows(a.data(), m, keys, L, s, L);
    for (int64_t r = 0; r < m; ++r) {
        const int64_t qpos = g.pos0 + task.t0 + r / rows_per_token;
        const int64_t lo = g.window > 0 ? std::max<int64_t>(kstart, qpos - g.window + 1) : 0;
        softmax_row(s + r * L, L, lo - kstart, qpos + 1 - kstart, g.scale);
    }
    for (int64_t r = 0; r < m; ++r) a[size_t(r)] = s + r * L;
    float* o = scratch(Slot::kTaskC, m * D);  // (m, D)
    const cpu::WeightMat values{element_ptr(v_cache, kstart, task.h * D), v_cache.dtype, true, v_cache.strides[0], L};
    cpu::gemm_rows(a.data(), m, values, D, o, D);
    for (int64_t r = 0; r < m; ++r) {
        const int64_t t = task.t0 + r / rows_per_token, head = task.h * g.group + task.g0 + r % rows_per_token;
        store_row(o + r * D, out, t, head * D, D);
    }
}

}  // namespace

void attention(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& k_cache,
               const TensorView& v_cache, int64_t pos0, const AttentionShape& shape, const TensorView& out,
               int threads) {
    check(q, k, v, k_cache, v_cache, pos0, shape, out);
    const int64_t T = q.shape[0], kw = shape.num_kv_heads * shape.head_dim;
    if (T == 0) return;
    for_row_blocks(T, kw, threads, [&](int64_t t0, int64_t t1) {  // the new keys and values into the caches
        float* row = scratch(Slot::kTaskA, kw);
        for (int64_t t = t0; t < t1; ++t) {
            load_row(k, t, 0, kw, row);
            store_row(row, k_cache, pos0 + t, 0, kw);
            load_row(v, t, 0, kw, row);
            store_row(row, v_cache, pos0 + t, 0, kw);
        }
    });
    const Geometry g{T,
                     pos0,
                     shape.num_heads,
                     shape.num_kv_heads,
                     shape.head_dim,
                     shape.num_heads / shape.num_kv_heads,
                     shape.sliding_window,
                     shape.scale};
    const std::vector<Task> tasks = make_tasks(g, threads);
    cpu::parallel_for(int64_t(tasks.size()), threads,
                      [&](int64_t i) { run_task(g, tasks[size_t(i)], q, k_cache, v_cache, out); });
}

}  // namespace moex::model::cpu_ops
