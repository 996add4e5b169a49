#include "engine/model/checkpoint.h"

#include <sys/stat.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// A shard name from the index: a plain file name, never a path out of the directory.
bool IsPlainFileName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos &&
         name.find('\0') == std::string::npos;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::FromFile(std::unique_ptr<SafetensorsFile> file) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->path_ = file->path();
  // One file cannot hold a name twice (the JSON header is an object), so Add cannot fail.
  (void)checkpoint->Add(std::move(file));
  return checkpoint;
}

absl::Status Checkpoint::Add(std::unique_ptr<SafetensorsFile> file) {
  for (const std::string& name : file->TensorNames()) {
    auto [it, inserted] = owners_.emplace(name, file.get());
    if (!inserted) {
      return absl::InvalidArgumentError(absl::StrCat("tensor \"", name, "\" is in both ",
                                                     it->second->path(), " and ", file->path()));
    }
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Checkpoint>> Checkpoint::Open(const std::string& dir) {
  std::unique_ptr<Checkpoint> checkpoint(new Checkpoint());
  checkpoint->path_ = dir;
  const std::string single = dir + "/model.safetensors";
  const std::string index_path = dir + "/model.safetensors.index.json";
  if (FileExists(single)) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(single));
    ABCD_RETURN_IF_ERROR(checkpoint->Add(std::move(file)));
    return checkpoint;
  }
  if (!FileExists(index_path)) {
    if (FileExists(dir + "/pytorch_model.bin") ||
        FileExists(dir + "/pytorch_model.bin.index.json")) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir,
          ": only pytorch_model.bin (a Python pickle) is present; abcd reads safetensors "
          "(convert it, e.g. with transformers' save_pretrained(safe_serialization=True))"));
    }
    return absl::NotFoundError(absl::StrCat(
        dir, ": neither model.safetensors nor model.safetensors.index.json is present"));
  }
  std::ifstream in(index_path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(text.str(), index_path));
  const nlohmann::json index =
      nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object"));
  }
  const auto map = index.find("weight_map");
  if (map == index.end() || !map->is_object() || map->empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(index_path, ": \"weight_map\" must be a non-empty object"));
  }
  // Open each shard once, in name order.
  std::set<std::string> shards;
  for (const auto& [tensor, shard] : map->items()) {
    if (!shard.is_string() || !IsPlainFileName(shard.get<std::string>())) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map[\"", tensor.substr(0, 128),
                       "\"] must be a file name in the model directory"));
    }
    shards.insert(shard.get<std::string>());
  }
  for (const std::string& shard : shards) {
    const std::string path = dir + "/" + shard;
    if (!FileExists(path)) {
      return absl::NotFoundError(
          absl::StrCat(index_path, ": weight_map names \"", shard, "\", which is not present"));
    }
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<SafetensorsFile> file, SafetensorsFile::Open(path));
    ABCD_RETURN_IF_ERROR(checkpoint->Add(std::move(file)));
  }
  for (const auto& [tensor, shard] : map->items()) {
    const auto it = checkpoint->owners_.find(tensor);
    const std::string expected = dir + "/" + shard.get<std::string>();
    if (it == checkpoint->owners_.end() || it->second->path() != expected) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": tensor \"",
                                                     tensor.substr(0, 128), "\" is not in ",
                                                     expected, " as weight_map says"));
    }
  }
  return checkpoint;
}

absl::StatusOr<const TensorView*> Checkpoint::Get(absl::string_view name) const {
  const auto it = owners_.find(name);
  if (it == owners_.end()) {
    return absl::NotFoundError(absl::StrCat(path_, ": tensor \"", name, "\" not found"));
  }
  return it->second->Get(name);
}

std::vector<std::string> Checkpoint::TensorNames() const {
  std::vector<std::string> names;
  names.reserve(owners_.size());
  for (const auto& [name, file] : owners_) names.push_back(name);
  return names;
}

std::string Checkpoint::FileOf(absl::string_view name) const {
  const auto it = owners_.find(name);
  return it == owners_.end() ? path_ : it->second->path();
}

}  // namespace abcd
