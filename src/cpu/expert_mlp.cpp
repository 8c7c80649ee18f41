// Task lists of the up and down projections and the task bodies: gather rows by pointer, GEMM, gate or bias.
#include "src/cpu/expert_mlp.h"

#include <algorithm>
#include <vector>

#include "src/cpu/config.h"
#include "src/cpu/gate.h"
#include "src/cpu/gemm.h"
#include "src/cpu/kernels.h"
#include "src/cpu/parallel.h"

namespace moex::cpu {
namespace {

struct Task {
    int64_t g, r0, r1;  // group, rows [r0, r1)
    int64_t c0, c1;     // columns: of I (up) or of H (down)
};

// The path of a group's GEMMs (gemm.h gemm_path), except that quantized weights against rows that are neither bf16
// values nor rounded activations (an f32 model's, weight-only) stay on the f32 kernels, as gemm_rows will find.
GemmPath group_path(const CpuProblem& cp, int64_t m, const WeightMat& w, bool gemv) {
    const GemmPath path = gemm_path(kernels(), m, w, gemv);
    if (path == GemmPath::kAmx && w.quantized() && cp.dtype != DType::kBF16 && cp.act_quant == ActivationQuant::kNone)
        return choose_path(m, w.transposed);
    return path;
}

// A group keeps all its rows in one task (its weights are read once) and splits columns only, except for packed
// groups above kMc rows, split into balanced row blocks. Kernel paths depend on a task's rows and the schedule
// (gemm.h gemm_path), never on the thread count; the streaming tasks' width does (config.h stream_task_cols), which
// no output's bits depend on.
// A run of groups of one expert with equal rows (batched_mm's single rows) is ordered column block first, so the
// block of weights they share is read from DRAM once and then from L2.
std::vector<Task> make_tasks(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, bool up, int threads) {
    const bool tr = cp.p->is_transposed;
    const int64_t width = up ? cp.I : cp.H, stream_cols = stream_task_cols(width, g1 - g0, threads);
    auto rows = [&](int64_t g) { return r.begin[size_t(g) + 1] - r.begin[size_t(g)]; };
    auto same = [&](int64_t g, int64_t h) { return r.expert[size_t(g)] == r.expert[size_t(h)] && rows(g) == rows(h); };
    std::vector<Task> tasks;
    for (int64_t run = g0, end = g0; run < g1; run = end) {
        for (end = run + 1; end < g1 && same(end, run);) ++end;
        const int64_t m = rows(run), e = r.expert[size_t(run)];
        const GemmPath path = group_path(cp, m, up ? cp.up(e) : cp.down(e), r.gemv);
        const int64_t blocks = path == GemmPath::kPacked || path == GemmPath::kAmx ? (m + kMc - 1) / kMc : 1;
        const int64_t cols =
            up ? up_task_cols(path, tr, cp.I, stream_cols) : down_task_cols(path, tr, cp.H, stream_cols);
        for (int64_t i = 0; i < blocks; ++i)
            for (int64_t c0 = 0; c0 < width; c0 += cols)
                for (int64_t g = run; g < end; ++g) {
                    const int64_t b = r.begin[size_t(g)];
                    tasks.push_back({g, b + m * i / blocks, b + m * (i + 1) / blocks, c0, std::min(c0 + cols, width)});
                }
    }
    return tasks;
}

const float** row_pointers(int64_t m) {
    thread_local std::vector<const float*> ptrs;
    if (int64_t(ptrs.size()) < m) ptrs.resize(size_t(m));
    return ptrs.data();
}

// Row i of group g's input: the token's x (up) or the row's h (down), and its scales when it was rounded.
struct RowSource {
    const float* base;
    int64_t ld;
    bool by_token;  // x by routed token (up, unless the rows were quantized per routed row)
    ActScales scales;
    int64_t index(const Routing& r, int64_t i) const { return by_token ? int64_t(r.token[size_t(i)]) : i; }
    const float* row(const Routing& r, int64_t i) const { return base + index(r, i) * ld; }
};

// The bf16 rows of each group whose path takes them (the AMX tiles, the vdpbf16ps tile, the FP8 decode GEMV on
// vdpbf16ps), prepared once for all its tasks (gemm.h Bf16Rows: one conversion to bf16, one packing for the weight
// tiles, instead of one per GEMM call: an up task of mixtral-8x7b's 14,336-wide I alone made 56 calls on each expert's
// rows). Indexed by g - g0; a16 null where the group takes none.
std::vector<Bf16Rows> prepare_groups(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, bool up,
                                     const RowSource& src, int threads) {
    thread_local FloatBuffer buf;
    const int64_t K = up ? cp.H : cp.I;
    std::vector<Bf16Rows> prepared(size_t(g1 - g0));
    std::vector<int64_t> offset(size_t(g1 - g0), -1);
    std::vector<RowsFor> use(size_t(g1 - g0));
    int64_t total = 0;
    for (int64_t g = g0; g < g1; ++g) {
        const int64_t m = r.begin[size_t(g) + 1] - r.begin[size_t(g)], e = r.expert[size_t(g)];
        const WeightMat w = up ? cp.up(e) : cp.down(e);
        if (!rows_for(kernels(), group_path(cp, m, w, r.gemv), m, w, use[size_t(g - g0)])) continue;
        offset[size_t(g - g0)] = total;
        total += bf16_rows_floats(m, K, use[size_t(g - g0)], src.scales.groups);
    }
    if (total == 0) return prepared;
    float* base = buf.get(total);
    parallel_for(g1 - g0, threads, [&](int64_t i) {
        if (offset[size_t(i)] < 0) return;
        const int64_t b = r.begin[size_t(g0 + i)], m = r.begin[size_t(g0 + i) + 1] - b;
        const float** a = row_pointers(m);
        for (int64_t j = 0; j < m; ++j) a[j] = src.row(r, b + j);
        const float** s = nullptr;  // rounded rows: their scales
        if (src.scales.s != nullptr) {
            thread_local std::vector<const float*> ptrs;
            ptrs.resize(size_t(m));
            for (int64_t j = 0; j < m; ++j) ptrs[size_t(j)] = src.scales.row(src.index(r, b + j));
            s = ptrs.data();
        }
        if (!prepare_bf16_rows(kernels(), a, m, K, use[size_t(i)], base + offset[size_t(i)], prepared[size_t(i)], s,
                               src.scales.group))
            prepared[size_t(i)] = Bf16Rows{};  // some value not a bf16 (or no kernel): the task's f32 kernels
    });
    return prepared;
}

// A task's part of its group's prepared rows: all of them, or a row block (then without the packed operand, which
// holds 16-row groups from the group's first row; a row block above kMc rows takes the packed tiles anyway).
Bf16Rows task_rows(const std::vector<Bf16Rows>& prepared, const Routing& r, int64_t g0, const Task& t) {
    Bf16Rows p = prepared[size_t(t.g - g0)];
    const int64_t b = r.begin[size_t(t.g)];
    if (p.a16 == nullptr || (t.r0 == b && t.r1 == r.begin[size_t(t.g) + 1])) return p;
    RowScales s = p.scales;
    if (s.s != nullptr) s.s += t.r0 - b;
    return Bf16Rows{p.a16 + (t.r0 - b) * p.lda, p.lda, nullptr, s};
}

void up_task(const CpuProblem& cp, const Routing& r, const Task& t, const RowSource& src, const Bf16Rows& prep,
             float* h) {
    const int64_t m = t.r1 - t.r0, ni = t.c1 - t.c0, e = r.expert[size_t(t.g)];
    const float** a = row_pointers(m);
    for (int64_t i = 0; i < m; ++i) a[i] = src.row(r, t.r0 + i);
    const int64_t width = up_task_width(cp, ni);
    float* tile = thread_scratch(1, m * width);  // (m, width): see gate.h for the column order
    const WeightMat w = cp.up(e);
    switch (cp.layout) {
        case GateLayout::kConcatenated:
            if (ni == cp.I) {  // all of I: gate and up rows are adjacent, one pass reads whole rows of B
                gemm_rows(a, m, w, 2 * ni, tile, width, r.gemv, &prep);
                break;
            }
            gemm_rows(a, m, w.from_row(t.c0), ni, tile, width, r.gemv, &prep);
            gemm_rows(a, m, w.from_row(cp.I + t.c0), ni, tile + ni, width, r.gemv, &prep);
            break;
        case GateLayout::kInterleaved: gemm_rows(a, m, w.from_row(2 * t.c0), 2 * ni, tile, width, r.gemv, &prep); break;
        case GateLayout::kUngated: gemm_rows(a, m, w.from_row(t.c0), ni, tile, width, r.gemv, &prep); break;
    }
    apply_gate(cp, e, tile, m, t.c0, ni, h + t.r0 * cp.I + t.c0, cp.I);
}

void down_task(const CpuProblem& cp, const Routing& r, const Task& t, const float* h, const Bf16Rows& prep, float* y) {
    const int64_t m = t.r1 - t.r0, n = t.c1 - t.c0, e = r.expert[size_t(t.g)];
    const float** a = row_pointers(m);
    for (int64_t i = 0; i < m; ++i) a[i] = h + (t.r0 + i) * cp.I;
    float* c = y + t.r0 * cp.H + t.c0;  // (m, n) with row stride H
    gemm_rows(a, m, cp.down(e).from_row(t.c0), n, c, cp.H, r.gemv, &prep);
    if (!cp.down_bias) return;
    float* b = thread_scratch(2, n);
    const int64_t es = dtype_size(cp.dtype);
    to_f32(static_cast<const char*>(cp.down_bias) + (e * cp.H + t.c0) * es, cp.dtype, n, b);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) c[i * cp.H + j] += b[j];
}

}  // namespace

void run_up(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, const UpInput& in, float* h, int threads) {
    const std::vector<Task> tasks = make_tasks(cp, r, g0, g1, true, threads);
    const RowSource src{in.x, cp.H, !in.by_row, in.scales};
    const std::vector<Bf16Rows> prepared = prepare_groups(cp, r, g0, g1, true, src, threads);
    parallel_for(int64_t(tasks.size()), threads, [&](int64_t i) {
        const Task& t = tasks[size_t(i)];
        up_task(cp, r, t, src, task_rows(prepared, r, g0, t), h);
    });
}

void run_down(const CpuProblem& cp, const Routing& r, int64_t g0, int64_t g1, const float* h, const ActScales& hs,
              float* y, int threads) {
    const std::vector<Task> tasks = make_tasks(cp, r, g0, g1, false, threads);
    const std::vector<Bf16Rows> prepared = prepare_groups(cp, r, g0, g1, false, RowSource{h, cp.I, false, hs}, threads);
    parallel_for(int64_t(tasks.size()), threads, [&](int64_t i) {
        const Task& t = tasks[size_t(i)];
        down_task(cp, r, t, h, task_rows(prepared, r, g0, t), y);
    });
}

}  // namespace moex::cpu
