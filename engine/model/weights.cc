#include "engine/model/weights.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace abcd {

absl::StatusOr<const TensorView*> WeightLoader::Get(const std::string& name) const {
  return checkpoint_ != nullptr ? checkpoint_->Get(name) : single_->Get(name);
}

std::string WeightLoader::FileOf(const std::string& name) const {
  return checkpoint_ != nullptr ? checkpoint_->FileOf(name) : single_->path();
}

std::vector<std::string> WeightLoader::TensorNames() const {
  return checkpoint_ != nullptr ? checkpoint_->TensorNames() : single_->TensorNames();
}

bool WeightLoader::Contains(const std::string& name) const {
  return checkpoint_ != nullptr ? checkpoint_->Contains(name) : single_->Contains(name);
}

std::vector<int64_t> WeightLoader::ShapeOf(const std::string& name) const {
  absl::StatusOr<const TensorView*> tensor = Get(name);
  return tensor.ok() ? (*tensor)->shape : std::vector<int64_t>{};
}

absl::StatusOr<std::vector<float>> WeightLoader::Load(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  ABCD_ASSIGN_OR_RETURN(const TensorView* tensor, Get(name));
  if (tensor->shape != shape) {
    return absl::FailedPreconditionError(absl::StrCat(
        FileOf(name), ": tensor \"", name, "\" has shape [", absl::StrJoin(tensor->shape, ", "),
        "], config needs [", absl::StrJoin(shape, ", "), "]"));
  }
  absl::StatusOr<std::vector<float>> values = ToFloat32(*tensor);
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat(FileOf(name), ": ", values.status().message()));
  }
  used_.insert(name);
  loaded_floats_ += static_cast<int64_t>(values->size());
  int64_t bad = 0;
  for (float v : *values) bad += std::isfinite(v) ? 0 : 1;
  if (bad > 0) non_finite_.emplace_back(name, bad);
  return values;
}

absl::Status WeightLoader::CheckAllUsed() const {
  std::vector<std::string> unused;
  for (const std::string& name : TensorNames()) {
    if (!used_.contains(name)) unused.push_back(name);
  }
  if (unused.empty()) return absl::OkStatus();
  const std::string where = checkpoint_ != nullptr ? checkpoint_->path() : single_->path();
  return absl::InvalidArgumentError(
      absl::StrCat(where, ": tensors not used by the config: ", absl::StrJoin(unused, ", ")));
}

}  // namespace abcd
