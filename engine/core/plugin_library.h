// Finds and dlopen()s one of abcd's plugins: shared objects loaded at run time so that the main
// binaries do not depend on their libraries (SentencePiece's protobuf; CUDA's runtime and
// cuBLAS, absent on CPU-only hosts). Search order: $`env_var`, next to the running binary, its
// ../lib, then `build_path` (the build tree; may be empty).
#pragma once

#include <string>

#include "absl/status/statusor.h"

namespace abcd {

struct PluginLibrary {
  void* handle = nullptr;  // from dlopen; the caller owns it (dlclose)
  std::string path;
};

// NotFound (listing the paths tried) when no candidate exists; Internal with dlerror() when one
// exists but does not load. `dlopen_flags` is passed to dlopen as is.
absl::StatusOr<PluginLibrary> OpenPlugin(const std::string& file_name, const char* env_var,
                                         const std::string& build_path, int dlopen_flags);

}  // namespace abcd
