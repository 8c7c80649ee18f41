// The safetensors files of a checkpoint directory: model.safetensors, or the shards that
// model.safetensors.index.json maps tensor names to. Shards are memory-mapped on first use; every shard path is
// checked to stay inside the directory before anything is opened, and every file to resolve inside it (symlinks
// too, save the Hugging Face cache's snapshot -> blob links). An opened shard must agree with the index.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "moex/safetensors.h"

namespace moex::model {

class CheckpointFiles {
   public:
    // model.safetensors wins when both it and the index exist (as transformers does). kNotFound when neither exists,
    // kFormat for a malformed index, kInvalidArgument for a shard path that is absolute or contains "..".
    explicit CheckpointFiles(std::string dir);

    struct Found {
        const SafetensorsFile* file;
        const SafetensorsInfo* info;
    };
    // The file holding `name`, or nullopt. Opens (and validates) a shard the first time one of its tensors is asked
    // for: kNotFound naming a missing shard file, kFormat when the shard lacks a tensor the index maps to it.
    std::optional<Found> find(const std::string& name);

    // Every tensor name of the checkpoint. With an index, every shard is opened first and checked against it (each
    // listed tensor present, none unlisted or listed for another shard).
    std::vector<std::string> all_names();

    // What was searched, for "not found" messages: "DIR/model.safetensors" or "DIR/model.safetensors.index.json
    // and its 3 shards".
    std::string searched() const;
    const std::string& dir() const { return dir_; }

   private:
    const SafetensorsFile& shard(const std::string& relative);

    std::string dir_;
    std::string index_path_;                         // empty: a single model.safetensors
    std::map<std::string, std::string> weight_map_;  // tensor name -> shard path relative to dir_
    size_t shard_count_ = 0;
    std::map<std::string, std::unique_ptr<SafetensorsFile>> open_;  // relative shard path -> mapped file
};

// Checks one shard path of an index: relative, no "..", no control characters (kInvalidArgument otherwise).
void check_shard_path(const std::string& index_path, const std::string& relative);

// kInvalidArgument unless `file` (in checkpoint directory `dir`) resolves inside `dir`, or `dir` is a Hugging Face
// cache snapshot (.../snapshots/<rev>[/sub]) and `file` resolves into that cache entry's blobs/ folder.
void check_resolves_inside(const std::string& dir, const std::string& file);

}  // namespace moex::model
