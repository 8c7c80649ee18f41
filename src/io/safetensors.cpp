// SafetensorsFile: maps a file read-only (or wraps bytes in memory), validates it with parse_safetensors, and hands
// out tensor info, raw bytes and TensorViews (zero-copy when aligned, one cached aligned copy otherwise).
#include "moex/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "moex/error.h"
#include "src/io/safetensors_header.h"

namespace moex {

int safetensors_dtype_bits(std::string_view name) {
    const io::SafetensorsDtype* d = io::find_safetensors_dtype(name);
    return d == nullptr ? 0 : d->bits;
}

std::optional<DType> dtype_from_safetensors(std::string_view name) {
    const io::SafetensorsDtype* d = io::find_safetensors_dtype(name);
    return d == nullptr ? std::nullopt : d->dtype;
}

std::string_view safetensors_dtype_name(DType dtype) {
    for (const auto& d : io::safetensors_dtype_table())
        if (d.dtype == dtype) return d.name;
    return "?";
}

std::string safetensors_dtype_names() {
    std::string s;
    for (const auto& d : io::safetensors_dtype_table()) s += (s.empty() ? "" : ", ") + std::string(d.name);
    return s;
}

struct SafetensorsFile::Impl {
    std::string path;
    void* map = nullptr;  // the mapping this object owns (null for from_memory)
    size_t map_size = 0;
    const uint8_t* base = nullptr;
    uint64_t size = 0;
    io::ParsedHeader header;
    std::vector<std::string> names;
    std::map<std::string, size_t, std::less<>> index;  // name -> position in header.tensors

    std::mutex copies_mutex;
    std::map<size_t, std::unique_ptr<void, decltype(&std::free)>> copies;  // aligned copies for unaligned tensors

    ~Impl() {
        if (map != nullptr) ::munmap(map, map_size);
    }
    const uint8_t* data_start() const { return base + 8 + header.header_size; }
    void build_index() {
        for (size_t i = 0; i < header.tensors.size(); ++i) {
            names.push_back(header.tensors[i].name);
            index.emplace(header.tensors[i].name, i);
        }
    }
    size_t find(std::string_view name) const;
    void* aligned_copy(size_t i);
};

size_t SafetensorsFile::Impl::find(std::string_view name) const {
    auto it = index.find(name);
    if (it != index.end()) return it->second;
    std::string have;
    constexpr size_t kShown = 12;
    for (size_t i = 0; i < names.size() && i < kShown; ++i) have += (i ? ", " : "") + names[i];
    if (names.size() > kShown) have += ", ... (" + std::to_string(names.size() - kShown) + " more)";
    if (names.empty()) have = "(no tensors)";
    fail(ErrorCode::kNotFound, path + ": no tensor " + io::backticked(name) + "; it has: " + have);
}

void* SafetensorsFile::Impl::aligned_copy(size_t i) {
    std::lock_guard<std::mutex> lock(copies_mutex);
    auto it = copies.find(i);
    if (it != copies.end()) return it->second.get();
    const SafetensorsInfo& t = header.tensors[i];
    const size_t alloc = size_t((t.nbytes() + 63) / 64 * 64 + 64);
    void* p = std::aligned_alloc(64, alloc);
    if (p == nullptr)
        fail(ErrorCode::kIo, path + ": out of host memory copying unaligned tensor " + io::backticked(t.name) + " (" +
                                 std::to_string(t.nbytes()) + " bytes)");
    std::memcpy(p, data_start() + t.begin, size_t(t.nbytes()));
    copies.emplace(i, std::unique_ptr<void, decltype(&std::free)>(p, &std::free));
    return p;
}

SafetensorsFile::SafetensorsFile(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
SafetensorsFile::SafetensorsFile(SafetensorsFile&&) noexcept = default;
SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&&) noexcept = default;
SafetensorsFile::~SafetensorsFile() = default;

SafetensorsFile SafetensorsFile::open(const std::string& path) {
    auto impl = std::make_unique<Impl>();
    impl->path = path;
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);  // NONBLOCK: a FIFO must not hang us
    if (fd < 0) {
        const int err = errno;
        fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path + ": cannot open: " + std::strerror(err));
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const int err = errno;
        ::close(fd);
        fail(ErrorCode::kIo, path + ": cannot stat: " + std::strerror(err));
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        fail(ErrorCode::kIo, path + ": is " + io::file_kind(st.st_mode) + ", not a regular file");
    }
    impl->size = uint64_t(st.st_size);
    if (impl->size >= 8) {  // smaller files are rejected by the parser without being mapped (mmap of 0 bytes fails)
        impl->map_size = size_t(impl->size);
        void* m = ::mmap(nullptr, impl->map_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            const int err = errno;
            ::close(fd);
            fail(ErrorCode::kIo, path + ": cannot map " + std::to_string(impl->size) + " bytes: " + std::strerror(err));
        }
        impl->map = m;
        impl->base = static_cast<const uint8_t*>(m);
    }
    ::close(fd);
    impl->header = io::parse_safetensors(impl->base, impl->size, path);
    impl->build_index();
    return SafetensorsFile(std::move(impl));
}

SafetensorsFile SafetensorsFile::from_memory(const void* data, size_t size, std::string label) {
    MOEX_REQUIRE(data != nullptr || size == 0, ErrorCode::kInvalidArgument, label + ": null data pointer");
    auto impl = std::make_unique<Impl>();
    impl->path = std::move(label);
    impl->base = static_cast<const uint8_t*>(data);
    impl->size = size;
    impl->header = io::parse_safetensors(impl->base, impl->size, impl->path);
    impl->build_index();
    return SafetensorsFile(std::move(impl));
}

const std::string& SafetensorsFile::path() const { return impl_->path; }
uint64_t SafetensorsFile::file_size() const { return impl_->size; }
uint64_t SafetensorsFile::header_size() const { return impl_->header.header_size; }
const std::vector<std::string>& SafetensorsFile::names() const { return impl_->names; }
const std::map<std::string, std::string>& SafetensorsFile::metadata() const { return impl_->header.metadata; }
bool SafetensorsFile::contains(std::string_view name) const { return impl_->index.count(name) != 0; }

const SafetensorsInfo& SafetensorsFile::info(std::string_view name) const {
    return impl_->header.tensors[impl_->find(name)];
}

std::span<const uint8_t> SafetensorsFile::bytes(std::string_view name) const {
    const SafetensorsInfo& t = info(name);
    return {impl_->data_start() + t.begin, size_t(t.nbytes())};
}

TensorView SafetensorsFile::view(std::string_view name) const {
    const size_t i = impl_->find(name);
    const SafetensorsInfo& t = impl_->header.tensors[i];
    const std::optional<DType> dtype = dtype_from_safetensors(t.dtype);
    if (!dtype)
        fail(ErrorCode::kUnsupported, impl_->path + ": tensor " + io::backticked(t.name) + " has dtype " + t.dtype +
                                          ", which has no moex type; read its raw bytes instead");
    if (t.shape.size() > size_t(kMaxDims))
        fail(ErrorCode::kUnsupported, impl_->path + ": tensor " + io::backticked(t.name) + " has " +
                                          std::to_string(t.shape.size()) + " dimensions; a moex view holds at most " +
                                          std::to_string(kMaxDims));
    TensorView v;
    v.dtype = *dtype;
    v.device = Device::kCPU;
    v.ndim = int(t.shape.size());
    int64_t stride = 1;
    for (int d = v.ndim - 1; d >= 0; --d) {
        v.shape[d] = t.shape[size_t(d)];
        v.strides[d] = stride;
        if (__builtin_mul_overflow(stride, std::max<int64_t>(v.shape[d], 1), &stride))
            fail(ErrorCode::kOverflow, impl_->path + ": tensor " + io::backticked(t.name) + " shape " +
                                           io::shape_text(t.shape) + " has strides that overflow 64 bits");
    }
    const uint8_t* src = impl_->data_start() + t.begin;
    const bool aligned = reinterpret_cast<uintptr_t>(src) % uintptr_t(dtype_size(*dtype)) == 0;
    v.data = aligned ? const_cast<uint8_t*>(src) : impl_->aligned_copy(i);
    return v;
}

}  // namespace moex
