// libFuzzer target for the problem-file reader: arbitrary bytes as a safetensors image, read as an experts problem
// (tensors, flags, quantized weights and their scales). What the reader accepts must pass the experts contract
// again (validate() throwing then is a finding: the reader let through what a backend would refuse).
// A moex::Error from the reader is a clean rejection; a crash, sanitizer report or trap is a finding.
#include <cstddef>
#include <cstdint>
#include <optional>

#include "moex/error.h"
#include "moex/problem_file.h"
#include "moex/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    std::optional<moex::ProblemFile> p;
    try {
        p.emplace(moex::problem_from_safetensors(moex::SafetensorsFile::from_memory(data, size, "fuzz input")));
    } catch (const moex::Error&) {
        return 0;
    }
    try {
        p->problem.validate();
    } catch (const moex::Error&) {
        __builtin_trap();
    }
    if (p->problem.T() < 0) __builtin_trap();
    return 0;
}
