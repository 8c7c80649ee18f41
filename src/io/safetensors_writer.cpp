// The safetensors writer: checks the entries, lays tensors out like the reference writer (descending dtype, then
// name, so every tensor is aligned to its element size), pads the header to 8 bytes and writes atomically.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "moex/error.h"
#include "moex/safetensors.h"
#include "src/io/safetensors_header.h"

namespace moex {
namespace {

[[noreturn]] void bad(const std::string& where, const std::string& msg) {
    fail(ErrorCode::kInvalidArgument, where + ": " + msg);
}

[[noreturn]] void too_large(const std::string& where) {
    bad(where, "the header would exceed the " + std::to_string(kSafetensorsMaxHeaderBytes) +
                   "-byte limit readers enforce (too many tensors or too much metadata)");
}

// The file a write to `path` replaces: `path` itself when it is absent or a regular file, the regular file a symlink
// at `path` names (the link stays a link). Anything else is refused before a byte is written: the write renames a
// temporary file into place, which would turn a FIFO or a device node into a regular file (as root, /dev/null).
std::string write_target(const std::string& path) {
    struct stat st {};
    if (::lstat(path.c_str(), &st) != 0) return path;  // absent (or unreachable: creating the file says why)
    if (S_ISREG(st.st_mode)) return path;
    if (!S_ISLNK(st.st_mode))
        fail(ErrorCode::kIo,
             path + ": is " + io::file_kind(st.st_mode) + "; moex writes only to a regular file or a new path");
    if (::stat(path.c_str(), &st) != 0)
        fail(ErrorCode::kIo,
             path + ": is a symlink to a missing file; moex writes only to a regular file or a new path");
    if (!S_ISREG(st.st_mode))
        fail(ErrorCode::kIo, path + ": is a symlink to " + io::file_kind(st.st_mode) +
                                 "; moex writes only to a regular file or a new path");
    char resolved[PATH_MAX];
    if (::realpath(path.c_str(), resolved) == nullptr)
        fail(ErrorCode::kIo, path + ": cannot resolve the symlink: " + std::strerror(errno));
    return resolved;
}

std::string json_string(std::string_view s) { return nlohmann::json(std::string(s)).dump(); }

struct Plan {
    std::string header;  // padded JSON
    std::vector<const SafetensorsEntry*> order;
    uint64_t data_bytes = 0;
};

void check_entry(const SafetensorsEntry& t, const std::string& where) {
    const std::string name = "tensor " + io::backticked(t.name);
    if (t.name == "__metadata__") bad(where, "`__metadata__` is reserved and cannot name a tensor");
    if (io::utf8_invalid_at(t.name) != std::string_view::npos) bad(where, name + " is not valid UTF-8");
    const int bits = safetensors_dtype_bits(t.dtype);
    if (bits == 0)
        bad(where, name + ": unknown dtype " + io::backticked(t.dtype) + "; accepted: " + safetensors_dtype_names());
    uint64_t total = uint64_t(bits);
    for (int64_t s : t.shape) {
        if (s < 0 || uint64_t(s) > kSafetensorsMaxValue)
            bad(where, name + ": shape " + io::shape_text(t.shape) + " has a dimension outside [0, 2^48-1]");
        if (__builtin_mul_overflow(total, uint64_t(s), &total))
            fail(ErrorCode::kOverflow, where + ": " + name + ": shape " + io::shape_text(t.shape) + " overflows");
    }
    if (total % 8 != 0) bad(where, name + ": " + std::to_string(total) + " bits is not a whole number of bytes");
    if (t.bytes.size() != total / 8)
        bad(where, name + ": " + std::to_string(t.bytes.size()) + " bytes given but shape " + io::shape_text(t.shape) +
                       " of " + t.dtype + " needs " + std::to_string(total / 8));
    if (t.bytes.data() == nullptr && !t.bytes.empty()) bad(where, name + " has a null data pointer");
}

Plan plan(const std::vector<SafetensorsEntry>& tensors, const std::map<std::string, std::string>& metadata,
          const std::string& where) {
    Plan p;
    std::set<std::string_view> seen;
    for (const SafetensorsEntry& t : tensors) {
        check_entry(t, where);
        if (!seen.insert(t.name).second) bad(where, "duplicate tensor name " + io::backticked(t.name));
        p.order.push_back(&t);
    }
    for (const auto& [key, value] : metadata)
        if (io::utf8_invalid_at(key) != std::string_view::npos || io::utf8_invalid_at(value) != std::string_view::npos)
            bad(where, "metadata " + io::backticked(key) + " is not valid UTF-8");
    uint64_t raw = 0;  // a lower bound of the header size, to refuse a huge one before building it
    for (const auto& [key, value] : metadata) raw += key.size() + value.size();
    for (const SafetensorsEntry& t : tensors) raw += t.name.size();
    if (raw > kSafetensorsMaxHeaderBytes) too_large(where);
    std::sort(p.order.begin(), p.order.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
        const int ra = io::safetensors_dtype_rank(a->dtype), rb = io::safetensors_dtype_rank(b->dtype);
        return ra != rb ? ra > rb : a->name < b->name;
    });

    std::string& h = p.header;
    h = "{";
    if (!metadata.empty()) h += "\"__metadata__\":" + nlohmann::json(metadata).dump();
    for (const SafetensorsEntry* t : p.order) {
        if (h.size() > 1) h += ',';
        h += json_string(t->name) + ":{\"dtype\":" + json_string(t->dtype) + ",\"shape\":[";
        for (size_t d = 0; d < t->shape.size(); ++d) {
            if (d) h += ',';
            h += std::to_string(t->shape[d]);
        }
        const uint64_t begin = p.data_bytes;
        p.data_bytes += t->bytes.size();
        h += "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(p.data_bytes) + "]}";
        if (h.size() > kSafetensorsMaxHeaderBytes) break;
    }
    h += '}';
    h.append((8 - h.size() % 8) % 8, ' ');  // 8 + N is then a multiple of 8: every tensor starts aligned
    if (h.size() > kSafetensorsMaxHeaderBytes) too_large(where);
    return p;
}

void length_prefix(uint64_t n, uint8_t out[8]) {
    for (int i = 0; i < 8; ++i) out[i] = uint8_t(n >> (8 * i));
}

void write_all(int fd, const void* data, size_t n, const std::string& path) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd, p, std::min<size_t>(n, size_t(1) << 30));
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) fail(ErrorCode::kIo, path + ": write failed: " + std::strerror(w < 0 ? errno : EIO));
        p += w;
        n -= size_t(w);
    }
}

SafetensorsEntry entry_of(const NamedTensor& t, const std::string& where) {
    const TensorView& v = t.view;
    const std::string name = "tensor " + io::backticked(t.name);
    if (!v.defined()) bad(where, name + " is absent (undefined view)");
    if (v.device != Device::kCPU)
        bad(where, name + " is on " + std::string(device_name(v.device)) + "; copy it to the host first");
    if (!v.is_contiguous()) bad(where, name + " is not contiguous (row-major)");
    SafetensorsEntry e;
    e.name = t.name;
    e.dtype = std::string(safetensors_dtype_name(v.dtype));
    e.shape.assign(v.shape, v.shape + v.ndim);
    e.bytes = {static_cast<const uint8_t*>(v.data), size_t(v.nbytes())};
    return e;
}

}  // namespace

SafetensorsEntry safetensors_entry(const NamedTensor& t) { return entry_of(t, "safetensors writer"); }

std::vector<uint8_t> serialize_safetensors(const std::vector<SafetensorsEntry>& tensors,
                                           const std::map<std::string, std::string>& metadata) {
    const Plan p = plan(tensors, metadata, "safetensors writer");
    std::vector<uint8_t> out(8 + p.header.size() + p.data_bytes);
    length_prefix(p.header.size(), out.data());
    std::memcpy(out.data() + 8, p.header.data(), p.header.size());
    size_t at = 8 + p.header.size();
    for (const SafetensorsEntry* t : p.order) {
        if (!t->bytes.empty()) std::memcpy(out.data() + at, t->bytes.data(), t->bytes.size());
        at += t->bytes.size();
    }
    return out;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    const Plan p = plan(tensors, metadata, path);
    const std::string target = write_target(path);
    static std::atomic<unsigned> counter{0};
    const std::string tmp = target + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++);
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        fail(ErrorCode::kIo, path + ": cannot create the temporary file " + tmp +
                                 " (written, then renamed into place): " + std::strerror(errno));
    bool closed = false;
    try {
        uint8_t prefix[8];
        length_prefix(p.header.size(), prefix);
        write_all(fd, prefix, 8, path);
        write_all(fd, p.header.data(), p.header.size(), path);
        for (const SafetensorsEntry* t : p.order) write_all(fd, t->bytes.data(), t->bytes.size(), path);
        if (::fsync(fd) != 0) fail(ErrorCode::kIo, path + ": fsync failed: " + std::strerror(errno));
        closed = true;
        if (::close(fd) != 0) fail(ErrorCode::kIo, path + ": close failed: " + std::strerror(errno));
    } catch (...) {
        if (!closed) ::close(fd);
        ::unlink(tmp.c_str());
        throw;
    }
    if (::rename(tmp.c_str(), target.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        fail(ErrorCode::kIo, path + ": cannot rename " + tmp + " into place: " + std::strerror(err));
    }
}

void write_safetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                       const std::map<std::string, std::string>& metadata) {
    std::vector<SafetensorsEntry> entries;
    entries.reserve(tensors.size());
    for (const NamedTensor& t : tensors) entries.push_back(entry_of(t, path));
    write_safetensors(path, entries, metadata);
}

}  // namespace moex
