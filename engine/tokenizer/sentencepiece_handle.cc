#include "engine/tokenizer/sentencepiece_handle.h"

#include <dlfcn.h>

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/plugin_library.h"

namespace abcd {
namespace {

constexpr char kPluginName[] = "libabcd_sentencepiece.so";

#ifdef ABCD_SENTENCEPIECE_SYMBOLIC
// Sanitizer build: ASan refuses RTLD_DEEPBIND; the plugin's libsentencepiece is a DF_SYMBOLIC
// copy instead (engine/tokenizer/symbolic_copy.py), which keeps its protobuf-lite private.
// NODELETE: LeakSanitizer runs at exit and must still see the plugin's code and globals.
constexpr int kPluginFlags = RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE;
#else
constexpr int kPluginFlags = RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND;
#endif

}  // namespace

absl::StatusOr<SentencePieceHandle> SentencePieceHandle::Open() {
  absl::StatusOr<PluginLibrary> plugin = OpenPlugin(
      kPluginName, "ABCD_SENTENCEPIECE_PLUGIN", ABCD_SENTENCEPIECE_PLUGIN_BUILD_PATH, kPluginFlags);
  if (!plugin.ok()) {
    return absl::Status(plugin.status().code(),
                        absl::StrCat("SentencePiece ", plugin.status().message()));
  }
  auto create = reinterpret_cast<CreateSentencePieceBackendFn>(
      ::dlsym(plugin->handle, kCreateSentencePieceBackend));
  if (create == nullptr) {
    ::dlclose(plugin->handle);
    return absl::InternalError(absl::StrCat(plugin->path, " has no ", kCreateSentencePieceBackend));
  }
  SentencePieceHandle handle;
  handle.library_ = plugin->handle;
  handle.backend_.reset(create());
  return handle;
}

SentencePieceHandle::SentencePieceHandle(SentencePieceHandle&& other) noexcept
    : library_(std::exchange(other.library_, nullptr)), backend_(std::move(other.backend_)) {}

SentencePieceHandle& SentencePieceHandle::operator=(SentencePieceHandle&& other) noexcept {
  if (this != &other) {
    backend_.reset();
    if (library_ != nullptr) ::dlclose(library_);
    library_ = std::exchange(other.library_, nullptr);
    backend_ = std::move(other.backend_);
  }
  return *this;
}

SentencePieceHandle::~SentencePieceHandle() {
  backend_.reset();  // its code lives in the library: destroy it first
  if (library_ != nullptr) ::dlclose(library_);
}

}  // namespace abcd
