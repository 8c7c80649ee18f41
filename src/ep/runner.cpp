// EpRunner: one EP experts call = plan on the host, dispatch (counts, ids/weights, hidden rows), the local backend on
// the received rows, combine back (results returned to each token's rank and reduced in a fixed order).
#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "moex/ep.h"
#include "moex/error.h"
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

struct EpRunner::Impl {
    Transport& tr;
    EpShard shard;
    Device dev;
    // Device buffers: idx/meta uploads, packed and received hidden rows, local problem inputs, results.
    Buffer send_idx, send_x, send_meta, recv_x, recv_meta, slot_x, slot_idx, loc_ids, loc_w, y, back, rows, w;
    Impl(Transport& t, const EpShard& s) : tr(t), shard(s), dev(t.device()) {
        for (Buffer* b : {&send_idx, &send_x, &send_meta, &recv_x, &recv_meta, &slot_x, &slot_idx, &loc_ids, &loc_w,
                          &y, &back, &rows, &w})
            b->device = dev;
    }
    // Host vector -> device buffer (a plain copy on the host).
    template <class V>
    void* upload(Buffer& b, const std::vector<V>& v) {
        void* p = b.get(int64_t(v.size() * sizeof(V)));
        ep::copy_bytes(dev, p, v.data(), int64_t(v.size() * sizeof(V)), true, tr.stream());
        return p;
    }
};

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
    local.validate();
    local.validate_output(out);
    const EpShard& sh = m.shard;
    MOEX_REQUIRE(local.E() == sh.local(), ErrorCode::kInvalidArgument,
                 "ep: the local expert tensors hold " + std::to_string(local.E()) + " experts, the shard " +
                     std::to_string(sh.local()) + " (num_experts=" + std::to_string(sh.num_experts) +
                     ", ep_size=" + std::to_string(sh.ep_size) + ")");
    MOEX_REQUIRE(local.device() == m.dev, ErrorCode::kInvalidArgument,
                 std::string("ep: the problem is on ") + std::string(device_name(local.device())) +
                     ", the transport moves " + std::string(device_name(m.dev)) + " memory");
    MOEX_REQUIRE(local.hidden_states.is_contiguous() && local.top_k_index.is_contiguous() &&
                     local.top_k_weights.is_contiguous() && out.is_contiguous(),
                 ErrorCode::kInvalidArgument, "ep: hidden_states, top_k_index, top_k_weights and out must be contiguous");
    const int R = sh.ep_size, rank = sh.rank;
    const int64_t T = local.T(), H = local.H(), k = local.k(), E_loc = sh.local();
    const int64_t row_bytes = H * dtype_size(local.dtype());
    void* stream = m.tr.stream();
    const int dix = local.hidden_states.device_index;
    EpStats st;
    st.tokens = T;

    // ---- plan (host) ----
    Tensor ids_h(local.top_k_index.dtype, local.top_k_index.shape, 2);
    Tensor w_h(local.top_k_weights.dtype, local.top_k_weights.shape, 2);
    ep::copy_bytes(m.dev, ids_h.data(), local.top_k_index.data, ids_h.nbytes(), false, stream);
    ep::copy_bytes(m.dev, w_h.data(), local.top_k_weights.data, w_h.nbytes(), false, stream);
    ep::sync_stream(m.dev, stream);
    const ep::DispatchPlan plan = ep::plan_dispatch(ids_h.view(), w_h.view(), sh);

    // ---- dispatch: counts, then ids/weights rows (2k int32), then hidden rows (H) ----
    auto t0 = Clock::now();
    const int64_t sent = int64_t(plan.send_token.size()), meta_bytes = 2 * k * 4;
    void* sx = m.send_x.get(sent * row_bytes);
    ep::gather_rows(m.dev, sx, local.hidden_states.data, static_cast<const int64_t*>(m.upload(m.send_idx, plan.send_token)),
                    sent, row_bytes, stream);
    void* smeta = m.upload(m.send_meta, plan.send_meta);
    std::vector<int64_t> recv_count(static_cast<size_t>(R));
    m.tr.exchange_counts(plan.send_count.data(), recv_count.data());
    const int64_t N = sum(recv_count);
    void* rmeta = m.recv_meta.get(N * meta_bytes);
    void* rx = m.recv_x.get(N * row_bytes);
    ep::sync_stream(m.dev, stream);  // packing done before the transport reads
    m.tr.all_to_all(send_chunks(smeta, plan.send_count, meta_bytes),
                    recv_chunks(rmeta, recv_count, meta_bytes));
    m.tr.all_to_all(send_chunks(sx, plan.send_count, row_bytes),
                    recv_chunks(rx, recv_count, row_bytes));
    ep::sync_stream(m.dev, stream);
    st.dispatch_s = since(t0);
    st.sent_rows = sent, st.received_rows = N;
    st.dispatch_bytes = off_rank_bytes(plan.send_count, rank, row_bytes + meta_bytes);

    // ---- compute: the local backend on this rank's shard ----
    t0 = Clock::now();
    std::vector<int32_t> meta_h(static_cast<size_t>(N * 2 * k));
    ep::copy_bytes(m.dev, meta_h.data(), rmeta, N * meta_bytes, false, stream);
    ep::sync_stream(m.dev, stream);
    const bool by_slot = options.combine == EpCombine::kSlotOrder;
    std::vector<int64_t> back_count;  // (R) result rows this rank returns to each source
    int64_t rows = 0;
    ExpertsProblem p = local;
    if (by_slot) {
        // One row per (received token, local slot), k = 1 and weight 1: the backend returns y_j = f_e(x) (+ bias)
        // unweighted, so that the token's rank can apply w_j in slot order exactly as a single-rank combine does.
        const ep::ReceivePlan rp = ep::plan_receive(recv_count, meta_h.data(), k, E_loc);
        rows = int64_t(rp.slot_src.size());
        void* xs = m.slot_x.get(rows * row_bytes);
        ep::gather_rows(m.dev, xs, rx, static_cast<const int64_t*>(m.upload(m.slot_idx, rp.slot_src)), rows, row_bytes,
                        stream);
        p.hidden_states = TensorView::contiguous(xs, local.dtype(), {rows, H}, m.dev, dix);
        p.top_k_index = TensorView::contiguous(m.upload(m.loc_ids, rp.slot_id), DType::kI32, {rows, 1}, m.dev, dix);
        p.top_k_weights = TensorView::contiguous(m.upload(m.loc_w, std::vector<float>(size_t(rows), 1.0f)),
                                                 DType::kF32, {rows, 1}, m.dev, dix);
        back_count = rp.slot_back_count;
    } else {
        // The received (N, k) ids/weights as sent: local ids with sentinel E_loc, weight 0 elsewhere (the EP router).
        std::vector<int32_t> ids(static_cast<size_t>(N * k));
        std::vector<float> wts(static_cast<size_t>(N * k));
        for (int64_t i = 0; i < N; ++i)
            for (int64_t j = 0; j < k; ++j) {
                ids[size_t(i * k + j)] = meta_h[size_t(i * 2 * k + j)];
                std::memcpy(&wts[size_t(i * k + j)], &meta_h[size_t(i * 2 * k + k + j)], 4);
            }
        rows = N;
        p.hidden_states = TensorView::contiguous(rx, local.dtype(), {N, H}, m.dev, dix);
        p.top_k_index = TensorView::contiguous(m.upload(m.loc_ids, ids), DType::kI32, {N, k}, m.dev, dix);
        p.top_k_weights = TensorView::contiguous(m.upload(m.loc_w, wts), DType::kF32, {N, k}, m.dev, dix);
        back_count = recv_count;
    }
    void* y = m.y.get(rows * row_bytes);
    if (rows > 0) {
        RunOptions ro = options.run;
        if (m.dev == Device::kCUDA) ro.cuda_stream = stream;
        backend.run(p, TensorView::contiguous(y, local.dtype(), {rows, H}, m.dev, dix), ro);
    }
    ep::sync_stream(m.dev, stream);
    st.compute_s = since(t0);
    st.computed_rows = rows;

    // ---- combine: results back to the tokens' ranks, reduced in slot or rank order ----
    t0 = Clock::now();
    const std::vector<int64_t>& expect = by_slot ? plan.slot_back_count : plan.send_count;
    void* bk = m.back.get(sum(expect) * row_bytes);
    m.tr.all_to_all(send_chunks(y, back_count, row_bytes),
                    recv_chunks(bk, expect, row_bytes));
    std::vector<float> wf;  // (T, k) the routing weights as f32 (exact for bf16/f16)
    if (by_slot) {
        wf.resize(size_t(T * k));
        const TensorView& wv = w_h.view();
        for (int64_t i = 0; i < T * k; ++i)
            wf[size_t(i)] = wv.dtype == DType::kF32    ? wv.ptr<const float>()[i]
                            : wv.dtype == DType::kBF16 ? bf16_to_f32(wv.ptr<const uint16_t>()[i])
                                                       : f16_to_f32(wv.ptr<const uint16_t>()[i]);
    }
    const int64_t M = by_slot ? k : R;
    const auto* rws = static_cast<const int64_t*>(m.upload(m.rows, by_slot ? plan.slot_row : plan.rank_row));
    const auto* wd = by_slot ? static_cast<const float*>(m.upload(m.w, wf)) : nullptr;
    ep::combine_rows(m.dev, out.data, bk, rws, wd, T, M, H, local.dtype(), stream);
    ep::sync_stream(m.dev, stream);
    st.combine_s = since(t0);
    st.combine_bytes = off_rank_bytes(back_count, rank, row_bytes);
    return st;
}

}  // namespace moex
