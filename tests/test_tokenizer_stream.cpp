// The streamer decodes only the ids since its last cut: its pieces must be those of decoding every prefix again
// (the streamer before the cuts, kept here as the reference), on every fixture and on decoder chains it cannot cut,
// and streaming must take time linear in the number of ids.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <string>
#include <vector>

#include "moex/tokenizer.h"
#include "tests/tokenizer_fixtures.h"

namespace {

using moex::Tokenizer;
using moex::TokenStreamer;
using namespace moex::tokenizer_test;

// The streamer as it was: every push decodes ids[0, stable) again and returns what lies past the returned bytes.
class PrefixStreamer {
   public:
    PrefixStreamer(const Tokenizer& tok, bool skip) : tok_(tok), skip_(skip) {}
    std::string push(int32_t id) {
        ids_.push_back(id);
        size_t stable = ids_.size();
        while (stable > 0 && byte_token(ids_[stable - 1])) --stable;
        if (stable == 0) return {};
        const std::string text = tok_.decode(std::vector<int32_t>(ids_.begin(), ids_.begin() + long(stable)), skip_);
        size_t end = text.size();
        const std::string fffd(moex::tok::kReplacementChar);
        while (end >= emitted_ + 3 && text.compare(end - 3, 3, fffd) == 0) end -= 3;
        if (end <= emitted_) return {};
        std::string out = rest(text.substr(0, end), emitted_);
        emitted_ = end;
        return out;
    }
    std::string finish() { return rest(tok_.decode(ids_, skip_), emitted_); }

   private:
    bool byte_token(int32_t id) const {
        const auto t = tok_.id_to_token(id);
        return t && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
    }
    static std::string rest(const std::string& text, size_t from) {
        while (from < text.size() && (static_cast<unsigned char>(text[from]) & 0xC0) == 0x80) ++from;
        return from < text.size() ? text.substr(from) : std::string();
    }
    const Tokenizer& tok_;
    bool skip_;
    std::vector<int32_t> ids_;
    size_t emitted_ = 0;
};

// Streams ids through both and expects the same piece from every push and from finish; returns the whole text.
std::string expect_same_pieces(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                               const std::string& what) {
    TokenStreamer s(tok, skip);
    PrefixStreamer ref(tok, skip);
    std::string all;
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string got = s.push(ids[i]), want = ref.push(ids[i]);
        EXPECT_EQ(got, want) << what << ": push " << i << " (id " << ids[i] << ")";
        if (got != want) return all;
        all += got;
    }
    const std::string got = s.finish(), want = ref.finish();
    EXPECT_EQ(got, want) << what << ": finish";
    return all + got;
}

// Ids drawn from the whole vocabulary, with runs of <0xNN> tokens, special tokens and ids without a token mixed in.
std::vector<int32_t> random_ids(const Tokenizer& tok, size_t n, uint64_t seed) {
    std::mt19937_64 rng(seed);
    const auto vocab = int32_t(tok.vocab_size());
    std::vector<int32_t> bytes;
    for (int b = 0; b < 256; ++b) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", b);
        if (auto id = tok.token_to_id(name)) bytes.push_back(*id);
    }
    std::vector<int32_t> ids;
    while (ids.size() < n) {
        const uint64_t r = rng() % 16;
        if (r == 0 && !bytes.empty()) {
            for (uint64_t j = rng() % 5; j-- > 0;) ids.push_back(bytes[rng() % bytes.size()]);
        } else if (r == 1) {
            ids.push_back(vocab + int32_t(rng() % 3));  // no token: decodes to nothing
        } else {
            ids.push_back(int32_t(rng() % uint64_t(vocab)));
        }
    }
    return ids;
}

TEST(TokenizerStream, PiecesEqualDecodingEveryPrefix) {
    const Json& strings = expected()["strings"];
    for (const std::string& name : kFixtures) {
        const Tokenizer tok = Tokenizer::from_file(fixture_path(name));
        for (const bool skip : {false, true}) {
            for (size_t i = 0; i < strings.size(); ++i) {
                const std::string text = strings[i].get<std::string>();
                const std::vector<int32_t> ids = tok.encode(text, true);
                const std::string all = expect_same_pieces(tok, ids, skip, name + " string " + std::to_string(i));
                EXPECT_TRUE(all == tok.decode(ids, skip))
                    << name << " string " << i << ": the streamed text is not the full decode";
            }
            for (uint64_t seed = 1; seed <= 12; ++seed)
                expect_same_pieces(tok, random_ids(tok, 300, seed), skip,
                                   name + " random seed " + std::to_string(seed));
        }
    }
}

// Chains beyond the fixtures': ones never cut (a Replace after Fuse, a trailing Strip, a Metaspace before
// ByteFallback: their steps see across token boundaries), one cut after its join (a Metaspace and a leading Strip of
// the whole text), and no decoder at all (tokens joined by spaces).
TEST(TokenizerStream, OtherDecoderChainsStreamAsBefore) {
    Json j = Json::parse(read_file(fixture_path("mixtral")));
    const Json chains[] = {
        Json::parse(R"({"type": "Sequence", "decoders": [{"type": "Fuse"},
                        {"type": "Replace", "pattern": {"String": "e▁"}, "content": "#"}]})"),
        Json::parse(
            R"({"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1,
                        "stop": 1}]})"),
        Json::parse(R"({"type": "Sequence", "decoders": [{"type": "Metaspace", "replacement": "▁",
                        "prepend_scheme": "first"}, {"type": "ByteFallback"}, {"type": "Fuse"}]})"),
        Json::parse(R"({"type": "Sequence", "decoders": [{"type": "ByteFallback"}, {"type": "Fuse"},
                        {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always"},
                        {"type": "Strip", "content": "a", "start": 3, "stop": 0}]})"),
        Json(nullptr),
    };
    int n = 0;
    for (const Json& chain : chains) {
        j["decoder"] = chain;
        const Tokenizer tok = Tokenizer::from_json(j.dump());
        for (uint64_t seed = 1; seed <= 6; ++seed)
            expect_same_pieces(tok, random_ids(tok, 200, seed), seed % 2, "chain " + std::to_string(n));
        const std::vector<int32_t> ids = tok.encode("Hello there, I love 🍕 and the sea", false);
        expect_same_pieces(tok, ids, false, "chain " + std::to_string(n) + " text");
        ++n;
    }
}

// 60,000 ids: decoding every prefix again took ~0.1 ms per push per 1,000 ids before (6,295 ids in 0.63 s, so these
// would take about a minute); with cuts each push decodes a few ids.
TEST(TokenizerStream, StreamingIsLinearInTheIdCount) {
    for (const std::string& name : {std::string("qwen2"), std::string("mixtral"), std::string("metaspace_unk")}) {
        const Tokenizer tok = Tokenizer::from_file(fixture_path(name));
        std::string text;
        const Json& strings = expected()["strings"];
        std::vector<int32_t> ids;
        for (size_t i = 0; ids.size() < 60000; ++i) {
            const auto more = tok.encode(strings[i % strings.size()].get<std::string>() + " ", false);
            ids.insert(ids.end(), more.begin(), more.end());
        }
        const auto t0 = std::chrono::steady_clock::now();
        TokenStreamer s(tok);
        std::string all;
        for (const int32_t id : ids) all += s.push(id);
        all += s.finish();
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("  %s: %zu ids streamed in %.1f ms\n", name.c_str(), ids.size(), secs * 1e3);
        EXPECT_TRUE(all == tok.decode(ids, true)) << name << ": the streamed text is not the full decode";
        EXPECT_LT(secs, 5.0) << name << ": streaming is not linear";
    }
}

}  // namespace
