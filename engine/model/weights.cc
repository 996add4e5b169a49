#include "engine/model/weights.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/core/status_macros.h"

namespace abcd {

absl::StatusOr<std::vector<float>> WeightLoader::Load(const std::string& name,
                                                      const std::vector<int64_t>& shape) {
  ABCD_ASSIGN_OR_RETURN(const TensorView* tensor, file_.Get(name));
  if (tensor->shape != shape) {
    return absl::FailedPreconditionError(absl::StrCat(
        file_.path(), ": tensor \"", name, "\" has shape [", absl::StrJoin(tensor->shape, ", "),
        "], config needs [", absl::StrJoin(shape, ", "), "]"));
  }
  absl::StatusOr<std::vector<float>> values = ToFloat32(*tensor);
  if (!values.ok()) {
    return absl::Status(values.status().code(),
                        absl::StrCat(file_.path(), ": ", values.status().message()));
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
  for (const std::string& name : file_.TensorNames()) {
    if (!used_.contains(name)) unused.push_back(name);
  }
  if (unused.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      file_.path(), ": tensors not used by the config: ", absl::StrJoin(unused, ", ")));
}

}  // namespace abcd
