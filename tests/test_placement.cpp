// The CPU pool's thread placement (src/cpu/placement.h): the order on made-up topologies, and, under MOEX_CPU_PIN=1
// (CTest's pinned: registration), that the pool's threads really run pinned one per CPU of that order.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <set>
#include <vector>

#include "src/cpu/parallel.h"
#include "src/cpu/placement.h"

namespace moex::cpu {
namespace {

TEST(CpuPlacement, OneCpuPerCoreFirstThenSiblingsPackageByPackage) {
    // 2 packages x 2 cores x 2 SMT siblings, listed in the interleaved order Linux often numbers them.
    std::vector<LogicalCpu> cpus;
    int id = 0;
    for (int smt = 0; smt < 2; ++smt)
        for (int pkg = 0; pkg < 2; ++pkg)
            for (int core = 0; core < 2; ++core) cpus.push_back({id++, pkg, core});
    // ids: smt 0 -> 0 (p0c0) 1 (p0c1) 2 (p1c0) 3 (p1c1); smt 1 -> 4 5 6 7 likewise.
    EXPECT_EQ(placement_order(cpus), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
    std::reverse(cpus.begin(), cpus.end());  // the input order does not matter
    EXPECT_EQ(placement_order(cpus), (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(CpuPlacement, SparseAffinityMaskAndNoCpus) {
    // A mask of CPUs 3, 9, 10 where 9 and 3 are siblings of core 1.
    EXPECT_EQ(placement_order({{10, 0, 2}, {9, 0, 1}, {3, 0, 1}}), (std::vector<int>{3, 10, 9}));
    EXPECT_TRUE(placement_order({}).empty());
}

TEST(CpuPlacement, PoolThreadsRunWhereTheSummarySays) {
    const std::vector<LogicalCpu> allowed = allowed_cpus();
    if (!pinning_requested()) {
        EXPECT_EQ(pinning_summary(), "off");
        GTEST_SKIP() << "MOEX_CPU_PIN is not 1 (CTest's pinned: registration sets it)";
    }
    ASSERT_FALSE(allowed.empty());
    const std::vector<int> order = placement_order(allowed);
    const int threads = static_cast<int>(std::min<size_t>(order.size(), 4));
    // Long enough tasks that every worker takes some; each records the CPU it ran on.
    std::mutex mu;
    std::set<int> seen;
    std::atomic<uint32_t> sink{0};
    parallel_for(64, threads, [&](int64_t) {
        uint32_t acc = 0;  // unsigned: wraps, no overflow
        for (uint32_t i = 0; i < 2000000; ++i) acc += i ^ sink.load(std::memory_order_relaxed);
        sink.fetch_add(acc & 1u, std::memory_order_relaxed);
        std::lock_guard<std::mutex> lock(mu);
        seen.insert(sched_getcpu());
    });
    const std::set<int> allowed_slots(order.begin(), order.begin() + threads);
    for (int c : seen) EXPECT_TRUE(allowed_slots.count(c)) << "a pool thread ran on CPU " << c;
    EXPECT_NE(pinning_summary().find("on: CPUs"), std::string::npos);
}

}  // namespace
}  // namespace moex::cpu
