// safetensors reader and writer: round trips of every dtype (empty tensors, scalars, unaligned legacy files), the
// reference writer's exact layout, and one test per malformed-file class, each built byte by byte here.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "moex/error.h"
#include "moex/safetensors.h"
#include "tests/test_support.h"

namespace moex {
namespace {

using test::temp_path;

using namespace std::string_literals;

void write_bytes(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary).write(bytes.data(), std::streamsize(bytes.size()));
}

// 8-byte little-endian length (the header's own unless given) + header + data.
std::string image(const std::string& header, const std::string& data = "", std::optional<uint64_t> n = {}) {
    std::string out(8, '\0');
    const uint64_t len = n.value_or(header.size());
    for (int i = 0; i < 8; ++i) out[size_t(i)] = char(len >> (8 * i));
    return out + header + data;
}

std::string entry(const std::string& name, const std::string& dtype, const std::string& shape, uint64_t b, uint64_t e) {
    return "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":" + shape + ",\"data_offsets\":[" +
           std::to_string(b) + "," + std::to_string(e) + "]}";
}

std::mt19937_64& rng() {
    static std::mt19937_64 r(std::random_device{}());
    return r;
}

std::string random_bytes(size_t n) {
    std::string s(n, '\0');
    for (char& c : s) c = char(rng()() & 0xff);
    return s;
}

// Opens the image from a file and from memory; both must raise `code` with a one-line message that starts with
// the path and contains every needle. Returns the file's message.
std::string expect_bad(const std::string& bytes, ErrorCode code, std::initializer_list<std::string> needles) {
    const std::string path = temp_path("bad.safetensors");
    write_bytes(path, bytes);
    std::string message;
    for (int from_file = 0; from_file < 2; ++from_file) {
        const std::string label = from_file ? path : "mem";
        try {
            if (from_file)
                SafetensorsFile::open(path);
            else
                SafetensorsFile::from_memory(bytes.data(), bytes.size(), label);
            ADD_FAILURE() << "accepted a malformed file; expected: " << *needles.begin();
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_EQ(e.code(), code) << m;
            EXPECT_EQ(m.rfind(label + ": ", 0), 0u) << m;
            EXPECT_EQ(m.find('\n'), std::string::npos) << m;
            for (const std::string& n : needles) EXPECT_NE(m.find(n), std::string::npos) << m << "\nlacks: " << n;
            if (from_file) message = m;
        }
    }
    return message;
}

std::string bad_header(const std::string& header, std::initializer_list<std::string> needles,
                       ErrorCode code = ErrorCode::kFormat) {
    return expect_bad(image(header), code, needles);
}

const DType kAllDtypes[] = {DType::kBF16,  DType::kF16, DType::kF32, DType::kF64, DType::kFP8E4M3,
                            DType::kUE8M0, DType::kI32, DType::kI64, DType::kU8};

TEST(Safetensors, RoundTripEveryMoexDtype) {
    std::vector<Tensor> keep;
    std::vector<NamedTensor> tensors;
    const std::vector<std::vector<int64_t>> shapes = {{3, 5}, {}, {0, 4}, {7}, {2, 3, 4}, {2, 1, 3, 2}, {0}};
    for (DType dt : kAllDtypes) {
        for (size_t s = 0; s < shapes.size(); ++s) {
            keep.emplace_back(dt, shapes[s].data(), int(shapes[s].size()));
            const std::string bytes = random_bytes(size_t(keep.back().nbytes()));
            if (!bytes.empty()) std::memcpy(keep.back().data(), bytes.data(), bytes.size());
            tensors.push_back({std::string(dtype_name(dt)) + "." + std::to_string(s), keep.back().view()});
        }
    }
    const std::string path = temp_path("all.safetensors");
    write_safetensors(path, tensors, {{"format", "pt"}, {"note", "caf\xc3\xa9 \"q\"\n"}});
    const SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ((8 + f.header_size()) % 8, 0u);
    EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "caf\xc3\xa9 \"q\"\n"}}));
    ASSERT_EQ(f.names().size(), tensors.size());
    for (const NamedTensor& t : tensors) {
        SCOPED_TRACE(t.name);
        const SafetensorsInfo& info = f.info(t.name);
        EXPECT_EQ(info.dtype, safetensors_dtype_name(t.view.dtype));
        EXPECT_EQ(info.shape, std::vector<int64_t>(t.view.shape, t.view.shape + t.view.ndim));
        const TensorView v = f.view(t.name);
        EXPECT_EQ(v.dtype, t.view.dtype);
        ASSERT_EQ(v.ndim, t.view.ndim);
        for (int d = 0; d < v.ndim; ++d) EXPECT_EQ(v.strides[d], t.view.strides[d]);
        EXPECT_EQ(v.data, f.bytes(t.name).data()) << "aligned data must not be copied";
        EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % uintptr_t(dtype_size(v.dtype)), 0u);
        ASSERT_EQ(v.nbytes(), t.view.nbytes());
        EXPECT_EQ(std::memcmp(v.data, t.view.data, size_t(v.nbytes())), 0);
    }
}

TEST(Safetensors, RoundTripEveryDtypeNameAsRawBytes) {
    std::vector<std::string> data;
    std::vector<SafetensorsEntry> entries;
    const std::string names = safetensors_dtype_names();
    for (size_t at = 0; at < names.size();) {
        const size_t comma = std::min(names.find(", ", at), names.size());
        const std::string dt = names.substr(at, comma - at);
        at = comma + 2;
        const int bits = safetensors_dtype_bits(dt);
        ASSERT_GT(bits, 0) << dt;
        const std::vector<int64_t> shape = {2, 4};  // 8 elements: whole bytes for 4- and 6-bit types too
        data.push_back(random_bytes(size_t(8 * bits / 8)));
        entries.push_back({"t_" + dt, dt, shape, {}});
    }
    ASSERT_EQ(entries.size(), 22u);
    for (size_t i = 0; i < entries.size(); ++i)
        entries[i].bytes = {reinterpret_cast<const uint8_t*>(data[i].data()), data[i].size()};
    const std::vector<uint8_t> img = serialize_safetensors(entries);
    const SafetensorsFile f = SafetensorsFile::from_memory(img.data(), img.size());
    for (size_t i = 0; i < entries.size(); ++i) {
        const auto b = f.bytes(entries[i].name);
        EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), data[i]) << entries[i].name;
        if (!dtype_from_safetensors(entries[i].dtype)) {
            try {
                f.view(entries[i].name);
                ADD_FAILURE() << "view of " << entries[i].dtype;
            } catch (const Error& e) {
                EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
                EXPECT_NE(std::string(e.what()).find(entries[i].dtype), std::string::npos) << e.what();
            }
        }
    }
}

TEST(Safetensors, WriterMatchesTheReferenceLayoutByteForByte) {
    const float values[6] = {0, 1, 2, 3, 4, 5};
    Tensor t(DType::kF32, {1, 2, 3});
    std::memcpy(t.data(), values, sizeof values);
    const std::string path = temp_path("ref.safetensors");
    write_safetensors(path, std::vector<NamedTensor>{{"attn.0", t.view()}});
    std::ifstream in(path, std::ios::binary);
    const std::string got((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(got, image("{\"attn.0\":{\"dtype\":\"F32\",\"shape\":[1,2,3],\"data_offsets\":[0,24]}}",
                         std::string(reinterpret_cast<const char*>(values), sizeof values)));
    const auto empty = serialize_safetensors({}, {{"framework", "pt"}});
    EXPECT_EQ(std::string(empty.begin(), empty.end()), image("{\"__metadata__\":{\"framework\":\"pt\"}}     "));
    const auto none = serialize_safetensors({});
    EXPECT_EQ(std::string(none.begin(), none.end()), image("{}      "));
}

TEST(Safetensors, WriterSortsByDescendingAlignmentThenName) {
    Tensor a(DType::kU8, {3}), b(DType::kBF16, {1}), c(DType::kF32, {1}), d(DType::kI64, {1}), e(DType::kF32, {2});
    const std::vector<NamedTensor> ts = {
        {"a", a.view()}, {"b", b.view()}, {"c", c.view()}, {"d", d.view()}, {"a2", e.view()}};
    const std::string path = temp_path("order.safetensors");
    write_safetensors(path, ts);
    const SafetensorsFile f = SafetensorsFile::open(path);
    EXPECT_EQ(f.names(), (std::vector<std::string>{"d", "a2", "c", "b", "a"}));
    for (const auto& t : ts) EXPECT_EQ(f.view(t.name).data, f.bytes(t.name).data()) << t.name;
}

TEST(Safetensors, WriterRejectsBadInput) {
    Tensor t(DType::kF32, {2, 3});
    const std::string path = temp_path("w.safetensors");
    auto rejects = [&](const std::vector<NamedTensor>& ts, const std::string& needle,
                       const std::map<std::string, std::string>& meta = {}) {
        try {
            write_safetensors(path, ts, meta);
            ADD_FAILURE() << "accepted: " << needle;
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
        }
        EXPECT_FALSE(std::filesystem::exists(path));
    };
    rejects({{"x", t.view()}, {"x", t.view()}}, "duplicate tensor name `x`");
    rejects({{"__metadata__", t.view()}}, "reserved");
    TensorView strided = t.view();
    std::swap(strided.strides[0], strided.strides[1]);
    std::swap(strided.shape[0], strided.shape[1]);
    rejects({{"s", strided}}, "not contiguous");
    TensorView gpu = t.view();
    gpu.device = Device::kCUDA;
    rejects({{"g", gpu}}, "copy it to the host");
    rejects({{"u", TensorView{}}}, "absent");
    rejects({{"\xff", t.view()}}, "not valid UTF-8");
    rejects({}, "limit", {{"big", std::string(kSafetensorsMaxHeaderBytes, 'x')}});
    const uint8_t three[3] = {1, 2, 3};
    EXPECT_THROW(serialize_safetensors({{"r", "F32", {1}, three}}), Error);      // 3 bytes for 4
    EXPECT_THROW(serialize_safetensors({{"r", "FP32", {1}, three}}), Error);     // unknown dtype
    EXPECT_THROW(serialize_safetensors({{"r", "F4", {3}, {three, 1}}}), Error);  // 12 bits
    EXPECT_THROW(write_safetensors("/nonexistent-dir/x.safetensors", std::vector<NamedTensor>{{"t", t.view()}}), Error);
}

TEST(Safetensors, RewriteReplacesAtomicallyAndLeavesNoTemporaries) {
    Tensor t(DType::kI32, {4});
    const std::string path = temp_path("atomic.safetensors");
    for (int round = 0; round < 3; ++round) {
        for (int i = 0; i < 4; ++i) t.view().ptr<int32_t>()[i] = round * 10 + i;
        write_safetensors(path, std::vector<NamedTensor>{{"t", t.view()}});
        EXPECT_EQ(SafetensorsFile::open(path).view("t").ptr<int32_t>()[3], round * 10 + 3);
    }
    for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(path).parent_path()))
        EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();
}

TEST(Safetensors, UnalignedLegacyFileIsCopiedIntoAlignedMemory) {
    const std::string data = random_bytes(16);
    std::string header = "{" + entry("w", "F32", "[2,2]", 0, 16) + "}";
    while ((8 + header.size()) % 4 != 2) header += ' ';  // data starts 2 bytes past a 4-byte boundary
    const std::string path = temp_path("legacy.safetensors");
    write_bytes(path, image(header, data));
    const SafetensorsFile f = SafetensorsFile::open(path);
    const TensorView v = f.view("w");
    EXPECT_NE(v.data, f.bytes("w").data());
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.data) % 4, 0u);
    EXPECT_EQ(std::memcmp(v.data, data.data(), 16), 0);
    EXPECT_EQ(f.view("w").data, v.data) << "the copy is made once";
}

TEST(Safetensors, AcceptsWhitespacePaddingEmptyTensorsNullMetadataAndAnyEntryOrder) {
    const std::string hdr = " \n\t{" + entry("b", "U8", "[2]", 0, 2) + "," + entry("a", "U8", "[0,3]", 2, 2) + "," +
                            entry("c", "U8", "[0]", 2, 2) + ",\"__metadata__\":null," + entry("s", "I8", "[]", 2, 3) +
                            "}\r\n   ";
    const std::string img = image(hdr, "xyz");
    const SafetensorsFile f = SafetensorsFile::from_memory(img.data(), img.size());
    EXPECT_EQ(f.names(), (std::vector<std::string>{"b", "a", "c", "s"}));
    EXPECT_EQ(f.view("a").numel(), 0);
    for (const char* name : {"a", "c"}) EXPECT_TRUE(f.view(name).is_contiguous()) << name;  // empty: contiguous
    const std::string zeros =
        image("{" + entry("z", "F32", "[0,0]", 0, 0) + "," + entry("w", "F32", "[2,0,3]", 0, 0) + "}");
    const SafetensorsFile g = SafetensorsFile::from_memory(zeros.data(), zeros.size());
    for (const char* name : {"z", "w"}) EXPECT_TRUE(g.view(name).is_contiguous() && g.view(name).nbytes() == 0) << name;
    EXPECT_EQ(f.bytes("s")[0], 'z');
    EXPECT_TRUE(f.metadata().empty());
}

TEST(Safetensors, MissingTensorAndMissingFileAreNamed) {
    std::string hdr = "{";
    for (int i = 0; i < 20; ++i) hdr += (i ? "," : "") + entry("t" + std::to_string(100 + i), "U8", "[1]", i, i + 1);
    const std::string path = temp_path("names.safetensors");
    write_bytes(path, image(hdr + "}", std::string(20, 'x')));
    const SafetensorsFile f = SafetensorsFile::open(path);
    try {
        f.view("nope");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kNotFound);
        EXPECT_EQ(std::string(e.what()), path +
                                             ": no tensor `nope`; it has: t100, t101, t102, t103, t104, t105, t106, "
                                             "t107, t108, t109, t110, t111, ... (8 more)");
    }
    try {
        SafetensorsFile::open(path + ".missing");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    }
    EXPECT_THROW(SafetensorsFile::open(std::filesystem::path(path).parent_path().string()), Error);
}

TEST(Safetensors, ViewOfMoreThanFourDimensionsIsRefusedButBytesWork) {
    const std::string img = image("{" + entry("x", "F32", "[1,1,1,1,2]", 0, 8) + "}", random_bytes(8));
    const SafetensorsFile f = SafetensorsFile::from_memory(img.data(), img.size());
    EXPECT_EQ(f.bytes("x").size(), 8u);
    try {
        f.view("x");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kUnsupported);
        EXPECT_NE(std::string(e.what()).find("5 dimensions"), std::string::npos) << e.what();
    }
}

// ---- malformed files: one test per class ----
TEST(SafetensorsMalformed, ShorterThanEightBytes) {
    for (size_t n = 0; n < 8; ++n) expect_bad(std::string(n, '\x01'), ErrorCode::kFormat, {"too short"});
}

TEST(SafetensorsMalformed, TruncatedAtEveryCutPoint) {
    const std::string img = image(
        "{" + entry("a", "F32", "[3]", 0, 12) + "," + entry("b", "BF16", "[2,2]", 12, 20) + "}", random_bytes(20));
    ASSERT_NO_THROW(SafetensorsFile::from_memory(img.data(), img.size()));
    for (size_t cut = 0; cut < img.size(); ++cut) {
        SCOPED_TRACE(cut);
        try {
            SafetensorsFile::from_memory(img.data(), cut);
            ADD_FAILURE() << "accepted a file cut at " << cut;
        } catch (const Error& e) {
            const std::string m = e.what();
            EXPECT_EQ(e.code(), ErrorCode::kFormat);
            EXPECT_TRUE(m.find("too short") != m.npos || m.find("runs past the end") != m.npos ||
                        m.find("truncated") != m.npos)
                << m;
        }
        if (cut % 16 == 0) expect_bad(img.substr(0, cut), ErrorCode::kFormat, {});
    }
    expect_bad(img.substr(0, img.size() - 1), ErrorCode::kFormat, {"truncated", "should be", "but it has"});
}

TEST(SafetensorsMalformed, HeaderLengthHugeOrPastTheEnd) {
    for (uint64_t n : {uint64_t(100'000'001), ~uint64_t(0), ~uint64_t(0) - 7, ~uint64_t(0) - 8, uint64_t(1) << 63})
        expect_bad(image("{}", "", n), ErrorCode::kFormat, {"header length " + std::to_string(n), "exceeds the limit"});
    expect_bad(image("{}", "", 100'000'000), ErrorCode::kFormat, {"runs past the end"});
    expect_bad(image("{}", "", 3), ErrorCode::kFormat, {"runs past the end", "8 + 3 > 10"});
}

TEST(SafetensorsMalformed, HeaderIsNotJsonOrNotAnObject) {
    for (const std::string& h : {"{\"a\":"s, "not json"s, "{}x"s, "{} {}"s, "{/*c*/}"s, "{\"a\":1,}"s, ""s, "\0{}"s})
        bad_header(h, {"not valid JSON", "header byte"});
    bad_header("\xef\xbb\xbf{}", {"byte order mark"});
    const std::string long_text = "{\"" + std::string(5000, 'x');  // the message quotes a cut of the bad token
    EXPECT_LT(bad_header(long_text, {"not valid JSON"}).size(), 400u);
    bad_header("{\"a\":" + std::string(400, '9') + "e999}", {"not valid JSON", "number overflow"});
    bad_header("[1,2]", {"must be a JSON object, found an array"});
    for (const char* h : {"\"str\"", "123", "null", "true"}) bad_header(h, {"must be a JSON object"});
}

TEST(SafetensorsMalformed, HeaderIsNotUtf8) {
    bad_header("{\"\xff\":1}", {"not valid UTF-8", "0xff", "header byte 2"});
    bad_header("{\"\xc0\xaf\":1}", {"not valid UTF-8"});      // overlong '/'
    bad_header("{\"\xed\xa0\x80\":1}", {"not valid UTF-8"});  // surrogate
    bad_header("{}\xe2\x82", {"not valid UTF-8", "header byte 2"});
}

TEST(SafetensorsMalformed, DuplicateKeysAreNamed) {
    const std::string a = entry("a", "U8", "[1]", 0, 1);
    expect_bad(image("{" + a + "," + a + "}", "x"), ErrorCode::kFormat, {"duplicate tensor name `a`"});
    bad_header("{\"__metadata__\":{},\"__metadata__\":{}}", {"duplicate `__metadata__`"});
    bad_header("{\"a\":{\"dtype\":\"U8\",\"dtype\":\"I8\",\"shape\":[],\"data_offsets\":[0,1]}}",
               {"duplicate key `dtype` in entry `a`"});
    bad_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", {"duplicate key `k` in entry `__metadata__`"});
}

TEST(SafetensorsMalformed, UnknownDtypeListsTheAcceptedNames) {
    for (const char* dt : {"FP8", "bfloat16", "F8_E4M3FN", "f32", ""})
        expect_bad(image("{" + entry("w", dt, "[1]", 0, 1) + "}", "x"), ErrorCode::kFormat,
                   {"tensor `w`", "unknown dtype `" + std::string(dt) + "`", "BOOL, F4", "F8_E8M0", "BF16", "U64"});
    bad_header("{\"w\":{\"dtype\":7,\"shape\":[],\"data_offsets\":[0,1]}}", {"dtype must be a string"});
}

TEST(SafetensorsMalformed, ShapeValuesMustBeSmallNonNegativeIntegers) {
    for (const char* s : {"[-1]", "[2.0]", "[1e3]", "[\"3\"]", "[281474976710656]", "[18446744073709551616]", "[null]",
                          "[true]", "[1,-0.5]"})
        bad_header("{" + entry("w", "U8", s, 0, 1) + "}", {"tensor `w`", "not an integer in [0, 2^48-1]"});
    bad_header("{" + entry("w", "U8", "5", 0, 1) + "}", {"shape must be an array"});
    bad_header("{" + entry("w", "U8", "[[[1]]]", 0, 1) + "}", {"nests deeper", "`w`"});
}

TEST(SafetensorsMalformed, OffsetsMustBeAPairOfSmallIntegers) {
    const std::string pre = "{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":";
    for (const char* o : {"[-1,0]", "[0,1.0]", "[0,281474976710656]", "[0,\"1\"]"})
        bad_header(pre + o + "}}", {"tensor `w`", "data_offsets[", "not an integer"});
    for (const char* o : {"[0]", "[0,1,2]", "7", "{\"b\":0}"}) bad_header(pre + o + "}}", {"must be [BEGIN, END]"});
    expect_bad(image(pre + "[4,0]}}", "xxxx"), ErrorCode::kFormat, {"end before they begin"});
}

TEST(SafetensorsMalformed, EntryFieldsMissingUnknownOrNotAnObject) {
    bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[]}}", {"missing field `data_offsets`"});
    bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1],\"x\":1}}", {"unknown field `x`"});
    bad_header("{\"w\":5}", {"tensor `w`", "entry must be an object"});
    bad_header("{\"w\":[1]}", {"tensor `w`", "entry must be an object"});
}

TEST(SafetensorsMalformed, ByteRangeDisagreesWithShape) {
    expect_bad(image("{" + entry("w", "F32", "[2,2]", 0, 12) + "}", random_bytes(12)), ErrorCode::kFormat,
               {"tensor `w`", "hold 12 bytes", "(2, 2) of F32 needs 16"});
    expect_bad(image("{" + entry("w", "F16", "[1]", 0, 4) + "}", random_bytes(4)), ErrorCode::kFormat, {"needs 2"});
}

TEST(SafetensorsMalformed, ShapeTimesBitsOverflows) {
    bad_header("{" + entry("w", "F32", "[281474976710655,281474976710655]", 0, 0) + "}", {"tensor `w`", "overflow"},
               ErrorCode::kOverflow);
    bad_header("{" + entry("w", "U8", "[4294967296,4294967296]", 0, 0) + "}", {"overflow"}, ErrorCode::kOverflow);
    bad_header("{" + entry("w", "F64", "[281474976710655,4096]", 0, 0) + "}", {"overflow"}, ErrorCode::kOverflow);
    // A zero dimension makes the tensor empty whatever the others are (the reference agrees), but a view's strides
    // would overflow.
    const std::string img = image("{" + entry("e", "F32", "[0,281474976710655,281474976710655]", 0, 0) + "}");
    const SafetensorsFile f = SafetensorsFile::from_memory(img.data(), img.size());
    EXPECT_EQ(f.bytes("e").size(), 0u);
    try {
        f.view("e");
        ADD_FAILURE();
    } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::kOverflow) << e.what();
    }
}

TEST(SafetensorsMalformed, SubByteDtypeNotEndingOnAByte) {
    bad_header("{" + entry("w", "F4", "[3]", 0, 1) + "}", {"tensor `w`", "12 bits", "not a whole number of bytes"});
    bad_header("{" + entry("w", "F6_E2M3", "[1]", 0, 1) + "}", {"6 bits"});
}

TEST(SafetensorsMalformed, OffsetsDoNotTileTheBuffer) {
    const std::string d = random_bytes(8);
    expect_bad(image("{" + entry("a", "U8", "[4]", 4, 8) + "}", d), ErrorCode::kFormat,
               {"`a` begins at data byte 4", "must begin at 0"});
    expect_bad(image("{" + entry("a", "U8", "[2]", 0, 2) + "," + entry("b", "U8", "[4]", 4, 8) + "}", d),
               ErrorCode::kFormat, {"hole of 2 bytes", "`a` [0, 2)", "`b` [4, 8)"});
    expect_bad(image("{" + entry("a", "U8", "[4]", 0, 4) + "," + entry("b", "U8", "[6]", 2, 8) + "}", d),
               ErrorCode::kFormat, {"`b` [2, 8) overlaps tensor `a` [0, 4)"});
    expect_bad(image("{" + entry("a", "U8", "[8]", 0, 8) + "," + entry("b", "I8", "[8]", 0, 8) + "}", d),
               ErrorCode::kFormat, {"tensors `a` and `b` alias the same bytes [0, 8)"});
}

TEST(SafetensorsMalformed, TrailingBytesAfterTheLastTensor) {
    expect_bad(image("{" + entry("a", "U8", "[4]", 0, 4) + "}", random_bytes(5)), ErrorCode::kFormat,
               {"1 trailing bytes", "expected", "found"});
    expect_bad(image("{}", "x"), ErrorCode::kFormat, {"1 trailing bytes"});
}

TEST(SafetensorsMalformed, MetadataMustMapStringsToStrings) {
    for (const char* v : {"1", "null", "[\"x\"]", "{\"b\":\"c\"}", "true"})
        bad_header("{\"__metadata__\":{\"a\":" + std::string(v) + "}}", {"`__metadata__` value `a` must be a string"});
    bad_header("{\"__metadata__\":\"x\"}", {"`__metadata__` must be an object"});
    expect_bad(image("{" + entry("__metadata__", "F32", "[1]", 0, 4) + "}", random_bytes(4)), ErrorCode::kFormat,
               {"`__metadata__` is reserved", "cannot name a tensor"});
}

}  // namespace
}  // namespace moex
