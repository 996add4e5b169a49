#include "engine/tokenizer/sentencepiece_handle.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace abcd {
namespace {

constexpr char kPluginName[] = "libabcd_sentencepiece.so";

std::vector<std::string> CandidatePaths() {
  std::vector<std::string> paths;
  if (const char* env = std::getenv("ABCD_SENTENCEPIECE_PLUGIN"); env != nullptr && *env) {
    paths.push_back(env);
  }
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back((exe.parent_path() / kPluginName).string());
    paths.push_back((exe.parent_path() / ".." / "lib" / kPluginName).string());
  }
  paths.push_back(ABCD_SENTENCEPIECE_PLUGIN_BUILD_PATH);
  return paths;
}

}  // namespace

absl::StatusOr<SentencePieceHandle> SentencePieceHandle::Open() {
  std::string tried;
  for (const std::string& path : CandidatePaths()) {
    if (!std::filesystem::exists(path)) {
      absl::StrAppend(&tried, " ", path);
      continue;
    }
    void* library = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_DEEPBIND);
    if (library == nullptr) {
      return absl::InternalError(absl::StrCat("cannot load ", path, ": ", ::dlerror()));
    }
    auto create = reinterpret_cast<CreateSentencePieceBackendFn>(
        ::dlsym(library, kCreateSentencePieceBackend));
    if (create == nullptr) {
      ::dlclose(library);
      return absl::InternalError(absl::StrCat(path, " has no ", kCreateSentencePieceBackend));
    }
    SentencePieceHandle handle;
    handle.library_ = library;
    handle.backend_.reset(create());
    return handle;
  }
  return absl::NotFoundError(absl::StrCat("SentencePiece plugin ", kPluginName,
                                          " not found; tried:", tried,
                                          " (set ABCD_SENTENCEPIECE_PLUGIN)"));
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
