// Shared helpers of the tokenizer tests: the fixtures that tests/data/make_tokenizer_fixtures.py writes to
// tests/data/tokenizer/ (tokenizer files and expected.json), and the code of the moex::Error a call raises.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "moex/error.h"
#include "src/tokenizer/utf8.h"

#ifndef MOEX_TEST_DATA_DIR
#define MOEX_TEST_DATA_DIR "tests/data"
#endif

namespace moex::tokenizer_test {

using Json = nlohmann::json;

inline const std::vector<std::string> kFixtures = {"qwen2",         "mixtral",           "olmoe",
                                                   "metaspace_unk", "variant_bytelevel", "variant_metaspace"};

inline std::string fixture_path(const std::string& name) {
    return std::string(MOEX_TEST_DATA_DIR) + "/tokenizer/" + name + ".json";
}

inline std::string read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

// expected.json: {"strings": [...], "tokenizers": {name: {"vocab_size", "cases", "single_id", "random"}}}.
inline const Json& expected() {
    static const Json j = Json::parse(read_file(fixture_path("expected")));
    return j;
}

inline std::vector<int32_t> ids_of(const Json& j) { return j.get<std::vector<int32_t>>(); }

inline bool valid_utf8(const std::string& s) { return tok::find_invalid_utf8(s) == std::string::npos; }

// The code of the moex::Error that `f` raises (fails the test when it raises nothing or something else).
template <typename F>
ErrorCode error_code_of(F&& f, std::string* message = nullptr) {
    try {
        f();
    } catch (const Error& e) {
        if (message != nullptr) *message = e.what();
        return e.code();
    } catch (const std::exception& e) {
        ADD_FAILURE() << "not a moex::Error: " << e.what();
        return ErrorCode::kIo;
    }
    ADD_FAILURE() << "no error raised";
    return ErrorCode::kIo;
}

}  // namespace moex::tokenizer_test
