// Tokenizer tests against Hugging Face `tokenizers`: exact ids and text on the fixtures that
// tests/data/make_tokenizer_fixtures.py trains (tests/data/tokenizer/), special tokens, the streamer, and speed.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "moex/tokenizer.h"
#include "tests/tokenizer_fixtures.h"

namespace {

using moex::ErrorCode;
using moex::Tokenizer;
using moex::TokenStreamer;
using namespace moex::tokenizer_test;

// Concatenated pushes + finish, checking that every piece is whole UTF-8.
std::string stream(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip) {
    TokenStreamer s(tok, skip);
    std::string text;
    for (const int32_t id : ids) {
        const std::string piece = s.push(id);
        EXPECT_TRUE(valid_utf8(piece)) << "push(" << id << ") returned a cut character";
        text += piece;
    }
    const std::string rest = s.finish();
    EXPECT_TRUE(valid_utf8(rest));
    return text + rest;
}

class TokenizerFixture : public ::testing::TestWithParam<std::string> {
   protected:
    const Json& cases() const { return expected()["tokenizers"][GetParam()]; }
};

TEST_P(TokenizerFixture, EncodesLikeTokenizers) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path(GetParam()));
    EXPECT_EQ(tok.vocab_size(), cases()["vocab_size"].get<int64_t>());
    const Json& strings = expected()["strings"];
    ASSERT_EQ(cases()["cases"].size(), strings.size());
    ASSERT_GE(strings.size(), 40u);
    for (size_t i = 0; i < strings.size(); ++i) {
        const std::string text = strings[i].get<std::string>();
        SCOPED_TRACE("string " + std::to_string(i) + ": " + text.substr(0, 80));
        const Json& c = cases()["cases"][i];
        EXPECT_EQ(tok.encode(text, true), ids_of(c["ids"]));
        EXPECT_EQ(tok.encode(text, false), ids_of(c["ids_no_special"]));
    }
}

TEST_P(TokenizerFixture, DecodesLikeTokenizers) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path(GetParam()));
    for (const Json& c : cases()["cases"]) {
        EXPECT_EQ(tok.decode(ids_of(c["ids"]), false), c["decoded"].get<std::string>());
        EXPECT_EQ(tok.decode(ids_of(c["ids"]), true), c["decoded_skip"].get<std::string>());
    }
    const Json& single = cases().value("single_id", Json::array());
    for (size_t id = 0; id < single.size(); ++id) {
        EXPECT_EQ(tok.decode({static_cast<int32_t>(id)}, false), single[id].get<std::string>()) << "id " << id;
    }
    for (const Json& c : cases()["random"]) {
        EXPECT_EQ(tok.decode(ids_of(c["ids"]), false), c["decoded"].get<std::string>()) << c["ids"].dump();
        EXPECT_EQ(tok.decode(ids_of(c["ids"]), true), c["decoded_skip"].get<std::string>()) << c["ids"].dump();
    }
}

TEST_P(TokenizerFixture, StreamedTextEqualsDecode) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path(GetParam()));
    std::vector<std::vector<int32_t>> sequences;
    for (const Json& c : cases()["cases"]) sequences.push_back(ids_of(c["ids"]));
    for (const Json& c : cases()["random"]) sequences.push_back(ids_of(c["ids"]));
    for (const auto& ids : sequences) {
        for (const bool skip : {true, false}) {
            EXPECT_EQ(stream(tok, ids, skip), tok.decode(ids, skip)) << Json(ids).dump() << " skip " << skip;
        }
    }
}

TEST_P(TokenizerFixture, TokenLookups) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path(GetParam()));
    for (int32_t id = 0; id < tok.vocab_size(); ++id) {
        const auto token = tok.id_to_token(id);
        ASSERT_TRUE(token.has_value()) << "id " << id;
        EXPECT_EQ(tok.token_to_id(*token), id) << *token;
    }
    EXPECT_FALSE(tok.id_to_token(-1).has_value());
    EXPECT_FALSE(tok.id_to_token(static_cast<int32_t>(tok.vocab_size())).has_value());
    EXPECT_FALSE(tok.token_to_id("no such token, surely").has_value());
}

INSTANTIATE_TEST_SUITE_P(Tokenizer, TokenizerFixture, ::testing::ValuesIn(kFixtures),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

TEST(TokenizerSpecial, FlagsAndTemplates) {
    const Tokenizer qwen = Tokenizer::from_file(fixture_path("qwen2"));
    const auto im_start = qwen.token_to_id("<|im_start|>");
    ASSERT_TRUE(im_start.has_value());
    EXPECT_TRUE(qwen.is_special(*im_start));
    EXPECT_FALSE(qwen.is_special(*qwen.token_to_id("café")));  // added, not special
    EXPECT_FALSE(qwen.is_special(0));
    EXPECT_EQ(qwen.encode("", true), std::vector<int32_t>{});

    const Tokenizer mixtral = Tokenizer::from_file(fixture_path("mixtral"));
    EXPECT_EQ(mixtral.encode("", true), std::vector<int32_t>{1});  // the template's <s>
    EXPECT_EQ(mixtral.encode("", false), std::vector<int32_t>{});
    EXPECT_TRUE(mixtral.is_special(1));
}

TEST(TokenizerStreamer, ByteFallbackGroupsStayWhole) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("mixtral"));
    std::vector<int32_t> ids = tok.encode("I love 🍕!", false);
    const auto f0 = tok.token_to_id("<0xF0>");
    ASSERT_TRUE(f0.has_value());
    ASSERT_NE(std::find(ids.begin(), ids.end(), *f0), ids.end()) << "the fixture should spell 🍕 with byte tokens";
    TokenStreamer s(tok);
    std::vector<std::string> pieces;
    for (const int32_t id : ids) pieces.push_back(s.push(id));
    pieces.push_back(s.finish());
    std::string all;
    for (const auto& p : pieces) {
        EXPECT_EQ(p.find(moex::tok::kReplacementChar), std::string::npos) << "a byte group was cut: " << p;
        all += p;
    }
    EXPECT_EQ(all, "I love 🍕!");

    // A group still open at the end comes out of finish() as decode has it.
    TokenStreamer open(tok);
    EXPECT_EQ(open.push(*tok.token_to_id("<0xE2>")), "");
    EXPECT_EQ(open.push(*tok.token_to_id("<0x82>")), "");
    EXPECT_EQ(open.finish(), tok.decode({*tok.token_to_id("<0xE2>"), *tok.token_to_id("<0x82>")}, true));
}

TEST(TokenizerStreamer, ByteLevelNeverCutsACharacter) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("qwen2"));
    const std::string text = "emoji 🍕🎉 and 中文 and 👨‍👩‍👧‍👦 end";
    const std::vector<int32_t> ids = tok.encode(text, false);
    TokenStreamer s(tok);
    std::string all;
    for (const int32_t id : ids) {
        const std::string piece = s.push(id);
        EXPECT_TRUE(valid_utf8(piece));
        EXPECT_EQ(piece.find(moex::tok::kReplacementChar), std::string::npos);
        all += piece;
    }
    all += s.finish();
    EXPECT_EQ(all, text);
}

TEST(TokenizerStreamer, RejectsBadIdsAndKeepsGoing) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("olmoe"));
    const std::vector<int32_t> ids = tok.encode("Hello world", false);
    TokenStreamer s(tok);
    std::string all = s.push(ids[0]);
    EXPECT_EQ(error_code_of([&] { s.push(-5); }), ErrorCode::kInvalidArgument);
    EXPECT_EQ(s.push(static_cast<int32_t>(tok.vocab_size())), "");  // no token: nothing, as `tokenizers` decodes it
    for (size_t i = 1; i < ids.size(); ++i) all += s.push(ids[i]);
    all += s.finish();
    EXPECT_EQ(all, "Hello world");
}

std::string large_text(size_t bytes) {
    std::string text;
    const Json& strings = expected()["strings"];
    for (size_t i = 0; text.size() < bytes; ++i) {
        text += strings[i % strings.size()].get<std::string>();
        text += i % 7 == 0 ? "\n" : " ";
    }
    return text;
}

TEST(TokenizerSpeed, Encodes100KBWellUnderASecond) {
    const std::string text = large_text(100 * 1024);
    for (const std::string& name : kFixtures) {
        const Tokenizer tok = Tokenizer::from_file(fixture_path(name));
        const auto t0 = std::chrono::steady_clock::now();
        const auto ids = tok.encode(text, false);
        const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %s: %zu bytes -> %zu ids in %.1f ms\n", name.c_str(), text.size(), ids.size(), s * 1e3);
        EXPECT_LT(s, 1.0) << name;
        EXPECT_EQ(tok.decode(ids, false).size() > 0, true);
    }
}

TEST(TokenizerSpeed, ConcurrentEncodesAgree) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("qwen2"));
    const std::string text = large_text(20 * 1024);
    const auto reference = tok.encode(text);
    std::vector<std::vector<int32_t>> results(4);
    std::vector<std::thread> threads;
    for (auto& r : results) threads.emplace_back([&] { r = tok.encode(text); });
    for (auto& t : threads) t.join();
    for (const auto& r : results) EXPECT_EQ(r, reference);
}

}  // namespace
