// safetensors header validation: length prefix, UTF-8, JSON with explicit duplicate-key and nesting checks, each
// tensor entry (dtype, shape, offsets, checked sizes), then the tiling of the data buffer and the file size.
// Mirrors the reference reader's checks (safetensors/src/tensor.rs) and the JSON schema's 2^48-1 bound.
#include "src/io/safetensors_header.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "moex/error.h"
#include "src/io/messages.h"

namespace moex::io {
namespace {

using json = nlohmann::json;

constexpr SafetensorsDtype kDtypes[] = {
    {"BOOL", 8, std::nullopt},
    {"F4", 4, std::nullopt},
    {"F6_E2M3", 6, std::nullopt},
    {"F6_E3M2", 6, std::nullopt},
    {"U8", 8, DType::kU8},
    {"I8", 8, std::nullopt},
    {"F8_E5M2", 8, std::nullopt},
    {"F8_E4M3", 8, DType::kFP8E4M3},
    {"F8_E8M0", 8, DType::kUE8M0},
    {"F8_E4M3FNUZ", 8, std::nullopt},
    {"F8_E5M2FNUZ", 8, std::nullopt},
    {"I16", 16, std::nullopt},
    {"U16", 16, std::nullopt},
    {"F16", 16, DType::kF16},
    {"BF16", 16, DType::kBF16},
    {"I32", 32, DType::kI32},
    {"U32", 32, std::nullopt},
    {"F32", 32, DType::kF32},
    {"C64", 64, std::nullopt},
    {"F64", 64, DType::kF64},
    {"I64", 64, DType::kI64},
    {"U64", 64, std::nullopt},
};

[[noreturn]] void bad(const std::string& path, const std::string& msg, ErrorCode code = ErrorCode::kFormat) {
    fail(code, path + ": " + msg);
}

// A JSON value for a message: its type and, when short, its text.
std::string describe(const json& v) {
    std::string text = v.is_structured() ? std::string() : v.dump(-1, ' ', false, json::error_handler_t::replace);
    if (text.empty() || text.size() > 40) return std::string("a ") + v.type_name();
    return std::string(v.type_name()) + " " + text;
}

// Parses the header text, rejecting a duplicate key in any object by name (nlohmann would silently keep one) and
// nesting deeper than a header needs (object > entry > shape), which also bounds parser work on hostile input.
json parse_json(std::string_view text, const std::string& path) {
    struct Frame {
        std::unordered_set<std::string> keys;
        std::string last_key;
    };
    std::vector<Frame> stack;
    using Event = json::parse_event_t;
    auto callback = [&](int, Event event, json& parsed) {
        switch (event) {
            case Event::object_start:
            case Event::array_start:
                if (stack.empty() && event == Event::array_start)
                    bad(path, "header must be a JSON object, found an array");
                if (stack.size() >= 3)
                    bad(path, "header nests deeper than a safetensors header can (inside entry " +
                                  backticked(stack[0].last_key) + ")");
                stack.emplace_back();
                break;
            case Event::object_end:
            case Event::array_end: stack.pop_back(); break;
            case Event::key: {
                Frame& frame = stack.back();
                const std::string& key = parsed.get_ref<const std::string&>();
                if (!frame.keys.insert(key).second) {
                    if (stack.size() == 1 && key == "__metadata__") bad(path, "duplicate `__metadata__` in the header");
                    if (stack.size() == 1) bad(path, "duplicate tensor name " + backticked(key) + " in the header");
                    bad(path, "duplicate key " + backticked(key) + " in entry " +
                                  backticked(stack[stack.size() - 2].last_key));
                }
                frame.last_key = key;
                break;
            }
            case Event::value: break;
        }
        return true;
    };
    try {
        return json::parse(text.begin(), text.end(), callback, /*allow_exceptions=*/true, /*ignore_comments=*/false);
    } catch (const json::parse_error& e) {
        bad(path, "header is not valid JSON (header byte " + std::to_string(e.byte) + "): " + json_reason(e));
    } catch (const json::exception& e) {
        bad(path, "header is not valid JSON: " + json_reason(e));
    }
}

// A shape or offset value: an integer in [0, 2^48-1].
std::optional<uint64_t> size_value(const json& v) {
    uint64_t out;
    if (v.is_number_unsigned()) {
        out = v.get<uint64_t>();
    } else if (v.is_number_integer()) {
        const int64_t s = v.get<int64_t>();
        if (s < 0) return std::nullopt;
        out = uint64_t(s);
    } else {
        return std::nullopt;
    }
    if (out > kSafetensorsMaxValue) return std::nullopt;
    return out;
}

SafetensorsInfo parse_entry(const std::string& name, const json& v, const std::string& path) {
    const std::string where = "tensor " + backticked(name) + ": ";
    if (!v.is_object()) bad(path, where + "entry must be an object {dtype, shape, data_offsets}, got " + describe(v));
    for (const auto& [key, _] : v.items())
        if (key != "dtype" && key != "shape" && key != "data_offsets")
            bad(path, where + "unknown field " + backticked(key) + " (allowed: dtype, shape, data_offsets)");
    for (const char* field : {"dtype", "shape", "data_offsets"})
        if (!v.contains(field)) bad(path, where + "missing field `" + field + "`");

    SafetensorsInfo info;
    info.name = name;
    const json& dtype = v["dtype"];
    if (!dtype.is_string()) bad(path, where + "dtype must be a string, got " + describe(dtype));
    info.dtype = dtype.get<std::string>();
    const SafetensorsDtype* dt = find_safetensors_dtype(info.dtype);
    if (dt == nullptr)
        bad(path, where + "unknown dtype " + backticked(info.dtype) + "; accepted: " + safetensors_dtype_names());

    const json& shape = v["shape"];
    if (!shape.is_array()) bad(path, where + "shape must be an array of integers, got " + describe(shape));
    for (size_t d = 0; d < shape.size(); ++d) {
        auto s = size_value(shape[d]);
        if (!s)
            bad(path, where + "shape[" + std::to_string(d) + "] is " + describe(shape[d]) +
                          ", not an integer in [0, 2^48-1]");
        info.shape.push_back(int64_t(*s));
    }

    const json& offsets = v["data_offsets"];
    if (!offsets.is_array() || offsets.size() != 2)
        bad(path, where + "data_offsets must be [BEGIN, END], got " + describe(offsets));
    for (int i = 0; i < 2; ++i) {
        auto o = size_value(offsets[i]);
        if (!o)
            bad(path, where + "data_offsets[" + std::to_string(i) + "] is " + describe(offsets[i]) +
                          ", not an integer in [0, 2^48-1]");
        (i == 0 ? info.begin : info.end) = *o;
    }
    if (info.end < info.begin)
        bad(path, where + "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) +
                      "] end before they begin");

    uint64_t bits = uint64_t(dt->bits);
    for (int64_t s : info.shape)
        if (__builtin_mul_overflow(bits, uint64_t(s), &bits))
            bad(path, where + "shape " + shape_text(info.shape) + " of " + info.dtype + " overflows 64-bit sizes",
                ErrorCode::kOverflow);
    if (bits % 8 != 0)
        bad(path, where + "shape " + shape_text(info.shape) + " of " + info.dtype + " is " + std::to_string(bits) +
                      " bits, not a whole number of bytes");
    if (info.nbytes() != bits / 8)
        bad(path, where + "data_offsets [" + std::to_string(info.begin) + ", " + std::to_string(info.end) + "] hold " +
                      std::to_string(info.nbytes()) + " bytes but shape " + shape_text(info.shape) + " of " +
                      info.dtype + " needs " + std::to_string(bits / 8));
    return info;
}

void parse_metadata(const json& v, std::map<std::string, std::string>& out, const std::string& path) {
    if (v.is_null()) return;  // the reference reads `null` as "no metadata"
    const bool looks_like_tensor = v.is_object() && (v.contains("dtype") || v.contains("data_offsets"));
    if (looks_like_tensor) bad(path, "`__metadata__` is reserved for string metadata and cannot name a tensor");
    if (!v.is_object()) bad(path, "`__metadata__` must be an object of string values, got " + describe(v));
    for (const auto& [key, value] : v.items()) {
        if (!value.is_string())
            bad(path, "`__metadata__` value " + backticked(key) + " must be a string, got " + describe(value));
        out.emplace(key, value.get<std::string>());
    }
}

// After sorting by offsets each tensor must begin where the previous one ended, the first at 0: no holes (which
// would allow polyglot files), no overlaps, no two names on one byte range. Returns the buffer size.
uint64_t check_tiling(std::vector<SafetensorsInfo>& tensors, const std::string& path) {
    std::sort(tensors.begin(), tensors.end(), [](const SafetensorsInfo& a, const SafetensorsInfo& b) {
        return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.name < b.name;
    });
    auto range = [](const SafetensorsInfo& t) {
        return std::string("[").append(std::to_string(t.begin)).append(", ").append(std::to_string(t.end)) + ")";
    };
    uint64_t end = 0;
    const SafetensorsInfo* prev = nullptr;
    for (const SafetensorsInfo& t : tensors) {
        if (t.begin != end) {
            if (prev == nullptr)
                bad(path, "tensor " + backticked(t.name) + " begins at data byte " + std::to_string(t.begin) +
                              "; the first tensor must begin at 0 (a hole in the data buffer)");
            if (t.begin > end)
                bad(path, "a hole of " + std::to_string(t.begin - end) + " bytes between tensor " +
                              backticked(prev->name) + " " + range(*prev) + " and tensor " + backticked(t.name) + " " +
                              range(t));
            if (t.begin == prev->begin && t.end == prev->end)
                bad(path, "tensors " + backticked(prev->name) + " and " + backticked(t.name) +
                              " alias the same bytes " + range(t));
            bad(path, "tensor " + backticked(t.name) + " " + range(t) + " overlaps tensor " + backticked(prev->name) +
                          " " + range(*prev));
        }
        end = t.end;
        prev = &t;
    }
    return end;
}

}  // namespace

std::span<const SafetensorsDtype> safetensors_dtype_table() { return kDtypes; }

const SafetensorsDtype* find_safetensors_dtype(std::string_view name) {
    for (const auto& d : kDtypes)
        if (d.name == name) return &d;
    return nullptr;
}

int safetensors_dtype_rank(std::string_view name) {
    const SafetensorsDtype* d = find_safetensors_dtype(name);
    return d == nullptr ? -1 : int(d - kDtypes);
}

ParsedHeader parse_safetensors(const uint8_t* data, uint64_t size, const std::string& path) {
    if (size < 8)
        bad(path,
            "file is " + std::to_string(size) + " bytes, too short for a safetensors file (8-byte header length)");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n > kSafetensorsMaxHeaderBytes)
        bad(path, "header length " + std::to_string(n) + " exceeds the limit of " +
                      std::to_string(kSafetensorsMaxHeaderBytes) + " bytes (corrupt, or not a safetensors file)");
    if (n > size - 8)
        bad(path, "header length " + std::to_string(n) + " runs past the end of the file (8 + " + std::to_string(n) +
                      " > " + std::to_string(size) + " bytes; truncated?)");
    const std::string_view text(reinterpret_cast<const char*>(data) + 8, size_t(n));
    if (size_t at = utf8_invalid_at(text); at != std::string_view::npos) {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", unsigned(uint8_t(text[at])));
        bad(path,
            "header is not valid UTF-8 (byte " + std::string(hex) + " at header byte " + std::to_string(at) + ")");
    }

    // nlohmann stops reading at a NUL byte, so `{...}\0<anything>` would pass; JSON allows only whitespace after the
    // closing brace (the reference writer pads with spaces).
    if (size_t at = text.find('\0'); at != std::string_view::npos)
        bad(path, "header is not valid JSON: a NUL byte at header byte " + std::to_string(at) +
                      " (only spaces, tabs and newlines may pad the object)");
    if (text.starts_with("\xef\xbb\xbf"))  // nlohmann would skip it; JSON (and the reference reader) forbid it
        bad(path, "header starts with a UTF-8 byte order mark, which JSON forbids");
    const json root = parse_json(text, path);
    if (!root.is_object()) bad(path, std::string("header must be a JSON object, found ") + describe(root));
    ParsedHeader out;
    out.header_size = n;
    for (const auto& [key, value] : root.items()) {
        if (key == "__metadata__")
            parse_metadata(value, out.metadata, path);
        else
            out.tensors.push_back(parse_entry(key, value, path));
    }
    const uint64_t buffer = check_tiling(out.tensors, path);
    const uint64_t expect = 8 + n + buffer;  // <= 8 + 1e8 + 2^48: cannot overflow
    if (expect > size)
        bad(path, "file is truncated: the header indexes " + std::to_string(buffer) +
                      " data bytes, so the file should be " + std::to_string(expect) + " bytes, but it has " +
                      std::to_string(size));
    if (expect < size)
        bad(path, "file has " + std::to_string(size - expect) + " trailing bytes after the last tensor (expected " +
                      std::to_string(expect) + " bytes, found " + std::to_string(size) + ")");
    return out;
}

size_t utf8_invalid_at(std::string_view s) {
    const auto* p = reinterpret_cast<const uint8_t*>(s.data());
    const size_t n = s.size();
    for (size_t i = 0; i < n;) {
        const uint8_t c = p[i];
        if (c < 0x80) {
            ++i;
            continue;
        }
        size_t len;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0)
            len = 2, cp = c & 0x1fu, min = 0x80;
        else if ((c & 0xf0) == 0xe0)
            len = 3, cp = c & 0x0fu, min = 0x800;
        else if ((c & 0xf8) == 0xf0)
            len = 4, cp = c & 0x07u, min = 0x10000;
        else
            return i;
        if (len > n - i) return i;
        for (size_t k = 1; k < len; ++k) {
            if ((p[i + k] & 0xc0) != 0x80) return i;
            cp = (cp << 6) | (p[i + k] & 0x3fu);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;  // overlong, too big, surrogate
        i += len;
    }
    return std::string_view::npos;
}

}  // namespace moex::io
