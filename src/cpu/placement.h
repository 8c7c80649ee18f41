// Where the CPU pool's threads run when pinning is asked for (MOEX_CPU_PIN=1): one logical CPU per physical core of
// the process's affinity mask first, in (package, core) order, then the SMT siblings. Thread w of the pool (0: the
// thread that submits the work) runs on entry w % size of that order, so n threads fill n distinct cores of one
// package before the next, and each thread's scratch (parallel.h thread_scratch) is first touched, hence allocated,
// on its own core's NUMA node.
#pragma once

#include <string>
#include <vector>

namespace moex::cpu {

struct LogicalCpu {
    int id = 0, package = 0, core = 0;
};

// The order above for these CPUs (pure; the tests give it made-up topologies).
std::vector<int> placement_order(std::vector<LogicalCpu> cpus);
// The CPUs of this process's affinity mask with their package and core ids from sysfs (Linux; elsewhere empty).
std::vector<LogicalCpu> allowed_cpus();
// MOEX_CPU_PIN=1 (read once).
bool pinning_requested();
// Pins the calling thread to pool slot `w` when pinning is requested; returns the CPU, or -1 when not pinned.
int pin_thread_slot(int w);
// One line for reports: "off", or "on: CPUs 0,2,4,..." in slot order.
std::string pinning_summary();

}  // namespace moex::cpu
