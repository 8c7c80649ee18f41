// libFuzzer target for the safetensors reader: validates arbitrary bytes, reads every tensor (info, bytes, view),
// checks that an accepted file survives a write/read round trip unchanged, then tries it as a problem file.
// A moex::Error is a clean rejection; a crash, sanitizer report or trap is a finding.
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "moex/error.h"
#include "moex/problem_file.h"
#include "moex/safetensors.h"

namespace {

void require(bool ok) {
    if (!ok) __builtin_trap();
}

// Touches every byte of each tensor so that AddressSanitizer sees any range that leaves the input.
uint64_t read_all(const moex::SafetensorsFile& f, const uint8_t* data, size_t size) {
    uint64_t sum = 0;
    for (const std::string& name : f.names()) {
        const moex::SafetensorsInfo& info = f.info(name);
        const std::span<const uint8_t> bytes = f.bytes(name);
        require(bytes.size() == info.nbytes());
        require(bytes.empty() || (bytes.data() >= data && bytes.data() + bytes.size() <= data + size));
        for (uint8_t b : bytes) sum += b;
        try {
            const moex::TensorView v = f.view(name);
            require(uint64_t(v.nbytes()) == info.nbytes() && v.is_contiguous());
            require(reinterpret_cast<uintptr_t>(v.data) % uintptr_t(moex::dtype_size(v.dtype)) == 0);
            require(v.nbytes() == 0 || std::memcmp(v.data, bytes.data(), bytes.size()) == 0);
        } catch (const moex::Error& e) {
            require(e.code() == moex::ErrorCode::kUnsupported || e.code() == moex::ErrorCode::kOverflow);
        }
    }
    return sum;
}

// What the reader accepted, the writer must write and the reader accept again with the same content.
void round_trip(const moex::SafetensorsFile& f) {
    std::vector<moex::SafetensorsEntry> entries;
    for (const std::string& name : f.names()) {
        const moex::SafetensorsInfo& info = f.info(name);
        entries.push_back({name, info.dtype, info.shape, f.bytes(name)});
    }
    try {
        const std::vector<uint8_t> image = moex::serialize_safetensors(entries, f.metadata());
        const moex::SafetensorsFile g = moex::SafetensorsFile::from_memory(image.data(), image.size(), "round trip");
        require(g.names().size() == f.names().size() && g.metadata() == f.metadata());
        for (const std::string& name : f.names()) {
            const moex::SafetensorsInfo &a = f.info(name), &b = g.info(name);
            require(a.dtype == b.dtype && a.shape == b.shape && a.nbytes() == b.nbytes());
            require(a.nbytes() == 0 || std::memcmp(f.bytes(name).data(), g.bytes(name).data(), a.nbytes()) == 0);
        }
    } catch (const moex::Error&) {
        __builtin_trap();  // the writer refused, or the reader rejected the writer's output
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        moex::SafetensorsFile f = moex::SafetensorsFile::from_memory(data, size, "fuzz input");
        static volatile uint64_t sink;
        sink = read_all(f, data, size);
        round_trip(f);
        const moex::ProblemFile p = moex::problem_from_safetensors(std::move(f));
        require(p.problem.T() >= 0);
    } catch (const moex::Error&) {
    }
    return 0;
}
