// Finds a checkpoint's tensors: one model.safetensors, or the shards listed by model.safetensors.index.json.
#include "src/model/weights/files.h"

#include <filesystem>
#include <set>

#include "moex/error.h"
#include "src/io/json_fields.h"
#include "src/io/messages.h"

namespace moex::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kSingleName = "model.safetensors";
constexpr const char* kIndexName = "model.safetensors.index.json";

}  // namespace

// The check is lexical on purpose: a Hugging Face cache snapshot holds its shards as symlinks into ../../blobs, so
// following links would refuse every cached checkpoint. With absolute paths and ".." refused, a relative name can only
// name something below the directory (or a link the directory's owner placed there).
void check_shard_path(const std::string& index_path, const std::string& relative) {
    const std::string what = index_path + ": shard path " + io::backticked(relative);
    MOEX_REQUIRE(!relative.empty(), ErrorCode::kFormat, index_path + ": weight_map names an empty shard path");
    for (unsigned char ch : relative)
        MOEX_REQUIRE(ch >= 0x20 && ch != 0x7f && ch != '\\', ErrorCode::kInvalidArgument,
                     what + " contains a control character or a backslash");
    const fs::path p(relative);
    MOEX_REQUIRE(!p.is_absolute() && !p.has_root_path(), ErrorCode::kInvalidArgument,
                 what + " is absolute; shards must lie inside the checkpoint directory");
    for (const fs::path& part : p)
        MOEX_REQUIRE(part != "..", ErrorCode::kInvalidArgument,
                     what + " contains \"..\"; shards must lie inside the checkpoint directory");
    const fs::path normal = p.lexically_normal();
    MOEX_REQUIRE(!normal.empty() && normal != "." && *normal.begin() != "..", ErrorCode::kInvalidArgument,
                 what + " resolves outside the checkpoint directory");
}

// A snapshot of the hub cache (models--org--name/snapshots/<rev>/FILE) holds links to ../../blobs/<hash>: the one
// place outside the directory a checkpoint's file may resolve to. Anything else outside (a link to /dev/zero, to
// another user's files, to a different model) is refused, saying so, rather than read.
void check_resolves_inside(const std::string& dir, const std::string& file) {
    std::error_code ec;
    const fs::path root = fs::canonical(dir, ec);
    if (ec) return;  // opening the file reports what is wrong with the directory
    const fs::path real = fs::canonical(file, ec);
    if (ec) return;  // a dangling link or a missing file: opening it says so
    auto inside = [](const fs::path& p, const fs::path& base) {
        const fs::path rel = p.lexically_relative(base);
        return !rel.empty() && *rel.begin() != "..";
    };
    if (inside(real, root)) return;
    for (fs::path p = root; p.has_relative_path(); p = p.parent_path())
        if (p.parent_path().filename() == "snapshots" && inside(real, p.parent_path().parent_path() / "blobs")) return;
    fail(ErrorCode::kInvalidArgument,
         file + ": resolves to " + real.string() + ", outside the checkpoint directory " + root.string() +
             "; links may point only inside it, or from a Hugging Face cache snapshot (snapshots/<rev>/FILE -> "
             "../../blobs/<hash>) into that cache's blobs/");
}

CheckpointFiles::CheckpointFiles(std::string dir) : dir_(std::move(dir)) {
    std::error_code ec;
    const fs::path single = fs::path(dir_) / kSingleName;
    const fs::path index = fs::path(dir_) / kIndexName;
    if (fs::exists(single, ec)) {
        check_resolves_inside(dir_, single.string());
        open_.emplace(kSingleName, std::make_unique<SafetensorsFile>(SafetensorsFile::open(single.string())));
        shard_count_ = 1;
        return;
    }
    if (!fs::exists(index, ec))
        fail(ErrorCode::kNotFound, dir_ + ": no " + kSingleName + " or " + kIndexName + " in the checkpoint directory");
    index_path_ = index.string();
    const io::OrderedJson j = io::parse_json_object(io::read_text_file(index_path_, io::kMaxIndexBytes), index_path_);
    const io::JsonFields fields(j, index_path_);
    const io::OrderedJson* map = fields.get("weight_map");
    if (map == nullptr || !map->is_object()) fields.fail_type("weight_map", "an object {tensor name: shard file}");
    std::set<std::string> shards;
    for (auto it = map->begin(); it != map->end(); ++it) {
        if (!it->is_string())
            fail(ErrorCode::kFormat, index_path_ + ": weight_map entry " + io::backticked(it.key()) +
                                         " must be a file name, got " + io::json_excerpt(*it));
        const std::string relative = it->get<std::string>();
        if (shards.insert(relative).second) check_shard_path(index_path_, relative);
        weight_map_.emplace(it.key(), relative);
    }
    shard_count_ = shards.size();
}

const SafetensorsFile& CheckpointFiles::shard(const std::string& relative) {
    auto it = open_.find(relative);
    if (it != open_.end()) return *it->second;
    const std::string path = (fs::path(dir_) / relative).string();
    std::error_code ec;
    if (!fs::exists(path, ec))
        fail(ErrorCode::kNotFound, path + ": shard file not found (listed in " + index_path_ + ")");
    check_resolves_inside(dir_, path);
    auto file = std::make_unique<SafetensorsFile>(SafetensorsFile::open(path));
    // Every tensor of the shard must be listed for it: a tensor the index does not know, or lists in another shard
    // (two copies, possibly different), would otherwise be ignored or picked by file order.
    for (const std::string& name : file->names()) {
        auto it = weight_map_.find(name);
        if (it == weight_map_.end())
            fail(ErrorCode::kFormat, path + ": holds tensor " + io::backticked(name) + ", which " + index_path_ +
                                         " does not list (an index out of date with its shards?)");
        if (it->second != relative)
            fail(ErrorCode::kFormat, path + ": holds tensor " + io::backticked(name) + ", which " + index_path_ +
                                         " lists in shard " + io::backticked(it->second) +
                                         ": one tensor in two shards");
    }
    return *open_.emplace(relative, std::move(file)).first->second;
}

std::vector<std::string> CheckpointFiles::all_names() {
    if (index_path_.empty()) return open_.begin()->second->names();
    std::vector<std::string> names;
    names.reserve(weight_map_.size());
    for (const auto& [name, relative] : weight_map_) {
        if (!shard(relative).contains(name))
            fail(ErrorCode::kFormat, (fs::path(dir_) / relative).string() + ": has no tensor " + io::backticked(name) +
                                         ", which " + index_path_ + " maps to this shard");
        names.push_back(name);
    }
    return names;
}

std::optional<CheckpointFiles::Found> CheckpointFiles::find(const std::string& name) {
    if (index_path_.empty()) {
        const SafetensorsFile& file = *open_.begin()->second;
        if (!file.contains(name)) return std::nullopt;
        return Found{&file, &file.info(name)};
    }
    auto it = weight_map_.find(name);
    if (it == weight_map_.end()) return std::nullopt;
    const SafetensorsFile& file = shard(it->second);
    if (!file.contains(name))
        fail(ErrorCode::kFormat, file.path() + ": has no tensor " + io::backticked(name) + ", which " + index_path_ +
                                     " maps to this shard");
    return Found{&file, &file.info(name)};
}

std::string CheckpointFiles::searched() const {
    if (index_path_.empty()) return (fs::path(dir_) / kSingleName).string();
    return index_path_ + " and its " + std::to_string(shard_count_) + (shard_count_ == 1 ? " shard" : " shards");
}

}  // namespace moex::model
