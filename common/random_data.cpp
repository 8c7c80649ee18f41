// Random tensors and uniform top-k routing for `moex experts make-problem` and `moex bench`.
// splitmix64 streams, one per 1 Mi-element chunk, so the bytes do not depend on the thread count.
#include "common/random_data.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "moex/error.h"
#include "moex/experts.h"

namespace moex::common {
namespace {

constexpr int64_t kChunk = int64_t(1) << 20;

struct SplitMix {
    uint64_t s;
    uint64_t next() {
        uint64_t z = (s += 0x9e3779b97f4a7c15ull);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        return z ^ (z >> 31);
    }
    double uniform() { return double(next() >> 11) * 0x1.0p-53; }               // [0, 1)
    double uniform_open() { return (double(next() >> 11) + 0.5) * 0x1.0p-53; }  // (0, 1)
    double normal() {                                                           // Box-Muller, one of the pair
        return std::sqrt(-2.0 * std::log(uniform_open())) * std::cos(6.283185307179586 * uniform());
    }
};

void store(const TensorView& t, int64_t i, double v) {
    switch (t.dtype) {
        case DType::kBF16: t.ptr<uint16_t>()[i] = f32_to_bf16(float(v)); break;
        case DType::kF16: t.ptr<uint16_t>()[i] = f32_to_f16(float(v)); break;
        case DType::kF32: t.ptr<float>()[i] = float(v); break;
        case DType::kF64: t.ptr<double>()[i] = v; break;
        default:
            fail(ErrorCode::kInvalidArgument, "fill_random: not a float dtype: " + std::string(dtype_name(t.dtype)));
    }
}

void fill_chunk(const TensorView& t, int64_t chunk, double std, uint64_t seed, Distribution dist) {
    SplitMix rng{mix_seed(seed, uint64_t(chunk))};
    const int64_t end = std::min(t.numel(), (chunk + 1) * kChunk);
    const double a = std * std::sqrt(3.0);
    if (dist == Distribution::kUniform && t.dtype == DType::kBF16) {  // the hot case of the benchmark: keep it cheap
        uint16_t* p = t.ptr<uint16_t>();
        for (int64_t i = chunk * kChunk; i < end; ++i) p[i] = f32_to_bf16(float(a * (2.0 * rng.uniform() - 1.0)));
        return;
    }
    for (int64_t i = chunk * kChunk; i < end; ++i)
        store(t, i, dist == Distribution::kNormal ? std * rng.normal() : a * (2.0 * rng.uniform() - 1.0));
}

}  // namespace

uint64_t mix_seed(uint64_t a, uint64_t b) {
    SplitMix m{a * 0xd1342543de82ef95ull + b};
    return m.next();
}

void fill_random(const TensorView& t, double std, uint64_t seed, Distribution dist, int num_threads) {
    MOEX_REQUIRE(t.device == Device::kCPU && t.is_contiguous(), ErrorCode::kInvalidArgument,
                 "fill_random needs a contiguous host tensor");
    MOEX_REQUIRE(is_float_activation(t.dtype) || t.dtype == DType::kF64, ErrorCode::kInvalidArgument,
                 "fill_random: not a float dtype: " + std::string(dtype_name(t.dtype)));
    const int64_t chunks = (t.numel() + kChunk - 1) / kChunk;
    int threads = num_threads > 0 ? num_threads : int(std::max(1u, std::thread::hardware_concurrency()));
    threads = int(std::min<int64_t>(threads, chunks));
    if (threads <= 1) {
        for (int64_t c = 0; c < chunks; ++c) fill_chunk(t, c, std, seed, dist);
        return;
    }
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w)
        pool.emplace_back([&, w] {
            for (int64_t c = w; c < chunks; c += threads) fill_chunk(t, c, std, seed, dist);
        });
    for (auto& th : pool) th.join();
}

void random_routing(const TensorView& index, const TensorView& weights, int64_t E, uint64_t seed) {
    MOEX_REQUIRE(index.ndim == 2 && weights.ndim == 2 && index.shape[0] == weights.shape[0] &&
                     index.shape[1] == weights.shape[1] && index.is_contiguous() && weights.is_contiguous(),
                 ErrorCode::kInvalidArgument, "random_routing: index and weights must be contiguous (T, k)");
    MOEX_REQUIRE(index.dtype == DType::kI32 || index.dtype == DType::kI64, ErrorCode::kInvalidArgument,
                 "random_routing: index must be int32 or int64");
    const int64_t T = index.shape[0], k = index.shape[1];
    MOEX_REQUIRE(k >= 1 && k <= E, ErrorCode::kInvalidArgument,
                 "top-k " + std::to_string(k) + " must lie in [1, E = " + std::to_string(E) + "]");
    SplitMix rng{mix_seed(seed, 0x726f757465ull)};
    std::vector<int64_t> chosen(static_cast<size_t>(k));
    std::vector<double> logits(static_cast<size_t>(k));
    for (int64_t t = 0; t < T; ++t) {
        // Floyd's algorithm: a uniformly random k-subset of [0, E) in k draws.
        for (int64_t j = 0, n = E - k; j < k; ++j, ++n) {
            const int64_t r = int64_t(rng.next() % uint64_t(n + 1));
            const bool seen = std::find(chosen.begin(), chosen.begin() + j, r) != chosen.begin() + j;
            chosen[size_t(j)] = seen ? n : r;
        }
        double mx = -1e300, sum = 0;
        for (auto& l : logits) mx = std::max(mx, l = rng.normal());
        for (auto& l : logits) sum += (l = std::exp(l - mx));
        for (int64_t j = 0; j < k; ++j) {
            const int64_t off = t * k + j;
            if (index.dtype == DType::kI64)
                index.ptr<int64_t>()[off] = chosen[size_t(j)];
            else
                index.ptr<int32_t>()[off] = int32_t(chosen[size_t(j)]);
            store(weights, off, logits[size_t(j)] / sum);
        }
    }
}

int64_t count_touched_experts(const TensorView& index, int64_t E) {
    std::vector<char> hit(static_cast<size_t>(std::max<int64_t>(E, 0)), 0);
    int64_t n = 0;
    for (int64_t t = 0; t < index.shape[0]; ++t)
        for (int64_t j = 0; j < index.shape[1]; ++j) {
            const int64_t e = expert_id(index, t, j);
            if (e >= 0 && e < E && !hit[size_t(e)]) hit[size_t(e)] = 1, ++n;
        }
    return n;
}

}  // namespace moex::common
