// libFuzzer target for model.safetensors.index.json: the input is written as the index of a scratch checkpoint
// directory holding two small shards (model-00001-of-00002.safetensors: `a`, `b`; model-00002-of-00002: `c`), then
// read the way the loader reads it: every shard path checked, every listed shard opened and checked against the
// index, a few tensors looked up. Shard paths that are absolute or contain ".." are refused before anything is
// opened, so the target only ever opens files inside its own directory.
// A moex::Error is a clean rejection; a crash, sanitizer report or trap is a finding.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

#include "moex/error.h"
#include "moex/safetensors.h"
#include "src/model/weights/files.h"

namespace {

// A scratch directory with the two shards, made once per process and removed at exit.
const std::string& scratch_dir() {
    static const std::string dir = [] {
        // In memory where there is a tmpfs: the index is rewritten for every input.
        std::string tmpl =
            ::access("/dev/shm", W_OK) == 0 ? "/dev/shm/moex_fuzz_index_XXXXXX" : "/tmp/moex_fuzz_index_XXXXXX";
        if (::mkdtemp(tmpl.data()) == nullptr) std::abort();
        const std::string d = tmpl.c_str();
        const uint8_t four[4] = {1, 2, 3, 4};
        moex::write_safetensors(d + "/model-00001-of-00002.safetensors",
                                {{"a", "F32", {1}, four}, {"b", "U8", {4}, four}});
        moex::write_safetensors(d + "/model-00002-of-00002.safetensors", {{"c", "I32", {1}, four}});
        static const std::string copy = d;
        std::atexit([] {
            for (const char* f : {"/model-00001-of-00002.safetensors", "/model-00002-of-00002.safetensors",
                                  "/model.safetensors.index.json"})
                ::unlink((copy + f).c_str());
            ::rmdir(copy.c_str());
        });
        return d;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string& dir = scratch_dir();
    {
        std::ofstream out(dir + "/model.safetensors.index.json", std::ios::binary | std::ios::trunc);
        out.write(reinterpret_cast<const char*>(data), std::streamsize(size));
    }
    try {
        moex::model::CheckpointFiles files(dir);
        (void)files.searched();
        for (const char* name : {"a", "c", "model.embed_tokens.weight"}) {
            if (auto found = files.find(name)) {
                if (found->info->name != name) __builtin_trap();
            }
        }
        const std::vector<std::string> names = files.all_names();
        for (const std::string& n : names)
            if (n != "a" && n != "b" && n != "c") __builtin_trap();  // every listed tensor is in its shard
    } catch (const moex::Error&) {
    }
    return 0;
}
