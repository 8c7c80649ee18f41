// moex_ep_check: every backend inside an EP group against a single-device run of the same problem, per dtype and
// combine mode; rank 0 prints one line each (BITWISE or max|d|/rms). Under scripts/ep_launch.sh it uses NCCL and one
// GPU per rank; started alone it simulates --ranks R (default 2) in-memory ranks on the CPU.
#include <cstdio>
#include <string>
#include <thread>

#include "moex/device.h"
#include "tools/ep/ep_problem.h"

namespace {

using namespace moex;
using ep_tools::rows_of;

struct Compare {
    bool bitwise = true;
    double rel = 0;  // max |ep - single| / rms(single)
};

Compare compare(const Tensor& a, const Tensor& b) {
    Compare c;
    c.bitwise = a.nbytes() == b.nbytes() && std::memcmp(a.data(), b.data(), size_t(a.nbytes())) == 0;
    const int64_t n = a.view().numel();
    auto at = [](const Tensor& t, int64_t i) {
        return t.view().dtype == DType::kF32 ? double(static_cast<const float*>(t.data())[i])
                                             : double(bf16_to_f32(static_cast<const uint16_t*>(t.data())[i]));
    };
    double rms = 0, md = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double x = at(a, i), y = at(b, i);
        rms += y * y;
        md = std::isfinite(x) ? std::max(md, std::fabs(x - y)) : INFINITY;
    }
    c.rel = md / (std::sqrt(rms / double(n > 0 ? n : 1)) + 1e-30);
    return c;
}

// Returns the number of failed lines (rank 0's count; every rank computes the same aggregate).
int check_rank(Transport& tr, Device dev, int64_t T) {
    const int R = tr.size(), rank = tr.rank();
    const int64_t H = 256, I = 128, E = 16, k = 4;
    const int64_t t0 = T * rank / R, t1 = T * (rank + 1) / R;
    const EpShard shard = make_ep_shard(E, R, rank);
    int failures = 0;
    if (rank == 0) std::printf("%-18s %-6s %-6s %-10s %s\n", "backend", "dtype", "combine", "vs_single", "verdict");
    for (DType dt : {DType::kF32, DType::kBF16}) {
        ep_tools::FullProblem f = ep_tools::make_full_problem(T, H, I, E, k, dt, 7);
        for (int64_t t = 2; t < T; t += 7) static_cast<int32_t*>(f.ids.data())[t * k + 3] = int32_t(E);  // sentinels
        std::vector<DeviceTensor> keep;
        auto place = [&](const TensorView& v) { return keep.emplace_back(DeviceTensor::from_host(v, dev)).view(); };
        ExpertsProblem full = f.problem;
        full.hidden_states = place(f.problem.hidden_states), full.top_k_index = place(f.problem.top_k_index);
        full.top_k_weights = place(f.problem.top_k_weights), full.gate_up_proj = place(f.problem.gate_up_proj);
        full.down_proj = place(f.problem.down_proj);
        const int64_t shape_full[2] = {T, H}, shape_mine[2] = {t1 - t0, H};
        for (const std::string& name : ExpertsInterface::global().names()) {
            const Backend& b = ExpertsInterface::global().get(name);
            if (b.unavailable(dev) || b.why_not(full)) continue;  // same answer on every rank
            RunOptions ro{.num_threads = dev == Device::kCPU ? 1 : 0, .cuda_stream = tr.stream()};
            DeviceTensor single(dt, shape_full, 2, dev);
            b.run(full, single.view(), ro);
            Tensor single_h(dt, {T, H}), mine_single(dt, {t1 - t0, H});
            single.copy_to_host(single_h.view());
            if (t1 > t0)
                std::memcpy(mine_single.data(), rows_of(single_h.view(), t0, t1).data, size_t(mine_single.nbytes()));
            for (EpCombine mode : {EpCombine::kSlotOrder, EpCombine::kRankOrder}) {
                ExpertsProblem local = shard_experts(full, shard);
                local.hidden_states = rows_of(full.hidden_states, t0, t1);
                local.top_k_index = rows_of(full.top_k_index, t0, t1);
                local.top_k_weights = rows_of(full.top_k_weights, t0, t1);
                DeviceTensor out(dt, shape_mine, 2, dev);
                out.fill_bytes(0xff);
                EpRunner runner(tr, shard);
                runner.run(local, out.view(), EpOptions{.backend = name, .combine = mode, .run = ro});
                Tensor got(dt, {t1 - t0, H});
                out.copy_to_host(got.view());
                const Compare c = compare(got, mine_single);
                const bool all_bitwise = ep_tools::max_over_ranks(tr, c.bitwise ? 0.0 : 1.0) == 0.0;
                const double rel = ep_tools::max_over_ranks(tr, c.rel);
                // The slot-order combine reproduces the single run's f32 bytes where the backend's own combine is
                // "acc += w * y" in slot order (CPU: all; CUDA: eager). CUDA batched_mm and grouped_mm fold w into the
                // down projection's epilogue, so their slot terms round differently (measured 2-3e-6 rel on 2 H200s).
                const bool want_bitwise =
                    mode == EpCombine::kSlotOrder && dt == DType::kF32 && (dev == Device::kCPU || name == "eager");
                // bf16: the EP and single results are each rounded once from f32 sums that differ by a bf16 rounding
                // of the slot (or rank) terms: a few ulps (2^-8) of the largest values, which reach ~4x the rms.
                const double tol = dt == DType::kF32 ? 1e-4 : 6e-2;
                const bool ok = want_bitwise ? all_bitwise : rel <= tol;
                failures += ok ? 0 : 1;
                if (rank == 0) {
                    char v[32];
                    std::snprintf(v, sizeof v, "%.2e", rel);
                    std::printf("%-18s %-6s %-6s %-10s %s\n", name.c_str(), dt == DType::kF32 ? "f32" : "bf16",
                                mode == EpCombine::kSlotOrder ? "slot" : "rank", all_bitwise ? "BITWISE" : v,
                                ok ? (want_bitwise ? "PASS (bitwise expected)" : "PASS") : "FAIL");
                    std::fflush(stdout);
                }
            }
        }
    }
    return failures;
}

}  // namespace

int main(int argc, char** argv) {
    int64_t T = 301;  // odd, so that the ranks' token counts differ
    int ranks = 2;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--tokens"))
            T = std::atoll(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--ranks"))
            ranks = std::atoi(argv[i + 1]);
    }
    try {
        if (ep_tools::launched_by_ep_launch()) {
            auto tr = make_nccl_transport_from_env();
            if (tr->rank() == 0) std::printf("moex_ep_check: NCCL, %d ranks, T = %lld\n", tr->size(), (long long)T);
            const int failures = check_rank(*tr, Device::kCUDA, T);
            if (tr->rank() == 0) std::printf("moex_ep_check: %d failure(s)\n", failures);
            return failures == 0 ? 0 : 1;
        }
        std::printf("moex_ep_check: in-memory transport, %d CPU ranks, T = %lld\n", ranks, (long long)T);
        auto trs = make_memory_transports(ranks);
        std::vector<int> failures(static_cast<size_t>(ranks));
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    failures[size_t(r)] = check_rank(*trs[size_t(r)], Device::kCPU, T);
                } catch (const std::exception& e) {  // e.g. 16 experts on 3 ranks: the same error on every rank
                    if (r == 0) std::fprintf(stderr, "moex_ep_check: %s\n", e.what());
                    failures[size_t(r)] = -1;
                }
            });
        for (auto& t : threads) t.join();
        if (failures[0] < 0) return 2;
        std::printf("moex_ep_check: %d failure(s)\n", failures[0]);
        return failures[0] == 0 ? 0 : 1;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moex_ep_check: %s\n", e.what());
        return 2;
    }
}
