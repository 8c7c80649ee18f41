// Hostile inputs to moex's readers and writers (issue #13): JSON nested 100,000 deep, NUL bytes, duplicate keys,
// FIFOs, device links and oversized files, and output paths that are not regular files. Each case is refused with
// a bounded message, quickly, without reading or writing anything it should not.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "moex/error.h"
#include "moex/model_config.h"
#include "moex/safetensors.h"
#include "moex/tokenizer.h"
#include "src/io/json_fields.h"
#include "tests/test_support.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using io::OrderedJson;
using test::expect_error;

std::string nested_array(size_t depth) { return std::string(depth, '[') + std::string(depth, ']'); }

void write_file(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

// A value nested 100,000 deep, built without the parser (which refuses it) to test the excerpt alone.
OrderedJson deep_value(int depth) {
    OrderedJson v = 1;
    for (int i = 0; i < depth; ++i) {
        OrderedJson a = OrderedJson::array();
        a.push_back(std::move(v));
        v = std::move(a);
    }
    return v;
}

TEST(HardenJson, ExcerptIsBoundedAndNeverRecurses) {
    const std::string e = io::json_excerpt(deep_value(100000));
    EXPECT_EQ(e, std::string(60, '[') + "...");
    EXPECT_EQ(io::json_excerpt(OrderedJson::parse(R"({"a":[1,"x"],"b":null})")), R"({"a":[1,"x"],"b":null})");
    const std::string long_string(1 << 20, 'y');
    EXPECT_LE(io::json_excerpt(OrderedJson(long_string)).size(), 64u);
    EXPECT_LE(io::json_excerpt(OrderedJson{{long_string, 1}}).size(), 64u);
}

TEST(HardenJson, DeepNestingIsRefusedWhileParsing) {
    const std::string deep = R"({"model_type": "qwen3_moe", "hidden_size": )" + nested_array(60000) + "}";
    expect_error([&] { parse_model_config(deep, "", "config.json"); }, ErrorCode::kFormat,
                 "config.json: objects and arrays are nested more than 64 deep (inside `hidden_size");
    const std::string tiny = R"({"model_type": "qwen3_moe"})";
    const std::string gen = R"({"temperature": )" + nested_array(60000) + "}";
    expect_error([&] { parse_model_config(tiny, gen, "d/config.json"); }, ErrorCode::kFormat,
                 "d/generation_config.json: objects and arrays are nested more than 64 deep");
    expect_error([&] { Tokenizer::from_json(nested_array(60000), "tokenizer.json"); }, ErrorCode::kFormat,
                 "tokenizer.json: objects and arrays are nested more than 64 deep");
    // 64 levels are fine (Hugging Face files nest under 10).
    EXPECT_NO_THROW(io::parse_json_object("{\"a\":" + nested_array(63) + "}", "x"));
}

TEST(HardenJson, DeepValueOfAWrongTypeGetsABoundedMessage) {
    // Within the depth limit, the message renders the value, cut: it used to render the whole value recursively.
    const std::string text = R"({"model_type": "qwen3_moe", "hidden_size": )" + nested_array(60) + "}";
    try {
        parse_model_config(text, "", "config.json");
        FAIL() << "accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("hidden_size must be an integer, got [[[["), std::string::npos)
            << e.what();
        EXPECT_LT(std::string(e.what()).size(), 200u);
    }
}

TEST(HardenJson, NulBytesAndDuplicateKeysAreRefused) {
    // nlohmann stops at a NUL byte: everything after it would be ignored.
    expect_error([] { io::parse_json_object(std::string("{\"a\": 1}\0{\"b\"", 14), "config.json"); },
                 ErrorCode::kFormat, "config.json: not valid JSON: a NUL byte at byte 8");
    expect_error([] { io::parse_json_object(R"({"weight_map": {"a": "x", "a": "y"}})", "index.json"); },
                 ErrorCode::kFormat, "index.json: key `a` appears twice in `weight_map`");
    expect_error([] { io::parse_json_object(R"({"a": 1, "a": 1})", "config.json"); }, ErrorCode::kFormat,
                 "config.json: key `a` appears twice in the top-level object");
    expect_error([] { Tokenizer::from_json(std::string("{}\0", 3), "tokenizer.json"); }, ErrorCode::kFormat,
                 "tokenizer.json: not valid JSON: a NUL byte at byte 2");
}

TEST(HardenJson, ParseErrorsAreBounded) {
    const std::string text = "{\"a\": \"" + std::string(1 << 20, 'z');  // an unterminated megabyte string
    try {
        io::parse_json_object(text, "config.json");
        FAIL() << "accepted";
    } catch (const Error& e) {
        EXPECT_LT(std::string(e.what()).size(), 300u);
    }
}

TEST(HardenFiles, ReadsOnlyRegularFilesWithinTheLimit) {
    const std::string fifo = test::temp_path("fifo.json");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);  // a plain read would block forever: no writer
    expect_error([&] { io::read_text_file(fifo, io::kMaxConfigBytes); }, ErrorCode::kIo,
                 fifo + ": is a FIFO, not a regular file");
    expect_error([&] { Tokenizer::from_file(fifo); }, ErrorCode::kIo, "is a FIFO, not a regular file");
    const std::string zero = test::temp_path("zero.json");
    fs::create_symlink("/dev/zero", zero);  // would be read until memory runs out
    expect_error([&] { io::read_text_file(zero, io::kMaxConfigBytes); }, ErrorCode::kIo,
                 zero + ": is a character device, not a regular file");
    const std::string dir = test::temp_path("dir.json");
    fs::create_directory(dir);
    expect_error([&] { io::read_text_file(dir, io::kMaxConfigBytes); }, ErrorCode::kIo, "is a directory");
    const std::string big = test::temp_path("big.json");
    write_file(big, "{}");
    fs::resize_file(big, io::kMaxTokenizerBytes + 1);  // sparse: no disk used
    expect_error([&] { Tokenizer::from_file(big); }, ErrorCode::kFormat,
                 big + ": is 268435457 bytes, more than the 268435456-byte limit");
    expect_error([&] { io::read_text_file(test::temp_path("absent.json"), 10); }, ErrorCode::kNotFound, "cannot open");
}

TEST(HardenFiles, CheckpointConfigThatIsAFifoIsNotCalledMissing) {
    const std::string dir = test::temp_path("fifo_checkpoint");
    fs::create_directory(dir);
    ASSERT_EQ(::mkfifo((dir + "/config.json").c_str(), 0600), 0);
    expect_error([&] { load_model_config(dir); }, ErrorCode::kIo, "config.json: is a FIFO, not a regular file");
    fs::remove(dir + "/config.json");
    write_file(dir + "/config.json", R"({"model_type": "qwen3_moe"})");
    fs::create_symlink("/dev/zero", dir + "/generation_config.json");
    expect_error([&] { load_model_config(dir); }, ErrorCode::kIo,
                 "generation_config.json: is a character device, not a regular file");
    fs::remove(dir + "/generation_config.json");
    write_file(dir + "/generation_config.json", "{}");
    fs::resize_file(dir + "/generation_config.json", io::kMaxConfigBytes + 1);
    expect_error([&] { load_model_config(dir); }, ErrorCode::kFormat, "-byte limit for this kind of file");
}

std::vector<uint8_t> with_header(const std::string& header) {
    std::vector<uint8_t> out(8 + header.size());  // sized once: GCC 12 misreads insert() here (-Wstringop-overread)
    for (int i = 0; i < 8; ++i) out[size_t(i)] = uint8_t(uint64_t(header.size()) >> (8 * i));
    if (!header.empty()) std::memcpy(out.data() + 8, header.data(), header.size());
    return out;
}

TEST(HardenSafetensors, NulBytesAfterTheHeaderJsonAreRefused) {
    const std::vector<uint8_t> padded = with_header(std::string("{}      ", 8));
    EXPECT_NO_THROW(SafetensorsFile::from_memory(padded.data(), padded.size(), "m"));  // spaces: the reference pads
    const std::vector<uint8_t> nul = with_header(std::string("{}\0\0\0\0\0\0", 8));
    expect_error([&] { SafetensorsFile::from_memory(nul.data(), nul.size(), "m"); }, ErrorCode::kFormat,
                 "m: header is not valid JSON: a NUL byte at header byte 2");
    const std::vector<uint8_t> hidden = with_header(std::string("{}\0{\"x\":1}", 10));
    expect_error([&] { SafetensorsFile::from_memory(hidden.data(), hidden.size(), "m"); }, ErrorCode::kFormat,
                 "a NUL byte at header byte 2");
}

std::vector<SafetensorsEntry> one_tensor(const std::vector<uint8_t>& bytes) {
    return {{"out", "U8", {int64_t(bytes.size())}, bytes}};
}

TEST(HardenWriter, WritesOnlyARegularFileOrANewPath) {
    const std::vector<uint8_t> bytes = {1, 2, 3};
    const std::string fifo = test::temp_path("out.fifo");
    ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
    expect_error([&] { write_safetensors(fifo, one_tensor(bytes)); }, ErrorCode::kIo,
                 fifo + ": is a FIFO; moex writes only to a regular file or a new path");
    EXPECT_TRUE(fs::is_fifo(fifo));  // still a FIFO: the temporary file was never renamed over it
    const std::string null_link = test::temp_path("null_link");
    fs::create_symlink("/dev/null", null_link);  // a link, so that a regression replaces the link, not /dev/null
    expect_error([&] { write_safetensors(null_link, one_tensor(bytes)); }, ErrorCode::kIo,
                 null_link + ": is a symlink to a character device");
    EXPECT_TRUE(fs::is_symlink(null_link));
    const std::string dir = test::temp_path("out_dir");
    fs::create_directory(dir);
    expect_error([&] { write_safetensors(dir, one_tensor(bytes)); }, ErrorCode::kIo, "is a directory");
    const std::string dangling = test::temp_path("dangling");
    fs::create_symlink(test::temp_path("nowhere"), dangling);
    expect_error([&] { write_safetensors(dangling, one_tensor(bytes)); }, ErrorCode::kIo,
                 "is a symlink to a missing file");
    for (const std::string& p : {dir, fifo})  // nothing left behind
        for (const auto& e : fs::directory_iterator(fs::path(p).parent_path()))
            EXPECT_EQ(e.path().string().find(".tmp."), std::string::npos) << e.path();

    // A new path and a regular file are written; through a symlink, its target is replaced and the link stays.
    const std::string file = test::temp_path("out.safetensors");
    write_safetensors(file, one_tensor(bytes));
    write_safetensors(file, one_tensor({4, 5}));
    EXPECT_EQ(SafetensorsFile::open(file).info("out").shape, std::vector<int64_t>{2});
    const std::string link = test::temp_path("out_link.safetensors");
    fs::create_symlink(file, link);
    write_safetensors(link, one_tensor({6}));
    EXPECT_TRUE(fs::is_symlink(link));
    EXPECT_EQ(SafetensorsFile::open(file).bytes("out")[0], 6);
}

}  // namespace
}  // namespace moex
