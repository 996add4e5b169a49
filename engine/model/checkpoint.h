// The tensors of a model directory, in one file or sharded: `model.safetensors`, or the
// `model-0000N-of-0000M.safetensors` shards named by `model.safetensors.index.json`'s
// weight_map (Hugging Face's layout). Every shard is memory-mapped and validated by
// SafetensorsFile; the index must name files inside the directory, each tensor must be in the
// shard the index names, and no tensor may appear twice. A directory holding only
// `pytorch_model.bin` (a pickle) is refused with a message saying so. Errors name the file.
//
// Thread-safety: immutable after Open(); safe to share between threads.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/safetensors.h"

namespace abcd {

class Checkpoint {
 public:
  static absl::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::string& dir);
  // One already-open file (tests, tools).
  static std::unique_ptr<Checkpoint> FromFile(std::unique_ptr<SafetensorsFile> file);

  // NotFound naming the tensor and the directory when absent.
  absl::StatusOr<const TensorView*> Get(absl::string_view name) const;
  bool Contains(absl::string_view name) const { return owners_.find(name) != owners_.end(); }
  std::vector<std::string> TensorNames() const;
  // The path of the file holding `name` (the directory's description when absent).
  std::string FileOf(absl::string_view name) const;
  // The directory (or the single file's path).
  const std::string& path() const { return path_; }
  int64_t shard_count() const { return static_cast<int64_t>(files_.size()); }

 private:
  Checkpoint() = default;
  absl::Status Add(std::unique_ptr<SafetensorsFile> file);

  std::string path_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> owners_;
};

}  // namespace abcd
