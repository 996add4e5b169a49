#include "engine/backend/decode_backend.h"

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace abcd {

namespace {
absl::Status NoSnapshots(const DecodeBackend& backend) {
  return absl::FailedPreconditionError(
      absl::StrCat("the ", backend.name(), " backend cannot save or restore sequence states"));
}
}  // namespace

absl::StatusOr<std::string> DecodeBackend::Snapshot(SequenceId, std::string) const {
  return NoSnapshots(*this);
}
absl::StatusOr<std::string> DecodeBackend::SnapshotAt(SequenceId, int64_t, std::string) const {
  return absl::FailedPreconditionError(absl::StrCat(
      "the ", name(), " backend cannot save a sequence's state at an earlier position"));
}
absl::StatusOr<SequenceId> DecodeBackend::Restore(absl::string_view) { return NoSnapshots(*this); }
absl::Status DecodeBackend::CheckSnapshot(absl::string_view) const { return NoSnapshots(*this); }
absl::Status DecodeBackend::Rollback(SequenceId, int) {
  return absl::UnimplementedError(absl::StrCat(
      "the ", name(), " backend does not keep state checkpoints (speculative decoding)"));
}

absl::StatusOr<std::vector<SequenceRun>> SplitIntoSequenceRuns(std::span<const DecodeRow> rows) {
  std::vector<SequenceRun> runs;
  absl::flat_hash_set<SequenceId> seen;
  for (size_t i = 0; i < rows.size(); ++i) {
    if (!runs.empty() && runs.back().sequence == rows[i].sequence) {
      ++runs.back().rows;
      continue;
    }
    if (!seen.insert(rows[i].sequence).second) {
      return absl::InvalidArgumentError(absl::StrCat("rows[", i, "]: sequence ", rows[i].sequence,
                                                     " already had rows that are not adjacent"));
    }
    runs.push_back({rows[i].sequence, static_cast<int64_t>(i), 1});
  }
  return runs;
}

}  // namespace abcd
