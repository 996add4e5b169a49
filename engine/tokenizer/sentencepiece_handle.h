// Opens the SentencePiece plugin and owns one backend from it.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/tokenizer/sentencepiece_backend.h"

namespace abcd {

// A backend and the plugin handle that keeps its code loaded (closed after the backend).
class SentencePieceHandle {
 public:
  // Finds the plugin: $ABCD_SENTENCEPIECE_PLUGIN, next to the running binary (and ../lib), then
  // the build tree.
  static absl::StatusOr<SentencePieceHandle> Open();
  SentencePieceHandle(SentencePieceHandle&& other) noexcept;
  SentencePieceHandle& operator=(SentencePieceHandle&& other) noexcept;
  ~SentencePieceHandle();

  SentencePieceBackend& backend() const { return *backend_; }

 private:
  SentencePieceHandle() = default;
  void* library_ = nullptr;
  std::unique_ptr<SentencePieceBackend> backend_;
};

}  // namespace abcd
