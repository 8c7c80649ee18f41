// Hostile or careless checkpoints (issue #13): configs that would make the loader loop for minutes, shard indexes
// that name a tensor twice or disagree with their shards, tensors config.json does not account for, symlinks out of
// the checkpoint directory (the hub cache's snapshot -> blob links excepted), and sampling at edge temperatures.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "moex/error.h"
#include "moex/model_config.h"
#include "src/model/sampler.h"
#include "src/model/weights/weights.h"
#include "tests/test_support.h"
#include "tests/tiny_checkpoint.h"

namespace moex {
namespace {

namespace fs = std::filesystem;
using test::expect_error;
using test::TinyCheckpointOptions;

std::string read(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}
void write(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }

model::ModelWeights load(const std::string& dir) {
    return model::load_weights(dir, load_model_config(dir), {.dtype = DType::kF32, .progress = false});
}

std::string checkpoint(const TinyCheckpointOptions& o) {
    const std::string dir = test::temp_path("checkpoint");
    test::write_tiny_checkpoint(dir, o);
    return dir;
}

void edit_config(const std::string& dir, const std::function<void(nlohmann::ordered_json&)>& edit) {
    nlohmann::ordered_json c = nlohmann::ordered_json::parse(read(fs::path(dir) / "config.json"));
    edit(c);
    write(fs::path(dir) / "config.json", c.dump());
}

void replace_in(const fs::path& file, const std::string& from, const std::string& to) {
    std::string text = read(file);
    const size_t at = text.find(from);
    ASSERT_NE(at, std::string::npos) << from;
    text.replace(at, from.size(), to);
    write(file, text);
}

TEST(ModelHardening, HugeLayerCountsAreRefusedAtOnce) {
    const std::string tiny = test::tiny_config_json({});
    auto with = [&](const std::string& field) {
        nlohmann::ordered_json c = nlohmann::ordered_json::parse(tiny);
        c.merge_patch(nlohmann::ordered_json::parse(field));
        return c.dump();
    };
    const auto t0 = std::chrono::steady_clock::now();
    // 2^31 - 1 MoE layers and 600 mlp_only_layers entries past the end: a scan of is_moe_layer per layer (each
    // over the list) took ~12 minutes before anything was checked.
    nlohmann::ordered_json c = nlohmann::ordered_json::parse(with(R"({"num_hidden_layers": 2147483647})"));
    for (int i = 0; i < 600; ++i) c["mlp_only_layers"].push_back(2147483000 + i);
    expect_error([&] { parse_model_config(c.dump(), "", "config.json"); }, ErrorCode::kFormat,
                 "config.json: num_hidden_layers is 2147483647; moex loads at most 4096 layers");
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    expect_error([&] { parse_model_config(with(R"({"mlp_only_layers": [0, 2]})"), "", "config.json"); },
                 ErrorCode::kFormat,
                 "config.json: mlp_only_layers names layer 2, outside the num_hidden_layers=2 layers");
    expect_error([&] { parse_model_config(with(R"({"mlp_only_layers": [1, 1]})"), "", "config.json"); },
                 ErrorCode::kFormat, "config.json: mlp_only_layers names layer 1 twice");
    // The dense-layer check still sees dense layers (intermediate_size is then required).
    expect_error(
        [&] { parse_model_config(with(R"({"mlp_only_layers": [1], "intermediate_size": 0})"), "", "config.json"); },
        ErrorCode::kFormat, "config.json: intermediate_size must be between 1 and");
    expect_error(
        [&] { parse_model_config(with(R"({"decoder_sparse_step": 2, "intermediate_size": 0})"), "", "config.json"); },
        ErrorCode::kFormat, "config.json: intermediate_size must be between 1 and");
    EXPECT_NO_THROW(parse_model_config(with(R"({"intermediate_size": 0})"), "", "config.json"));  // all MoE
}

TEST(ModelHardening, IndexNamingATensorTwiceIsRefused) {
    TinyCheckpointOptions o;
    o.shards = 3;
    const std::string dir = checkpoint(o);
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    // The last entry used to win silently.
    replace_in(index, "\"model.norm.weight\": ",
               "\"model.norm.weight\": \"model-00001-of-00003.safetensors\", "
               "\"model.norm.weight\": ");
    expect_error([&] { load(dir); }, ErrorCode::kFormat,
                 "model.safetensors.index.json: key `model.norm.weight` appears twice in `weight_map`");
}

TEST(ModelHardening, ATensorInTwoShardsIsRefused) {
    TinyCheckpointOptions o;
    o.shards = 3;
    const std::string dir = checkpoint(o);
    const std::string index = read(fs::path(dir) / "model.safetensors.index.json");
    // A second copy, with different bytes, of a tensor the index lists in another shard.
    std::string home;
    for (int s = 1; s <= 3; ++s) {
        const std::string shard = "model-0000" + std::to_string(s) + "-of-00003.safetensors";
        if (index.find("\"model.norm.weight\": \"" + shard + "\"") != std::string::npos) home = shard;
    }
    ASSERT_FALSE(home.empty());
    const std::string other = home == "model-00001-of-00003.safetensors" ? "model-00002-of-00003.safetensors"
                                                                         : "model-00001-of-00003.safetensors";
    test::edit_safetensors((fs::path(dir) / other).string(), [&](std::vector<test::RawTensor>& ts) {
        ts.push_back({"model.norm.weight", "F32", {o.hidden}, std::vector<uint8_t>(size_t(o.hidden) * 4, 0)});
    });
    expect_error([&] { load(dir); }, ErrorCode::kFormat,
                 other + ": holds tensor `model.norm.weight`, which " + dir +
                     "/model.safetensors.index.json lists in shard `" + home + "`: one tensor in two shards");
}

TEST(ModelHardening, ShardAndIndexMustAgree) {
    TinyCheckpointOptions o;
    o.shards = 3;
    const std::string dir = checkpoint(o);
    const std::string shard = (fs::path(dir) / "model-00002-of-00003.safetensors").string();
    test::edit_safetensors(shard, [&](std::vector<test::RawTensor>& ts) {
        ts.push_back({"model.unlisted.weight", "F32", {1}, std::vector<uint8_t>(4, 0)});
    });
    expect_error(
        [&] { load(dir); }, ErrorCode::kFormat,
        shard + ": holds tensor `model.unlisted.weight`, which " + dir + "/model.safetensors.index.json does not list");

    const std::string dir2 = checkpoint(o);
    replace_in(fs::path(dir2) / "model.safetensors.index.json", "\"weight_map\": {",
               "\"weight_map\": {\"model.ghost.weight\": \"model-00002-of-00003.safetensors\", ");
    expect_error([&] { load(dir2); }, ErrorCode::kFormat,
                 "model-00002-of-00003.safetensors: has no tensor `model.ghost.weight`, which");
}

TEST(ModelHardening, MoreLayersThanConfigSaysIsRefused) {
    TinyCheckpointOptions o;
    o.layers = 3;
    const std::string dir = checkpoint(o);
    edit_config(dir, [](auto& c) { c["num_hidden_layers"] = 2; });  // layer 2's tensors used to be ignored
    expect_error([&] { load(dir); }, ErrorCode::kFormat,
                 "tensors are not used by the qwen3_moe model config.json describes (num_hidden_layers=2, "
                 "num_experts=4): `model.layers.2.");
    const std::string sharded = checkpoint({.shards = 3, .layers = 3});
    edit_config(sharded, [](auto& c) { c["num_hidden_layers"] = 2; });
    expect_error([&] { load(sharded); }, ErrorCode::kFormat, "model.safetensors.index.json and its 3 shards: ");
}

TEST(ModelHardening, MoreExpertsOrStrayTensorsAreRefused) {
    const std::string dir = checkpoint({});
    const std::string file = (fs::path(dir) / "model.safetensors").string();
    test::edit_safetensors(file, [](std::vector<test::RawTensor>& ts) {
        ts.push_back({"model.layers.0.mlp.experts.4.up_proj.weight", "F32", {16, 32}, std::vector<uint8_t>(2048)});
    });
    expect_error([&] { load(dir); }, ErrorCode::kFormat,
                 "1 tensor is not used by the qwen3_moe model config.json describes (num_hidden_layers=2, "
                 "num_experts=4): `model.layers.0.mlp.experts.4.up_proj.weight`");
}

TEST(ModelHardening, KnownExtrasAreAccepted) {
    TinyCheckpointOptions o;
    o.tied = true;
    const std::string dir = checkpoint(o);
    test::edit_safetensors((fs::path(dir) / "model.safetensors").string(), [&](std::vector<test::RawTensor>& ts) {
        ts.push_back({"model.layers.0.self_attn.rotary_emb.inv_freq", "F32", {4}, std::vector<uint8_t>(16)});
        ts.push_back(
            {"lm_head.weight", "F32", {o.vocab, o.hidden}, std::vector<uint8_t>(size_t(o.vocab * o.hidden) * 4)});
    });
    EXPECT_NO_THROW(load(dir));  // the buffer older transformers saved; a tied model's stored lm_head
    TinyCheckpointOptions composite;
    composite.composite = true;
    const std::string cdir = checkpoint(composite);
    test::edit_safetensors((fs::path(cdir) / "model.safetensors").string(), [&](std::vector<test::RawTensor>& ts) {
        ts.push_back({"model.visual.patch_embed.weight", "F32", {2}, std::vector<uint8_t>(8)});
    });
    EXPECT_NO_THROW(load(cdir));  // another sub-model of a composite checkpoint
}

TEST(ModelHardening, ShardLinksMayNotLeaveTheCheckpoint) {
    const std::string dir = checkpoint({});
    const std::string outside = test::temp_path("elsewhere.safetensors");
    fs::rename(fs::path(dir) / "model.safetensors", outside);
    fs::create_symlink(outside, fs::path(dir) / "model.safetensors");
    expect_error([&] { load(dir); }, ErrorCode::kInvalidArgument,
                 "model.safetensors: resolves to " + fs::canonical(outside).string() +
                     ", outside the checkpoint directory " + fs::canonical(dir).string() +
                     "; links may point only inside it, or from a Hugging Face cache snapshot");
    // A link inside the directory is fine.
    fs::remove(fs::path(dir) / "model.safetensors");
    fs::create_directory(fs::path(dir) / "weights");
    fs::rename(outside, fs::path(dir) / "weights" / "w.safetensors");
    fs::create_symlink("weights/w.safetensors", fs::path(dir) / "model.safetensors");
    EXPECT_NO_THROW(load(dir));
}

TEST(ModelHardening, HubCacheSnapshotLinksAreAccepted) {
    // models--org--name/snapshots/<rev>/FILE -> ../../blobs/<hash>, as huggingface_hub lays out its cache.
    TinyCheckpointOptions o;
    o.shards = 2;
    const std::string src = checkpoint(o);
    const fs::path repo = test::temp_path("models--org--tiny");
    const fs::path snap = repo / "snapshots" / "0123abcd";
    fs::create_directories(repo / "blobs");
    fs::create_directories(snap);
    int n = 0;
    for (const auto& e : fs::directory_iterator(src)) {
        const std::string blob = "blob" + std::to_string(n++);
        fs::copy_file(e.path(), repo / "blobs" / blob);
        fs::create_symlink("../../blobs/" + blob, snap / e.path().filename());
    }
    EXPECT_NO_THROW(load(snap.string()));
    // A cache's link elsewhere is still refused, naming the layout it allows.
    const std::string stray = test::temp_path("stray.safetensors");
    fs::copy_file(fs::canonical(snap / "model-00001-of-00002.safetensors"), stray);
    fs::remove(snap / "model-00001-of-00002.safetensors");
    fs::create_symlink(stray, snap / "model-00001-of-00002.safetensors");
    expect_error([&] { load(snap.string()); }, ErrorCode::kInvalidArgument,
                 "(snapshots/<rev>/FILE -> ../../blobs/<hash>) into that cache's blobs/");
}

TEST(ModelHardening, IndexThatIsAFifoOrDeviceIsRefused) {
    TinyCheckpointOptions o;
    o.shards = 2;
    const std::string dir = checkpoint(o);
    const fs::path index = fs::path(dir) / "model.safetensors.index.json";
    fs::remove(index);
    ASSERT_EQ(::mkfifo(index.c_str(), 0600), 0);
    expect_error([&] { load(dir); }, ErrorCode::kIo, "model.safetensors.index.json: is a FIFO, not a regular file");
    fs::remove(index);
    fs::create_symlink("/dev/zero", index);
    expect_error([&] { load(dir); }, ErrorCode::kIo, "is a character device, not a regular file");
}

// Draws with the sampler at `temperature` and returns how often each of the three ids came up.
std::vector<int> draws(double temperature, std::vector<float> logits, int n = 200) {
    model::Sampler s(temperature, 0, 1.0, 7);
    std::vector<int> count(logits.size(), 0);
    for (int i = 0; i < n; ++i) {
        std::vector<float> row = logits;
        ++count[size_t(s.sample(row))];
    }
    return count;
}

TEST(ModelSampler, TinyTemperaturesPickTheMostLikelyToken) {
    // logit / 1e-310 overflowed to inf, inf - inf = NaN, and the draw picked the least likely token.
    for (double t : {1e-310, 4.9e-324, 1e-300, 1e-30}) {
        EXPECT_EQ(draws(t, {-3.0f, 9.5f, 2.0f}), (std::vector<int>{0, 200, 0})) << t;
        EXPECT_EQ(draws(t, {-30.0f, -29.0f, -31.0f}), (std::vector<int>{0, 200, 0})) << t;
    }
    // Tied maxima share the draw (the limit of the softmax as the temperature goes to 0).
    const std::vector<int> tie = draws(1e-310, {5.0f, 1.0f, 5.0f});
    EXPECT_EQ(tie[1], 0);
    EXPECT_GT(tie[0], 50);
    EXPECT_GT(tie[2], 50);
    // A huge temperature is uniform, not NaN.
    const std::vector<int> flat = draws(1e300, {-3.0f, 9.5f, 2.0f}, 3000);
    for (int c : flat) EXPECT_GT(c, 800);
    expect_error([] { model::Sampler(0.0, 0, 1.0, 0); }, ErrorCode::kInvalidArgument, "temperature");
    expect_error([] { model::Sampler(std::nan(""), 0, 1.0, 0); }, ErrorCode::kInvalidArgument, "temperature");
    expect_error([] { model::Sampler(INFINITY, 0, 1.0, 0); }, ErrorCode::kInvalidArgument, "temperature");
}

}  // namespace
}  // namespace moex
