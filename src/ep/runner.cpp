// EpRunner: one EP experts call = plan on the host, dispatch (counts, ids/weights, hidden rows), the local backend on
// the received rows, combine back (results returned to each token's rank and reduced in a fixed order).
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "moex/ep.h"
#include "moex/error.h"
#include "src/cpu/problem.h"
#include "src/ep/plan.h"
#include "src/ep/rows.h"

namespace moex {
namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// A grow-only buffer on the transport's device.
struct Buffer {
    Device device = Device::kCPU;
    void* p = nullptr;
    int64_t cap = 0;
    void* get(int64_t bytes) {
        if (bytes > cap) {
            ep::device_release(device, p);
            p = nullptr;
            p = ep::device_malloc(device, bytes);
            cap = bytes;
        }
        return p;
    }
    ~Buffer() { ep::device_release(device, p); }
};

// Consecutive blocks of counts[d] rows (row_bytes each) as transport chunks, block d for rank d.
std::vector<SendChunk> send_chunks(const void* base, const std::vector<int64_t>& counts, int64_t row_bytes) {
    std::vector<SendChunk> out;
    int64_t row = 0;
    for (int64_t c : counts) out.push_back({static_cast<const char*>(base) + row * row_bytes, c * row_bytes}), row += c;
    return out;
}
std::vector<RecvChunk> recv_chunks(void* base, const std::vector<int64_t>& counts, int64_t row_bytes) {
    std::vector<RecvChunk> out;
    int64_t row = 0;
    for (int64_t c : counts) out.push_back({static_cast<char*>(base) + row * row_bytes, c * row_bytes}), row += c;
    return out;
}

int64_t sum(const std::vector<int64_t>& v) {
    int64_t s = 0;
    for (int64_t x : v) s += x;
    return s;
}

// Bytes of `counts` rows that leave this rank (the self chunk stays local on any transport).
int64_t off_rank_bytes(const std::vector<int64_t>& counts, int rank, int64_t row_bytes) {
    int64_t s = 0;
    for (size_t d = 0; d < counts.size(); ++d) s += int(d) == rank ? 0 : counts[d] * row_bytes;
    return s;
}

}  // namespace

// One EP call's state as it moves through the four phases of EpRunner::run.
struct EpCall {
    const ExpertsProblem& local;
    int64_t T, H, k, row_bytes;
    int device_index;
    bool by_slot;                     // EpCombine::kSlotOrder
    Tensor w_host;                    // (T, k) the routing weights, read back for the plan
    ep::DispatchPlan plan;            // what goes to which rank
    std::vector<int64_t> recv_count;  // (R) rows received from each rank
    int64_t received = 0;             // N = sum(recv_count)
    void* recv_meta = nullptr;        // (N, 2k) int32: local ids then weight bits
    void* recv_x = nullptr;           // (N, H)
    std::vector<int64_t> back_count;  // (R) result rows this rank returns to each source
    int64_t rows = 0;                 // rows the local backend computed
    void* y = nullptr;                // (rows, H)
};

struct EpRunner::Impl {
    Transport& tr;
    EpShard shard;
    Device dev;
    // Device buffers: idx/meta uploads, packed and received hidden rows, local problem inputs, results.
    Buffer send_idx, send_x, send_meta, recv_x, recv_meta, slot_x, slot_idx, loc_ids, loc_w, y, back, rows, w;
    Impl(Transport& t, const EpShard& s) : tr(t), shard(s), dev(t.device()) {
        for (Buffer* b : {&send_idx, &send_x, &send_meta, &recv_x, &recv_meta, &slot_x, &slot_idx, &loc_ids, &loc_w, &y,
                          &back, &rows, &w})
            b->device = dev;
    }
    // Host vector -> device buffer (a plain copy on the host).
    template <class V>
    void* upload(Buffer& b, const std::vector<V>& v) {
        void* p = b.get(int64_t(v.size() * sizeof(V)));
        ep::copy_bytes(dev, p, v.data(), int64_t(v.size() * sizeof(V)), true, tr.stream());
        return p;
    }
    void check(const ExpertsProblem& local, const TensorView& out) const;
    void plan(EpCall& c);
    void dispatch(EpCall& c, EpStats& st);
    void compute(EpCall& c, const Backend& backend, const RunOptions& run, EpStats& st);
    void combine(EpCall& c, const TensorView& out, EpStats& st);
};

void EpRunner::Impl::check(const ExpertsProblem& local, const TensorView& out) const {
    local.validate();
    local.validate_output(out);
    MOEX_REQUIRE(local.E() == shard.local(), ErrorCode::kInvalidArgument,
                 "ep: the local expert tensors hold " + std::to_string(local.E()) + " experts, the shard " +
                     std::to_string(shard.local()) + " (num_experts=" + std::to_string(shard.num_experts) +
                     ", ep_size=" + std::to_string(shard.ep_size) + ")");
    MOEX_REQUIRE(local.device() == dev, ErrorCode::kInvalidArgument,
                 std::string("ep: the problem is on ") + std::string(device_name(local.device())) +
                     ", the transport moves " + std::string(device_name(dev)) + " memory");
    MOEX_REQUIRE(local.hidden_states.is_contiguous() && local.top_k_index.is_contiguous() &&
                     local.top_k_weights.is_contiguous() && out.is_contiguous(),
                 ErrorCode::kInvalidArgument,
                 "ep: hidden_states, top_k_index, top_k_weights and out must be contiguous");
}

// The plan, on the host: the routing is read back and turned into per-rank send lists (the reference EP router).
void EpRunner::Impl::plan(EpCall& c) {
    void* stream = tr.stream();
    Tensor ids_h(c.local.top_k_index.dtype, c.local.top_k_index.shape, 2);
    c.w_host = Tensor(c.local.top_k_weights.dtype, c.local.top_k_weights.shape, 2);
    ep::copy_bytes(dev, ids_h.data(), c.local.top_k_index.data, ids_h.nbytes(), false, stream);
    ep::copy_bytes(dev, c.w_host.data(), c.local.top_k_weights.data, c.w_host.nbytes(), false, stream);
    ep::sync_stream(dev, stream);
    c.plan = ep::plan_dispatch(ids_h.view(), c.w_host.view(), shard);
}

// Dispatch: counts, then the ids/weights rows (2k int32), then the hidden rows (H).
void EpRunner::Impl::dispatch(EpCall& c, EpStats& st) {
    const auto t0 = Clock::now();
    void* stream = tr.stream();
    const int64_t sent = int64_t(c.plan.send_token.size()), meta_bytes = 2 * c.k * 4;
    void* sx = send_x.get(sent * c.row_bytes);
    ep::gather_rows(dev, sx, c.local.hidden_states.data,
                    static_cast<const int64_t*>(upload(send_idx, c.plan.send_token)), sent, c.row_bytes, stream);
    void* smeta = upload(send_meta, c.plan.send_meta);
    c.recv_count.assign(size_t(shard.ep_size), 0);
    tr.exchange_counts(c.plan.send_count.data(), c.recv_count.data());
    c.received = sum(c.recv_count);
    c.recv_meta = recv_meta.get(c.received * meta_bytes);
    c.recv_x = recv_x.get(c.received * c.row_bytes);
    ep::sync_stream(dev, stream);  // packing done before the transport reads
    tr.all_to_all(send_chunks(smeta, c.plan.send_count, meta_bytes),
                  recv_chunks(c.recv_meta, c.recv_count, meta_bytes));
    tr.all_to_all(send_chunks(sx, c.plan.send_count, c.row_bytes), recv_chunks(c.recv_x, c.recv_count, c.row_bytes));
    ep::sync_stream(dev, stream);
    st.dispatch_s = since(t0);
    st.sent_rows = sent, st.received_rows = c.received;
    st.dispatch_bytes = off_rank_bytes(c.plan.send_count, shard.rank, c.row_bytes + meta_bytes);
}

// Compute: the local backend on this rank's shard.
void EpRunner::Impl::compute(EpCall& c, const Backend& backend, const RunOptions& run, EpStats& st) {
    const auto t0 = Clock::now();
    void* stream = tr.stream();
    const int64_t N = c.received, k = c.k, H = c.H, E_loc = shard.local();
    const DType dt = c.local.dtype();
    std::vector<int32_t> meta_h(static_cast<size_t>(N * 2 * k));
    ep::copy_bytes(dev, meta_h.data(), c.recv_meta, N * 2 * k * 4, false, stream);
    ep::sync_stream(dev, stream);
    ExpertsProblem p = c.local;
    if (c.by_slot) {
        // One row per (received token, local slot), k = 1 and weight 1: the backend returns y_j = f_e(x) (+ bias)
        // unweighted, so that the token's rank can apply w_j in slot order exactly as a single-rank combine does.
        const ep::ReceivePlan rp = ep::plan_receive(c.recv_count, meta_h.data(), k, E_loc);
        c.rows = int64_t(rp.slot_src.size());
        void* xs = slot_x.get(c.rows * c.row_bytes);
        ep::gather_rows(dev, xs, c.recv_x, static_cast<const int64_t*>(upload(slot_idx, rp.slot_src)), c.rows,
                        c.row_bytes, stream);
        p.hidden_states = TensorView::contiguous(xs, dt, {c.rows, H}, dev, c.device_index);
        p.top_k_index =
            TensorView::contiguous(upload(loc_ids, rp.slot_id), DType::kI32, {c.rows, 1}, dev, c.device_index);
        p.top_k_weights = TensorView::contiguous(upload(loc_w, std::vector<float>(size_t(c.rows), 1.0f)), DType::kF32,
                                                 {c.rows, 1}, dev, c.device_index);
        c.back_count = rp.slot_back_count;
    } else {
        // The received (N, k) ids/weights as sent: local ids with sentinel E_loc, weight 0 elsewhere (the EP router).
        std::vector<int32_t> ids(static_cast<size_t>(N * k));
        std::vector<float> wts(static_cast<size_t>(N * k));
        for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < k; ++j) {
                ids[size_t(i * k + j)] = meta_h[size_t(i * 2 * k + j)];
                std::memcpy(&wts[size_t(i * k + j)], &meta_h[size_t(i * 2 * k + k + j)], 4);
            }
        c.rows = N;
        p.hidden_states = TensorView::contiguous(c.recv_x, dt, {N, H}, dev, c.device_index);
        p.top_k_index = TensorView::contiguous(upload(loc_ids, ids), DType::kI32, {N, k}, dev, c.device_index);
        p.top_k_weights = TensorView::contiguous(upload(loc_w, wts), DType::kF32, {N, k}, dev, c.device_index);
        c.back_count = c.recv_count;
    }
    c.y = y.get(c.rows * c.row_bytes);
    if (c.rows > 0) {
        RunOptions ro = run;
        if (dev == Device::kCUDA) ro.cuda_stream = stream;
        backend.run(p, TensorView::contiguous(c.y, dt, {c.rows, H}, dev, c.device_index), ro);
    }
    ep::sync_stream(dev, stream);
    st.compute_s = since(t0);
    st.computed_rows = c.rows;
}

// Combine: the results back to the tokens' ranks, reduced in slot or rank order.
void EpRunner::Impl::combine(EpCall& c, const TensorView& out, EpStats& st) {
    const auto t0 = Clock::now();
    void* stream = tr.stream();
    const int64_t T = c.T, k = c.k;
    const std::vector<int64_t>& expect = c.by_slot ? c.plan.slot_back_count : c.plan.send_count;
    void* bk = back.get(sum(expect) * c.row_bytes);
    tr.all_to_all(send_chunks(c.y, c.back_count, c.row_bytes), recv_chunks(bk, expect, c.row_bytes));
    std::vector<float> wf;  // (T, k) the routing weights as f32 (exact for bf16/f16)
    if (c.by_slot) {
        wf.resize(size_t(T * k));
        cpu::to_f32(c.w_host.data(), c.w_host.view().dtype, T * k, wf.data());
    }
    const int64_t M = c.by_slot ? k : shard.ep_size;
    const auto* rws = static_cast<const int64_t*>(upload(rows, c.by_slot ? c.plan.slot_row : c.plan.rank_row));
    const auto* wd = c.by_slot ? static_cast<const float*>(upload(w, wf)) : nullptr;
    ep::combine_rows(dev, out.data, bk, rws, wd, T, M, c.H, c.local.dtype(), stream);
    ep::sync_stream(dev, stream);
    st.combine_s = since(t0);
    st.combine_bytes = off_rank_bytes(c.back_count, shard.rank, c.row_bytes);
}

EpRunner::EpRunner(Transport& transport, const EpShard& shard) : impl_(std::make_unique<Impl>(transport, shard)) {
    MOEX_REQUIRE(transport.size() == shard.ep_size && transport.rank() == shard.rank, ErrorCode::kInvalidArgument,
                 "EpRunner: the transport is rank " + std::to_string(transport.rank()) + " of " +
                     std::to_string(transport.size()) + ", the shard rank " + std::to_string(shard.rank) + " of " +
                     std::to_string(shard.ep_size));
}
EpRunner::~EpRunner() = default;

EpStats EpRunner::run(const ExpertsProblem& local, const TensorView& out, const EpOptions& options) {
    Impl& m = *impl_;
    const Backend& backend = ExpertsInterface::global().get(options.backend);
    m.check(local, out);
    EpCall c{.local = local,
             .T = local.T(),
             .H = local.H(),
             .k = local.k(),
             .row_bytes = local.H() * dtype_size(local.dtype()),
             .device_index = local.hidden_states.device_index,
             .by_slot = options.combine == EpCombine::kSlotOrder};
    EpStats st;
    st.tokens = c.T;
    m.plan(c);
    m.dispatch(c, st);
    m.compute(c, backend, options.run, st);
    m.combine(c, out, st);
    return st;
}

}  // namespace moex
