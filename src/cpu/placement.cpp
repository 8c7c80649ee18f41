// Thread placement for the CPU pool (placement.h).
#include "src/cpu/placement.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <tuple>
#include <utility>
#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace moex::cpu {
namespace {

int read_sysfs_int(int cpu, const char* leaf, int fallback) {
    std::ifstream f("/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/" + leaf);
    int v = fallback;
    if (!(f >> v)) return fallback;
    return v;
}

const std::vector<int>& order() {
    static const std::vector<int> o = placement_order(allowed_cpus());
    return o;
}

}  // namespace

std::vector<int> placement_order(std::vector<LogicalCpu> cpus) {
    std::sort(cpus.begin(), cpus.end(), [](const LogicalCpu& a, const LogicalCpu& b) {
        return std::make_tuple(a.package, a.core, a.id) < std::make_tuple(b.package, b.core, b.id);
    });
    // Rank of each CPU among the siblings of its core: rank 0 (one per core) first, then rank 1, ...
    std::map<std::pair<int, int>, int> seen;
    std::vector<std::pair<int, int>> ranked;  // (rank, position in the sorted list)
    for (size_t i = 0; i < cpus.size(); ++i)
        ranked.emplace_back(seen[{cpus[i].package, cpus[i].core}]++, static_cast<int>(i));
    std::stable_sort(ranked.begin(), ranked.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<int> out;
    out.reserve(ranked.size());
    for (const auto& r : ranked) out.push_back(cpus[size_t(r.second)].id);
    return out;
}

std::vector<LogicalCpu> allowed_cpus() {
    std::vector<LogicalCpu> cpus;
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
    for (int c = 0; c < CPU_SETSIZE; ++c) {
        if (!CPU_ISSET(c, &set)) continue;
        cpus.push_back(LogicalCpu{c, read_sysfs_int(c, "physical_package_id", 0), read_sysfs_int(c, "core_id", c)});
    }
#endif
    return cpus;
}

bool pinning_requested() {
    static const bool on = [] {
        const char* v = std::getenv("MOEX_CPU_PIN");
        return v != nullptr && std::strcmp(v, "1") == 0;
    }();
    return on;
}

int pin_thread_slot(int w) {
    if (!pinning_requested() || order().empty() || w < 0) return -1;
    const int cpu = order()[size_t(w) % order().size()];
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0) return -1;
    return cpu;
#else
    return -1;
#endif
}

std::string pinning_summary() {
    if (!pinning_requested()) return "off";
    if (order().empty()) return "requested, but this system gives no CPU list";
    std::string s = "on: CPUs";
    for (size_t i = 0; i < order().size(); ++i) {
        s += i ? ',' : ' ';
        s += std::to_string(order()[i]);
    }
    return s;
}

}  // namespace moex::cpu
