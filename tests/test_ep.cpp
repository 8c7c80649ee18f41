// Expert parallelism on the CPU: shard/id mapping (sentinels), the dispatch plan's layout and combine order, and
// EpRunner over the in-memory transport (R ranks as R threads) against single-rank runs of every CPU backend.
#include <cstring>
#include <thread>

#include "moex/ep.h"
#include "moex/error.h"
#include "src/ep/plan.h"
#include "tests/test_support.h"

namespace moex::test {
namespace {

TEST(EpShard, RejectsExpertsNotDivisibleByEpSize) {
    try {
        make_ep_shard(256, 3, 0);
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
        EXPECT_NE(std::string(e.what()).find("num_experts must be divisible by ep_size"), std::string::npos)
            << e.what();
    }
    EXPECT_THROW(make_ep_shard(8, 2, 2), Error);
    EXPECT_THROW(make_ep_shard(8, 0, 0), Error);
    const EpShard s = make_ep_shard(256, 8, 3);
    EXPECT_EQ(s.local(), 32);
    EXPECT_EQ(s.first(), 96);
    EXPECT_EQ(s.owner(255), 7);
}

TEST(EpShard, ShardViewsSliceDimZero) {
    HostProblem hp(3, 8, 6, 8, 2, Variant{.bias = true}, 1);
    const ExpertsProblem& full = hp.problem();
    const ExpertsProblem p = shard_experts(full, make_ep_shard(8, 4, 2));
    EXPECT_EQ(p.E(), 2);
    EXPECT_EQ(p.gate_up_proj.ptr<float>(), full.gate_up_proj.ptr<float>() + 4 * full.gate_up_proj.strides[0]);
    EXPECT_EQ(p.down_proj.ptr<float>(), full.down_proj.ptr<float>() + 4 * full.down_proj.strides[0]);
    EXPECT_EQ(p.down_bias.ptr<float>(), full.down_bias.ptr<float>() + 4 * full.down_bias.strides[0]);
    EXPECT_EQ(p.hidden_states.data, full.hidden_states.data);
    EXPECT_NO_THROW(p.validate());
}

// The reference EP router: E = 8, R = 2, rank 1 owns 4..7; ids elsewhere (and -1, 8) become sentinel 4, weight 0.
TEST(EpRouter, LocalIdsAndSentinels) {
    for (DType idt : {DType::kI32, DType::kI64}) {
        Tensor ids(idt, {2, 3}), w(DType::kF32, {2, 3}), lids(idt, {2, 3}), lw(DType::kF32, {2, 3});
        const int64_t g[6] = {0, 5, 7, 4, -1, 8};
        for (int i = 0; i < 6; ++i) {
            if (idt == DType::kI64)
                static_cast<int64_t*>(ids.data())[i] = g[i];
            else
                static_cast<int32_t*>(ids.data())[i] = int32_t(g[i]);
            static_cast<float*>(w.data())[i] = 0.1f * float(i + 1);
        }
        ep_route_local(ids.view(), w.view(), make_ep_shard(8, 2, 1), lids.view(), lw.view());
        const int64_t want_id[6] = {4, 1, 3, 0, 4, 4};
        const float want_w[6] = {0.0f, 0.2f, 0.3f, 0.4f, 0.0f, 0.0f};
        for (int i = 0; i < 6; ++i) {
            EXPECT_EQ(expert_id(lids.view(), i / 3, i % 3), want_id[i]) << i;
            EXPECT_EQ(static_cast<float*>(lw.data())[i], want_w[i]) << i;
        }
    }
}

// T = 3, k = 2, E = 4, R = 2 (rank 0: experts 0,1; rank 1: 2,3). Token 2 has a dropped id (9).
TEST(EpPlan, DispatchLayoutAndCombineOrder) {
    Tensor ids(DType::kI32, {3, 2}), w(DType::kF32, {3, 2});
    const int32_t g[6] = {3, 0, 1, 1, 9, 2};
    std::memcpy(ids.data(), g, sizeof g);
    for (int i = 0; i < 6; ++i) static_cast<float*>(w.data())[i] = float(i + 1);
    const ep::DispatchPlan p = ep::plan_dispatch(ids.view(), w.view(), make_ep_shard(4, 2, 0));
    EXPECT_EQ(p.send_count, (std::vector<int64_t>{2, 2}));  // rank 0: tokens 0, 1; rank 1: tokens 0, 2
    EXPECT_EQ(p.send_token, (std::vector<int64_t>{0, 1, 0, 2}));
    // meta rows: local ids (sentinel 2 = E_loc) then weights (0 for the other rank's slots).
    const std::vector<int32_t> want_ids = {2, 0, 1, 1, 1, 2, 2, 0};
    const std::vector<float> want_w = {0, 2, 3, 4, 1, 0, 0, 6};
    for (int r = 0; r < 4; ++r)
        for (int j = 0; j < 2; ++j) {
            EXPECT_EQ(p.send_meta[size_t(r * 4 + j)], want_ids[size_t(r * 2 + j)]) << r << "," << j;
            float f;
            std::memcpy(&f, &p.send_meta[size_t(r * 4 + 2 + j)], 4);
            EXPECT_EQ(f, want_w[size_t(r * 2 + j)]) << r << "," << j;
        }
    // Slot rows come back rank-major, then token, then slot: (0,1) (1,0) (1,1) from rank 0; (0,0) (2,1) from rank 1.
    EXPECT_EQ(p.slot_back_count, (std::vector<int64_t>{3, 2}));
    EXPECT_EQ(p.slot_row, (std::vector<int64_t>{3, 0, 1, 2, -1, 4}));
    EXPECT_EQ(p.rank_row, (std::vector<int64_t>{0, 2, 1, -1, -1, 3}));

    // The receiver (rank 1) of rows from rank 0 (2 rows) and rank 1 (0 rows): one slot row per local id.
    const std::vector<int32_t> meta(p.send_meta.begin() + 8, p.send_meta.end());  // rank 0's rows for rank 1
    const ep::ReceivePlan rp = ep::plan_receive({2, 0}, meta.data(), 2, 2);
    EXPECT_EQ(rp.rows, 2);
    EXPECT_EQ(rp.slot_src, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(rp.slot_id, (std::vector<int32_t>{1, 0}));
    EXPECT_EQ(rp.slot_back_count, (std::vector<int64_t>{2, 0}));
}

TEST(EpTransport, MemoryAllToAllAndSizeMismatch) {
    auto tr = make_memory_transports(3);
    std::vector<std::thread> threads;
    std::vector<std::string> errors(3);
    for (int r = 0; r < 3; ++r)
        threads.emplace_back([&, r] {
            int64_t cs[3], cr[3];
            for (int d = 0; d < 3; ++d) cs[d] = 10 * r + d;
            tr[size_t(r)]->exchange_counts(cs, cr);
            for (int s = 0; s < 3; ++s)
                if (cr[s] != 10 * s + r) errors[size_t(r)] += "count ";
            std::vector<int32_t> out(3), in(3, -1);
            std::vector<SendChunk> send;
            std::vector<RecvChunk> recv;
            for (int d = 0; d < 3; ++d) out[size_t(d)] = 100 * r + d;
            for (int d = 0; d < 3; ++d) send.push_back({&out[size_t(d)], 4}), recv.push_back({&in[size_t(d)], 4});
            tr[size_t(r)]->all_to_all(send, recv);
            for (int s = 0; s < 3; ++s)
                if (in[size_t(s)] != 100 * s + r) errors[size_t(r)] += "data ";
            if (r == 2) recv[0].bytes = 2;  // rank 2 expects 2 bytes from rank 0, which sends 4
            try {
                tr[size_t(r)]->all_to_all(send, recv);
                if (r == 2) errors[size_t(r)] += "no size error ";
            } catch (const Error& e) {
                if (r != 2) errors[size_t(r)] += e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < 3; ++r) EXPECT_EQ(errors[size_t(r)], "") << "rank " << r;
}

// Runs the full problem on R simulated ranks: rank r holds tokens [T*r/R, T*(r+1)/R) and experts of its shard.
Tensor run_ep(const ExpertsProblem& full, int R, const std::string& backend, EpCombine mode,
              std::vector<EpStats>* stats = nullptr) {
    const int64_t T = full.T(), H = full.H();
    Tensor out(full.dtype(), {T, H});
    auto transports = make_memory_transports(R);
    std::vector<std::string> errors(static_cast<size_t>(R));
    std::vector<EpStats> st(static_cast<size_t>(R));
    std::vector<std::thread> threads;
    for (int r = 0; r < R; ++r)
        threads.emplace_back([&, r] {
            try {
                const EpShard shard = make_ep_shard(full.E(), R, r);
                const int64_t t0 = T * r / R, t1 = T * (r + 1) / R;
                ExpertsProblem p = shard_experts(full, shard);
                auto rows = [&](TensorView v) {
                    v.data = static_cast<char*>(v.data) + t0 * v.strides[0] * dtype_size(v.dtype);
                    v.shape[0] = t1 - t0;
                    return v;
                };
                p.hidden_states = rows(full.hidden_states);
                p.top_k_index = rows(full.top_k_index);
                p.top_k_weights = rows(full.top_k_weights);
                EpRunner runner(*transports[size_t(r)], shard);
                EpOptions o{.backend = backend, .combine = mode, .run = RunOptions{.num_threads = 1}};
                st[size_t(r)] = runner.run(p, rows(out.view()), o);
                st[size_t(r)] = runner.run(p, rows(out.view()), o);  // a second call reuses the workspace
            } catch (const std::exception& e) {
                errors[size_t(r)] = e.what();
            }
        });
    for (auto& t : threads) t.join();
    for (int r = 0; r < R; ++r)
        if (!errors[size_t(r)].empty())
            throw Error(ErrorCode::kInvalidArgument, "rank " + std::to_string(r) + ": " + errors[size_t(r)]);
    if (stats) *stats = st;
    return out;
}

std::vector<std::string> cpu_backends() {
    std::vector<std::string> out;
    for (const std::string& name : ExpertsInterface::global().names())
        if (!ExpertsInterface::global().get(name).unavailable(Device::kCPU)) out.push_back(name);
    return out;
}

// A problem with duplicate ids and dropped ids (-1 and E) so that sentinels cross the EP path too.
HostProblem ep_problem(int64_t T, const Variant& v, uint64_t seed) {
    HostProblem hp(T, 40, 24, 12, 4, v, seed);
    for (int64_t t = 0; t < T; t += 5) hp.set_id(t, 1, hp.id(t, 0));
    for (int64_t t = 2; t < T; t += 7) hp.set_id(t, 2, 12);
    for (int64_t t = 3; t < T; t += 11) hp.set_id(t, 3, -1);
    return hp;
}

// The deterministic path: slot-order combine gives the bytes of a single-rank run of the same backend (f32).
TEST(EpRunner, SlotOrderMatchesSingleRankBitwiseF32) {
    int ran = 0;
    for (const std::string& name : cpu_backends()) {
        for (const Variant v : {Variant{}, Variant{.transposed = true, .bias = true, .ids_i64 = true},
                                Variant{.concatenated = false, .bias = true}}) {
            HostProblem hp = ep_problem(37, v, 5);
            const Backend& b = ExpertsInterface::global().get(name);
            if (b.why_not(hp.problem())) continue;
            const PlacedProblem placed = place(hp.problem(), Device::kCPU);
            const Tensor single = run_backend(b, placed, RunOptions{.num_threads = 1});
            for (int R : {1, 2, 3, 4}) {
                const Tensor ep = run_ep(hp.problem(), R, name, EpCombine::kSlotOrder);
                EXPECT_TRUE(bitwise_equal(ep, single)) << name << " " << v.name() << " R=" << R;
                ++ran;
            }
        }
    }
    EXPECT_GE(ran, 12);
}

// bf16/f16: the slot results are rounded to the dtype before the combine, so close to the reference, not bytes.
TEST(EpRunner, BothCombinesMatchReference16Bit) {
    for (const std::string& name : cpu_backends())
        for (DType dt : {DType::kBF16, DType::kF16})
            for (EpCombine mode : {EpCombine::kSlotOrder, EpCombine::kRankOrder}) {
                HostProblem hp = ep_problem(29, Variant{.dtype = dt, .bias = true, .weights_f32 = false}, 9);
                if (ExpertsInterface::global().get(name).why_not(hp.problem())) continue;
                const Tensor ep = run_ep(hp.problem(), 3, name, mode);
                EXPECT_TRUE(outputs_close(ep.view(), reference_of(hp.problem())))
                    << name << " " << dtype_name(dt) << " mode " << int(mode);
            }
}

// Rank order: deterministic (same bytes every run) and close to the single-rank result.
TEST(EpRunner, RankOrderIsDeterministicAndCloseF32) {
    HostProblem hp = ep_problem(50, Variant{.bias = true}, 3);
    for (const std::string& name : cpu_backends()) {
        if (ExpertsInterface::global().get(name).why_not(hp.problem())) continue;
        std::vector<EpStats> st;
        const Tensor a = run_ep(hp.problem(), 4, name, EpCombine::kRankOrder, &st);
        EXPECT_TRUE(bitwise_equal(a, run_ep(hp.problem(), 4, name, EpCombine::kRankOrder))) << name;
        EXPECT_TRUE(outputs_close(a.view(), reference_of(hp.problem()))) << name;
        int64_t sent = 0, received = 0;
        for (const EpStats& s : st) sent += s.sent_rows, received += s.received_rows;
        EXPECT_EQ(sent, received);
    }
}

// More ranks than tokens: ranks with T = 0 still join every collective.
TEST(EpRunner, RanksWithoutTokens) {
    HostProblem hp = ep_problem(2, Variant{}, 4);
    const Backend& b = ExpertsInterface::global().get("grouped_mm");
    const Tensor single = run_backend(b, place(hp.problem(), Device::kCPU), RunOptions{.num_threads = 1});
    EXPECT_TRUE(bitwise_equal(run_ep(hp.problem(), 6, "grouped_mm", EpCombine::kSlotOrder), single));
}

TEST(EpRunner, ErrorsNameTheMismatch) {
    HostProblem hp = ep_problem(4, Variant{}, 2);
    auto tr = make_memory_transports(1);
    EpRunner runner(*tr[0], make_ep_shard(24, 1, 0));  // shard of 24 experts, tensors hold 12
    Tensor out(DType::kF32, {4, 40});
    try {
        runner.run(hp.problem(), out.view(), EpOptions{});
        FAIL() << "no error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("local expert tensors hold 12"), std::string::npos) << e.what();
    }
    EXPECT_THROW(EpRunner(*tr[0], make_ep_shard(24, 2, 1)), Error);  // transport is rank 0 of 1
    if (!nccl_available()) EXPECT_THROW(make_nccl_transport_from_env(), Error);
}

// Hugging Face's EP style (every rank sees all tokens, ep_route_local + the backend on its shard, outputs summed by
// an all-reduce) agrees with the reference.
TEST(EpRouter, RoutedShardsSumToTheFullResult) {
    HostProblem hp = ep_problem(21, Variant{.bias = false}, 6);
    const ExpertsProblem& full = hp.problem();
    const int R = 3;
    std::vector<double> sum(size_t(full.T() * full.H()), 0.0);
    for (int r = 0; r < R; ++r) {
        const EpShard shard = make_ep_shard(full.E(), R, r);
        Tensor ids(full.top_k_index.dtype, full.top_k_index.shape, 2), w(DType::kF32, full.top_k_weights.shape, 2);
        ep_route_local(full.top_k_index, full.top_k_weights, shard, ids.view(), w.view());
        ExpertsProblem p = shard_experts(full, shard);
        p.top_k_index = ids.view(), p.top_k_weights = w.view();
        const Tensor out = run_backend(ExpertsInterface::global().get("eager"), place(p, Device::kCPU));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] += static_cast<const float*>(out.data())[i];
    }
    Tensor got(DType::kF32, {full.T(), full.H()});
    for (size_t i = 0; i < sum.size(); ++i) static_cast<float*>(got.data())[i] = float(sum[i]);
    EXPECT_TRUE(outputs_close(got.view(), reference_of(full)));
}

}  // namespace
}  // namespace moex::test
