// Tokenizer tests of the parts and of bad input: UTF-8 handling, split behaviors and regex classes as `tokenizers`
// (Oniguruma) has them, both merges spellings, malformed files and ids (clear errors, never a crash).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "moex/tokenizer.h"
#include "src/tokenizer/pre_tokenizer.h"
#include "tests/tokenizer_fixtures.h"

namespace {

using moex::ErrorCode;
using moex::Tokenizer;
using moex::TokenStreamer;
using namespace moex::tokenizer_test;

TEST(TokenizerUtf8, InvalidInputIsRejected) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("qwen2"));
    for (const std::string bad : {"\xff", "abc\xc3", "\xed\xa0\x80", "\xc0\xaf", "\xf4\x90\x80\x80", "ok\x80"}) {
        std::string message;
        EXPECT_EQ(error_code_of([&] { tok.encode(bad); }, &message), ErrorCode::kInvalidArgument);
        EXPECT_NE(message.find("UTF-8"), std::string::npos) << message;
    }
    EXPECT_EQ(tok.encode(std::string("a\0b", 3), false).size(), 3u);  // NUL is valid text
}

TEST(TokenizerUtf8, LossyMatchesRust) {
    using moex::tok::utf8_lossy;
    const std::string r(moex::tok::kReplacementChar);
    const std::string truncated = "\xe2\x82";         // the first two bytes of €
    EXPECT_EQ(utf8_lossy("a" + truncated), "a" + r);  // a truncated sequence: one U+FFFD
    EXPECT_EQ(utf8_lossy(truncated + "b"), r + "b");
    EXPECT_EQ(utf8_lossy("\xed\xa0\x80"), r + r + r);  // a surrogate: one per byte
    EXPECT_EQ(utf8_lossy("\xf0\x9f\x8d\x95"), "🍕");
    EXPECT_EQ(utf8_lossy(std::string("\xf0\x9f\x8d") + "x\xff"), r + "x" + r);
}

std::vector<std::string> pre_tokenize(const std::string& json, const std::string& text) {
    auto p = moex::tok::PreTokenizer::parse(Json::parse(json), "test");
    std::vector<moex::tok::Piece> out;
    p->apply({text, true}, out);
    std::vector<std::string> words;
    for (auto& w : out) words.push_back(w.text);
    return words;
}

TEST(TokenizerPreTokenizer, SplitBehaviorsMatchTokenizers) {
    // Expected lists printed by tokenizers' pre_tokenizers.Split("-", behavior, invert).pre_tokenize_str(...).
    using V = std::vector<std::string>;
    const std::string text = "the-final--countdown-";
    auto split = [&](const char* behavior, bool invert) {
        return pre_tokenize(std::string(R"({"type":"Split","pattern":{"String":"-"},"behavior":")") + behavior +
                                R"(","invert":)" + (invert ? "true" : "false") + "}",
                            text);
    };
    EXPECT_EQ(split("Removed", false), (V{"the", "final", "countdown"}));
    EXPECT_EQ(split("Removed", true), (V{"-", "-", "-", "-"}));
    EXPECT_EQ(split("Isolated", false), (V{"the", "-", "final", "-", "-", "countdown", "-"}));
    EXPECT_EQ(split("MergedWithPrevious", false), (V{"the-", "final-", "-", "countdown-"}));
    EXPECT_EQ(split("MergedWithPrevious", true), (V{"the", "-final", "-", "-countdown", "-"}));
    EXPECT_EQ(split("MergedWithNext", false), (V{"the", "-final", "-", "-countdown", "-"}));
    EXPECT_EQ(split("MergedWithNext", true), (V{"the-", "final-", "-", "countdown-"}));
    EXPECT_EQ(split("Contiguous", false), (V{"the", "-", "final", "--", "countdown", "-"}));
    // Empty regex matches cut the text as Oniguruma's iteration does.
    EXPECT_EQ(
        pre_tokenize(R"({"type":"Split","pattern":{"Regex":"\\s*"},"behavior":"Isolated","invert":false})", "ab  c"),
        (V{"a", "b", "  ", "c"}));
    // Oniguruma's \s takes U+0085 (NEL) in, PCRE2's does not: the regexes are widened to keep `tokenizers`' cuts.
    EXPECT_EQ(pre_tokenize(R"({"type":"Split","pattern":{"Regex":"\\s+"},"behavior":"Removed","invert":false})",
                           "a\u0085b c"),
              (V{"a", "b", "c"}));
    EXPECT_EQ(pre_tokenize(R"({"type":"Split","pattern":{"Regex":"[^\\s]+"},"behavior":"Removed","invert":false})",
                           "a\u0085b c"),
              (V{"\u0085", " "}));
    EXPECT_EQ(pre_tokenize(R"({"type":"Split","pattern":{"Regex":"\\S+"},"behavior":"Removed","invert":false})",
                           "a\u0085b c"),
              (V{"\u0085", " "}));
    // Oniguruma's \w: alphabetic (Ⓐ), marks (U+0300, U+FE0F), not ZWNJ nor ⁵; outside [...] also ².
    const std::string word_text = "aⒶb e\u200cf i\u0300j k²l s⁵t ❤\ufe0f";
    EXPECT_EQ(
        pre_tokenize(R"({"type":"Split","pattern":{"Regex":"\\w+"},"behavior":"Isolated","invert":false})", word_text),
        (V{"aⒶb", " ", "e", "\u200c", "f", " ", "i\u0300j", " ", "k²l", " ", "s", "⁵", "t", " ❤", "\ufe0f"}));
    EXPECT_EQ(
        pre_tokenize(R"({"type":"Split","pattern":{"Regex":"[\\w]+"},"behavior":"Isolated","invert":false})",
                     word_text),
        (V{"aⒶb", " ", "e", "\u200c", "f", " ", "i\u0300j", " ", "k", "²", "l", " ", "s", "⁵", "t", " ❤", "\ufe0f"}));
    EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":false})", "a123b4 5"),
              (V{"a", "123", "b", "4", " ", "5"}));
    EXPECT_EQ(pre_tokenize(R"({"type":"Digits","individual_digits":true})", "a123b4 5"),
              (V{"a", "1", "2", "3", "b", "4", " ", "5"}));
    EXPECT_EQ(pre_tokenize(R"({"type":"Metaspace","replacement":"▁","prepend_scheme":"always","split":true})",
                           "hello  world "),
              (V{"▁hello", "▁", "▁world", "▁"}));
    EXPECT_EQ(pre_tokenize(R"({"type":"ByteLevel","add_prefix_space":true,"use_regex":true})", "hello  world "),
              (V{"Ġhello", "Ġ", "Ġworld", "Ġ"}));
}

// A tiny BPE tokenizer.json (vocab a, b, ab, c) with the given merges and extra top-level fields.
std::string tiny_json(const std::string& merges, const std::string& extra = "") {
    return R"({"model":{"type":"BPE","vocab":{"a":0,"b":1,"ab":2,"c":3},"merges":)" + merges + "}" + extra + "}";
}

TEST(TokenizerModel, BothMergeSpellings) {
    const Tokenizer strings = Tokenizer::from_json(tiny_json(R"(["a b"])"));
    const Tokenizer pairs = Tokenizer::from_json(tiny_json(R"([["a","b"]])"));
    EXPECT_EQ(strings.encode("abcab"), (std::vector<int32_t>{2, 3, 2}));
    EXPECT_EQ(pairs.encode("abcab"), (std::vector<int32_t>{2, 3, 2}));
    EXPECT_EQ(pairs.decode({2, 3}), "ab c");  // no decoder: tokens joined by spaces
    // No unknown token and no byte fallback: characters outside the vocabulary are dropped (then a and b merge),
    // as `tokenizers` does.
    EXPECT_EQ(pairs.encode("axb"), (std::vector<int32_t>{2}));
}

TEST(TokenizerErrors, MalformedFilesGiveClearErrors) {
    struct Case {
        std::string json;
        ErrorCode code;
        std::string says;  // a piece of the message
    };
    const std::vector<Case> cases = {
        {"this is not JSON", ErrorCode::kFormat, "not valid JSON"},
        {"[1, 2]", ErrorCode::kFormat, "object"},
        {"{}", ErrorCode::kFormat, "model"},
        {R"({"model":{"type":"Unigram","vocab":[]}})", ErrorCode::kUnsupported, "Unigram"},
        {R"({"model":{"type":"WordPiece","vocab":{}}})", ErrorCode::kUnsupported, "WordPiece"},
        {R"({"model":{"type":"BPE","vocab":{"a":0}}})", ErrorCode::kFormat, "merges"},
        {tiny_json(R"(["a z"])"), ErrorCode::kFormat, "merges[0]"},
        {tiny_json(R"(["a c"])"), ErrorCode::kFormat, "\"ac\""},
        {tiny_json(R"(["a b c"])"), ErrorCode::kFormat, "merges[0]"},
        {tiny_json(R"([["a"]])"), ErrorCode::kFormat, "merges[0]"},
        {tiny_json("[7]"), ErrorCode::kFormat, "merges[0]"},
        {R"({"model":{"type":"BPE","vocab":{"a":-1},"merges":[]}})", ErrorCode::kFormat, "vocab"},
        {R"({"model":{"type":"BPE","vocab":{"a":"x"},"merges":[]}})", ErrorCode::kFormat, "vocab"},
        {R"({"model":{"type":"BPE","vocab":{"a":2000000000},"merges":[]}})", ErrorCode::kFormat, "sparse"},
        {R"({"model":{"type":"BPE","vocab":[],"merges":[]}})", ErrorCode::kFormat, "vocab"},
        {R"({"model":{"type":"BPE","vocab":{"a":0},"merges":[],"unk_token":"<unk>"}})", ErrorCode::kFormat, "unk"},
        {tiny_json("[]", R"(,"normalizer":{"type":"Precompiled"})"), ErrorCode::kUnsupported, "Precompiled"},
        {tiny_json("[]", R"(,"normalizer":{"kind":"NFC"})"), ErrorCode::kFormat, "normalizer"},
        {tiny_json("[]", R"(,"pre_tokenizer":{"type":"Whitespace"})"), ErrorCode::kUnsupported, "Whitespace"},
        {tiny_json("[]", R"(,"pre_tokenizer":{"type":"Split","pattern":{"Regex":"(unclosed"},"behavior":"Isolated"})"),
         ErrorCode::kFormat, "does not compile"},
        {tiny_json("[]", R"(,"pre_tokenizer":{"type":"Split","pattern":{"String":"-"},"behavior":"Sideways"})"),
         ErrorCode::kFormat, "Sideways"},
        {tiny_json("[]", R"(,"decoder":{"type":"CTC"})"), ErrorCode::kUnsupported, "CTC"},
        {tiny_json(
             "[]",
             R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{}})"),
         ErrorCode::kFormat, "<s>"},
        {tiny_json(
             "[]",
             R"(,"post_processor":{"type":"TemplateProcessing","single":[{"SpecialToken":{"id":"<s>","type_id":0}},{"Sequence":{"id":"A","type_id":0}}],"special_tokens":{"<s>":{"id":"<s>","ids":[99],"tokens":["<s>"]}}})"),
         ErrorCode::kFormat, "99"},
        {tiny_json("[]", R"(,"added_tokens":[{"content":"<s>"}])"), ErrorCode::kFormat, "added_tokens[0]"},
        {tiny_json("[]", R"(,"added_tokens":{"id":4})"), ErrorCode::kFormat, "added_tokens"},
    };
    for (const Case& c : cases) {
        std::string message;
        EXPECT_EQ(error_code_of([&] { Tokenizer::from_json(c.json, "t.json"); }, &message), c.code) << c.json;
        EXPECT_NE(message.find(c.says), std::string::npos) << "message \"" << message << "\" lacks " << c.says;
        EXPECT_NE(message.find("t.json"), std::string::npos) << message;
    }
    EXPECT_EQ(error_code_of([] { Tokenizer::from_file("/nonexistent/tokenizer.json"); }), ErrorCode::kNotFound);
}

TEST(TokenizerErrors, DeepNestingIsRefused) {
    std::string nested = R"({"type":"NFC"})";
    for (int i = 0; i < 40; ++i) nested = R"({"type":"Sequence","normalizers":[)" + nested + "]}";
    std::string message;
    EXPECT_EQ(error_code_of([&] { Tokenizer::from_json(tiny_json("[]", ",\"normalizer\":" + nested)); }, &message),
              ErrorCode::kFormat);
    EXPECT_NE(message.find("nested"), std::string::npos) << message;
    const std::string deep_json = std::string(100000, '[') + std::string(100000, ']');
    EXPECT_EQ(error_code_of([&] { Tokenizer::from_json(deep_json); }), ErrorCode::kFormat);
}

TEST(TokenizerErrors, TruncatedFilesNeverCrash) {
    const std::string text = read_file(fixture_path("mixtral"));
    for (size_t cut = 0; cut < text.size(); cut += text.size() / 97 + 1) {
        EXPECT_EQ(error_code_of([&] { Tokenizer::from_json(text.substr(0, cut)); }), ErrorCode::kFormat) << cut;
    }
}

TEST(TokenizerErrors, DecodeSkipsIdsWithoutATokenAndRejectsNegativeOnes) {
    const Tokenizer tok = Tokenizer::from_file(fixture_path("mixtral"));
    std::string message;
    EXPECT_EQ(error_code_of([&] { tok.decode({1, -1}); }, &message), ErrorCode::kInvalidArgument);
    EXPECT_NE(message.find("-1"), std::string::npos);
    // Past the vocabulary (a model's vocab_size may exceed its tokenizer's) and holes decode to nothing, as in
    // `tokenizers`.
    const std::vector<int32_t> ids = tok.encode("Hello", false);
    std::vector<int32_t> padded = ids;
    padded.insert(padded.begin() + 1, static_cast<int32_t>(tok.vocab_size()) + 1000);
    EXPECT_EQ(tok.decode(padded), tok.decode(ids));
    const Tokenizer holes = Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":0,"b":2},"merges":[]}})");
    EXPECT_EQ(holes.vocab_size(), 3);
    EXPECT_EQ(holes.decode({0, 1, 2}), holes.decode({0, 2}));
}

}  // namespace
