// Typed access to a checkpoint's tensors: checks each tensor's shape against what the config
// implies, widens bf16/fp16 to fp32 once, and remembers which tensors were used so that
// leftovers (a misspelt name, a config that does not match the file) are reported.
#pragma once

#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/model/checkpoint.h"
#include "engine/model/safetensors.h"

namespace abcd {

class WeightLoader {
 public:
  explicit WeightLoader(const Checkpoint& checkpoint) : checkpoint_(&checkpoint) {}
  // One file (tests, tools).
  explicit WeightLoader(const SafetensorsFile& file) : single_(&file) {}

  // The tensor as fp32; FailedPrecondition / NotFound naming the tensor and both shapes.
  absl::StatusOr<std::vector<float>> Load(const std::string& name,
                                          const std::vector<int64_t>& shape);
  bool Contains(const std::string& name) const;
  // Counts a tensor as used without reading it (a tied lm_head the embedding stands for).
  void MarkUsed(const std::string& name) { used_.insert(name); }
  // The tensor's shape (empty when absent), for loaders that accept more than one layout.
  std::vector<int64_t> ShapeOf(const std::string& name) const;
  // Floats handed out by Load() so far.
  int64_t loaded_floats() const { return loaded_floats_; }
  // Tensors loaded so far that hold NaN or infinite values (a broken export or training run:
  // loaded, but worth a warning), with how many such values each.
  const std::vector<std::pair<std::string, int64_t>>& non_finite() const { return non_finite_; }
  // InvalidArgument listing tensors that no layer asked for.
  absl::Status CheckAllUsed() const;

 private:
  absl::StatusOr<const TensorView*> Get(const std::string& name) const;
  std::string FileOf(const std::string& name) const;
  std::vector<std::string> TensorNames() const;

  const Checkpoint* checkpoint_ = nullptr;
  const SafetensorsFile* single_ = nullptr;
  std::set<std::string> used_;
  int64_t loaded_floats_ = 0;
  std::vector<std::pair<std::string, int64_t>> non_finite_;
};

}  // namespace abcd
