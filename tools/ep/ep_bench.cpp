// moex_ep_bench: one EP experts call per rank at deepseek-v3 shapes (H 7168, I 2048, E 256, k 8, bf16): tokens/s and
// the dispatch / combine bandwidth (bytes leaving each rank / phase time, max over ranks) against DeepEP's intranode
// 153 / 158 GB/s. Run under scripts/ep_launch.sh (NCCL, one GPU per rank); rank 0 prints the table.
#include <algorithm>
#include <cstdio>
#include <string>

#include "moex/device.h"
#include "tools/ep/ep_problem.h"
#if MOEX_WITH_CUDA
#include "cuda/common/memory.h"
#endif

namespace {

using namespace moex;

#if MOEX_WITH_CUDA

// Expert weights (E_loc, ...) filled on the device from one random 64 MiB host block repeated: realistic values
// without drawing ~5.6G numbers on the host.
DeviceTensor device_weights(DType dt, std::initializer_list<int64_t> shape, float scale, uint64_t seed) {
    const std::vector<int64_t> s(shape);
    DeviceTensor t(dt, s.data(), int(s.size()), Device::kCUDA);
    const int64_t total = t.view().nbytes(), block = std::min<int64_t>(total, int64_t(64) << 20);
    Tensor host(dt, {block / 2});
    common::fill_random(host.view(), scale, seed, common::Distribution::kUniform);
    for (int64_t off = 0; off < total; off += block)
        cuda::copy_to_device(static_cast<char*>(t.view().data) + off, host.data(),
                             size_t(std::min(block, total - off)));
    return t;
}
#endif

}  // namespace

int main(int argc, char** argv) {
    std::vector<int64_t> tokens = {512, 4096};
    std::string backend = "grouped_mm";
    int reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--backend"))
            backend = argv[i + 1];
        else if (!std::strcmp(argv[i], "--reps"))
            reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--tokens")) {
            tokens.clear();
            for (char* p = argv[i + 1]; *p;) {
                tokens.push_back(std::strtoll(p, &p, 10));
                if (*p == ',') ++p;
            }
        }
    }
#if !MOEX_WITH_CUDA
    std::fprintf(stderr, "moex_ep_bench: this build has no CUDA\n");
    return 2;
#else
    if (!ep_tools::launched_by_ep_launch()) {
        std::fprintf(stderr, "moex_ep_bench: start it with scripts/ep_launch.sh N build/moex_ep_bench (NCCL, GPUs)\n");
        return 2;
    }
    try {
        auto tr = make_nccl_transport_from_env();
        const int R = tr->size(), rank = tr->rank();
        const int64_t H = 7168, I = 2048, E = 256, k = 8;
        const DType dt = DType::kBF16;
        const EpShard shard = make_ep_shard(E, R, rank);
        DeviceTensor up = device_weights(dt, {shard.local(), 2 * I, H}, 1.0f / std::sqrt(float(H)), 11 + rank);
        DeviceTensor down = device_weights(dt, {shard.local(), H, I}, 1.0f / std::sqrt(float(I)), 23 + rank);
        if (rank == 0)
            std::printf(
                "moex_ep_bench: deepseek-v3 experts (H %lld, I %lld, E %lld, k %lld, bf16), %d ranks (NCCL), "
                "backend %s, median of %d\n",
                (long long)H, (long long)I, (long long)E, (long long)k, R, backend.c_str(), reps);
        if (rank == 0)
            std::printf("%-6s %-5s %9s %9s %9s %9s %12s %10s %10s %12s %12s\n", "T/rank", "comb", "disp_us", "comp_us",
                        "comb_us", "total_us", "tokens/s", "disp_GB/s", "comb_GB/s", "DeepEP_disp", "DeepEP_comb");
        for (int64_t T : tokens) {
            ep_tools::FullProblem f = ep_tools::make_full_problem(T, H, I, E, k, dt, 1000 + uint64_t(rank), false);
            DeviceTensor x = DeviceTensor::from_host(f.x.view(), Device::kCUDA);
            DeviceTensor ids = DeviceTensor::from_host(f.ids.view(), Device::kCUDA);
            DeviceTensor w = DeviceTensor::from_host(f.w.view(), Device::kCUDA);
            ExpertsProblem p;
            p.hidden_states = x.view(), p.top_k_index = ids.view(), p.top_k_weights = w.view();
            p.gate_up_proj = up.view(), p.down_proj = down.view();
            const int64_t shape[2] = {T, H};
            DeviceTensor out(dt, shape, 2, Device::kCUDA);
            for (EpCombine mode : {EpCombine::kRankOrder, EpCombine::kSlotOrder}) {
                EpRunner runner(*tr, shard);
                const EpOptions o{.backend = backend, .combine = mode};
                std::vector<EpStats> st;
                for (int r = 0; r < reps + 2; ++r) {
                    EpStats s = runner.run(p, out.view(), o);
                    if (r >= 2) st.push_back(s);  // 2 warm-ups: workspace growth, NCCL connection setup
                }
                auto median = [&](auto get) {
                    std::vector<double> v;
                    for (const EpStats& s : st) v.push_back(get(s));
                    std::sort(v.begin(), v.end());
                    return ep_tools::max_over_ranks(*tr, v[v.size() / 2]);
                };
                const double d = median([](const EpStats& s) { return s.dispatch_s; });
                const double c = median([](const EpStats& s) { return s.compute_s; });
                const double b = median([](const EpStats& s) { return s.combine_s; });
                const double db = ep_tools::max_over_ranks(*tr, double(st[0].dispatch_bytes));
                const double cb = ep_tools::max_over_ranks(*tr, double(st[0].combine_bytes));
                if (rank == 0)
                    std::printf("%-6lld %-5s %9.1f %9.1f %9.1f %9.1f %12.0f %10.1f %10.1f %12s %12s\n", (long long)T,
                                mode == EpCombine::kSlotOrder ? "slot" : "rank", d * 1e6, c * 1e6, b * 1e6,
                                (d + c + b) * 1e6, double(T * R) / (d + c + b), db / d * 1e-9, cb / b * 1e-9,
                                "153 (fp8)", "158 (bf16)");
            }
        }
        if (rank == 0)
            std::printf(
                "GB/s = bytes leaving the rank / phase wall time (incl. host plan, packing, syncs); moex "
                "dispatch sends bf16 rows + ids/weights, DeepEP fp8 rows at EP8 on H800.\n");
        return 0;
    } catch (const std::exception& e) {
        std::fprintf(stderr, "moex_ep_bench: %s\n", e.what());
        return 2;
    }
#endif
}
