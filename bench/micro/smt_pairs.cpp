// Which logical CPUs share a physical core, measured rather than read from lscpu (a VM's topology is whatever its
// hypervisor reports): two threads pinned to CPU 0 and CPU j each run independent FMA chains that keep a core's FMA
// units busy. Alone, each CPU runs at rate 1; if CPU j is CPU 0's hyper-thread sibling, the pair shares those units
// and each thread runs at ~0.5. Issue #15 item 3's efficiency at 16 threads means nothing on 8 cores of 2 threads.
// Usage: moex_smt_pairs [seconds per measurement = 0.2] [first CPU = 0]; prints one line per CPU j.
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

// Twelve independent chains of 8-lane FMAs for `seconds`: giga-FMA-instructions per second.
__attribute__((target("avx2,fma"))) double fma_rate(double seconds, const std::atomic<bool>& go) {
    while (!go.load(std::memory_order_acquire)) {
    }
    __m256 c[12];
    for (int i = 0; i < 12; ++i) c[i] = _mm256_set1_ps(1.0f + 1e-7f * float(i));
    const __m256 m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    long n = 0;
    const auto t0 = Clock::now();
    double dt = 0;
    do {
        for (int it = 0; it < 4096; ++it)
            for (int i = 0; i < 12; ++i) c[i] = _mm256_fmadd_ps(c[i], m, a);
        n += 4096 * 12;
        dt = std::chrono::duration<double>(Clock::now() - t0).count();
    } while (dt < seconds);
    float sink = 0;
    for (int i = 0; i < 12; ++i) sink += _mm256_cvtss_f32(c[i]);
    if (sink == 12345.0f) std::puts("");  // keeps the chains alive
    return double(n) / dt * 1e-9;
}

bool pin(int cpu) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// Rates of threads pinned to `cpus`, run together.
std::vector<double> run(const std::vector<int>& cpus, double seconds) {
    std::vector<double> rate(cpus.size(), -1.0);
    std::atomic<bool> go{false};
    std::vector<std::thread> threads;
    for (size_t i = 0; i < cpus.size(); ++i)
        threads.emplace_back([&, i] {
            if (pin(cpus[i])) rate[i] = fma_rate(seconds, go);
        });
    go.store(true, std::memory_order_release);
    for (auto& t : threads) t.join();
    return rate;
}

}  // namespace

int main(int argc, char** argv) {
    const double seconds = argc > 1 ? std::atof(argv[1]) : 0.2;
    const int first = argc > 2 ? std::atoi(argv[2]) : 0;
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
        std::fprintf(stderr, "moex_smt_pairs: needs AVX2 + FMA\n");
        return 1;
    }
    const int ncpu = int(std::thread::hardware_concurrency());
    const double alone = run({first}, seconds)[0];
    if (alone <= 0) {
        std::fprintf(stderr, "moex_smt_pairs: cannot pin to CPU %d\n", first);
        return 1;
    }
    std::printf("CPU %d alone: %.2f G FMA instructions/s\n", first, alone);
    std::printf("pair        rate of %d   rate of j   (each / alone; ~0.5 = one core's two hyper-threads)\n", first);
    for (int j = 0; j < ncpu; ++j) {
        if (j == first) continue;
        const std::vector<double> r = run({first, j}, seconds);
        if (r[1] <= 0) {
            std::printf("%3d + %3d   cannot pin\n", first, j);
            continue;
        }
        std::printf("%3d + %3d   %.2f        %.2f        %s\n", first, j, r[0] / alone, r[1] / alone,
                    r[0] / alone < 0.75 ? "shared core" : "own core");
    }
    return 0;
}
