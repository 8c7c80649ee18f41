// The checked JSON reader of moex's files: bounded file reads, a parser that refuses NUL bytes, duplicate keys and
// deep nesting, a non-recursive bounded excerpt for messages, and typed field reads that name the file and field.
#include "src/io/json_fields.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_set>

#include "moex/error.h"
#include "src/io/messages.h"

namespace moex::io {

std::string read_text_file(const std::string& path, uint64_t max_bytes) {
    // O_NONBLOCK: opening a FIFO without a writer would block forever; fstat then refuses it.
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) {
        const int err = errno;
        fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIo, path + ": cannot open: " + std::strerror(err));
    }
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0) fail(ErrorCode::kIo, path + ": cannot stat: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) fail(ErrorCode::kIo, path + ": is " + file_kind(st.st_mode) + ", not a regular file");
    const auto size = uint64_t(st.st_size);
    if (size > max_bytes)
        fail(ErrorCode::kFormat, path + ": is " + std::to_string(size) + " bytes, more than the " +
                                     std::to_string(max_bytes) + "-byte limit for this kind of file");
    std::string text(size_t(size), '\0');
    size_t got = 0;
    while (got < text.size()) {
        const ssize_t n = ::read(fd, text.data() + got, text.size() - got);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) fail(ErrorCode::kIo, path + ": read failed: " + std::strerror(errno));
        if (n == 0) break;  // the file shrank while we read it: parse what is there
        got += size_t(n);
    }
    text.resize(got);
    return text;
}

namespace {

// Where a key sits, for messages: "weight_map", "quantization_config.config_groups", "the top level".
template <class Frames>
std::string object_path(const Frames& stack) {
    std::string path;
    for (size_t i = 0; i + 1 < stack.size(); ++i) path += (path.empty() || stack[i].array ? "" : ".") + stack[i].key;
    return path.empty() ? "the top-level object" : backticked(path);
}

template <class Json>
Json parse_checked(std::string_view text, const std::string& label) {
    if (const size_t at = text.find('\0'); at != std::string_view::npos)
        fail(ErrorCode::kFormat, label + ": not valid JSON: a NUL byte at byte " + std::to_string(at));
    struct Frame {
        std::unordered_set<std::string> keys;
        std::string key;  // the last key read (an array's frame: "[]")
        bool array;
    };
    std::vector<Frame> stack;
    using Event = nlohmann::json::parse_event_t;
    auto callback = [&](int, Event event, Json& parsed) {
        switch (event) {
            case Event::object_start:
            case Event::array_start:
                if (stack.size() >= size_t(kMaxJsonDepth))
                    fail(ErrorCode::kFormat, label + ": objects and arrays are nested more than " +
                                                 std::to_string(kMaxJsonDepth) + " deep (inside " + object_path(stack) +
                                                 ")");
                if (!stack.empty() && stack.back().array) stack.back().key = "[]";
                stack.push_back({{}, {}, event == Event::array_start});
                break;
            case Event::object_end:
            case Event::array_end: stack.pop_back(); break;
            case Event::key: {
                Frame& frame = stack.back();
                const auto& key = parsed.template get_ref<const std::string&>();
                if (!frame.keys.insert(key).second)
                    fail(ErrorCode::kFormat,
                         label + ": key " + backticked(key) + " appears twice in " +
                             (stack.size() == 1 ? std::string("the top-level object") : object_path(stack)) +
                             " (JSON readers differ on which one wins)");
                frame.key = key;
                break;
            }
            case Event::value: break;
        }
        return true;
    };
    try {
        return Json::parse(text.begin(), text.end(), callback);
    } catch (const nlohmann::json::parse_error& e) {
        fail(ErrorCode::kFormat, label + ": not valid JSON: " + json_reason(e));
    } catch (const nlohmann::json::exception& e) {
        fail(ErrorCode::kFormat, label + ": not valid JSON: " + json_reason(e));
    }
}

// A string as a JSON string literal, cut to about `limit` bytes first (the cut may split a UTF-8 character, which
// the dump replaces).
std::string quoted(const std::string& s, size_t limit) {
    return OrderedJson(s.size() > limit ? s.substr(0, limit) : s)
        .dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
}

}  // namespace

OrderedJson parse_json_object(std::string_view text, const std::string& label) {
    OrderedJson j = parse_checked<OrderedJson>(text, label);
    MOEX_REQUIRE(j.is_object(), ErrorCode::kFormat, label + ": expected a JSON object, got " + json_excerpt(j));
    return j;
}

nlohmann::json parse_json_value(std::string_view text, const std::string& label) {
    return parse_checked<nlohmann::json>(text, label);
}

std::string json_excerpt(const OrderedJson& value) {
    constexpr size_t kMax = 60;
    struct Frame {
        const OrderedJson* v;
        OrderedJson::const_iterator next;
    };
    std::vector<Frame> stack;  // at most kMax + 1 deep: each level writes a byte
    std::string s;
    auto open = [&](const OrderedJson& v) {
        if (v.is_structured()) {
            s += v.is_object() ? '{' : '[';
            stack.push_back({&v, v.cbegin()});
        } else {
            s += v.is_string() ? quoted(v.get_ref<const std::string&>(), kMax)
                               : v.dump(-1, ' ', false, OrderedJson::error_handler_t::replace);
        }
    };
    open(value);
    while (!stack.empty() && s.size() <= kMax) {
        Frame& f = stack.back();
        if (f.next == f.v->cend()) {
            s += f.v->is_object() ? '}' : ']';
            stack.pop_back();
            continue;
        }
        if (f.next != f.v->cbegin()) s += ',';
        if (f.v->is_object()) s += quoted(f.next.key(), kMax) + ":";
        const OrderedJson& child = *f.next;
        ++f.next;
        open(child);  // may grow the stack: `f` is not used after this
    }
    if (s.size() > kMax) {
        size_t cut = kMax;
        while (cut > 0 && (uint8_t(s[cut]) & 0xc0) == 0x80) --cut;  // between UTF-8 characters
        s = s.substr(0, cut) + "...";
    }
    return s;
}

bool JsonFields::has(const std::string& key) const { return get(key) != nullptr; }

const OrderedJson* JsonFields::get(const std::string& key) const {
    auto it = object_.find(key);
    if (it == object_.end() || it->is_null()) return nullptr;
    return &*it;
}

void JsonFields::fail_type(const std::string& key, const char* expected) const {
    const OrderedJson* v = get(key);
    fail(ErrorCode::kFormat,
         where(key) + " must be " + expected + ", got " + (v == nullptr ? std::string("null") : json_excerpt(*v)));
}

namespace {

std::optional<int64_t> as_integer(const OrderedJson& v) {
    if (v.is_number_integer()) {
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)) return std::nullopt;
        return v.get<int64_t>();
    }
    if (v.is_number_float()) {
        const double d = v.get<double>();
        // 2^63 is exactly representable; anything at or above it does not fit.
        if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.2233720368547758e18) return int64_t(d);
    }
    return std::nullopt;
}

}  // namespace

std::optional<int64_t> JsonFields::integer(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    std::optional<int64_t> i = as_integer(*v);
    if (!i) fail_type(key, "an integer");
    return i;
}

std::optional<double> JsonFields::number(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_number()) fail_type(key, "a number");
    return v->get<double>();
}

std::optional<bool> JsonFields::boolean(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_boolean()) fail_type(key, "true or false");
    return v->get<bool>();
}

std::optional<std::string> JsonFields::string(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_string()) fail_type(key, "a string");
    return v->get<std::string>();
}

std::optional<std::vector<int64_t>> JsonFields::integer_list(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (!v->is_array()) fail_type(key, "a list of integers");
    std::vector<int64_t> out;
    for (const auto& item : *v) {
        std::optional<int64_t> i = as_integer(item);
        if (!i) fail_type(key, "a list of integers");
        out.push_back(*i);
    }
    return out;
}

std::optional<std::vector<int64_t>> JsonFields::integer_or_list(const std::string& key) const {
    const OrderedJson* v = get(key);
    if (v == nullptr) return std::nullopt;
    if (v->is_array()) return integer_list(key);
    std::optional<int64_t> i = as_integer(*v);
    if (!i) fail_type(key, "an integer or a list of integers");
    return std::vector<int64_t>{*i};
}

}  // namespace moex::io
