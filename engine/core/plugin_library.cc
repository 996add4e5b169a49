#include "engine/core/plugin_library.h"

#include <dlfcn.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace abcd {

absl::StatusOr<PluginLibrary> OpenPlugin(const std::string& file_name, const char* env_var,
                                         const std::string& build_path, int dlopen_flags) {
  std::vector<std::string> paths;
  if (const char* env = std::getenv(env_var); env != nullptr && *env) paths.push_back(env);
  std::error_code error;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", error);
  if (!error) {
    paths.push_back((exe.parent_path() / file_name).string());
    paths.push_back((exe.parent_path() / ".." / "lib" / file_name).string());
  }
  if (!build_path.empty()) paths.push_back(build_path);
  std::string tried;
  for (const std::string& path : paths) {
    if (!std::filesystem::exists(path)) {
      absl::StrAppend(&tried, " ", path);
      continue;
    }
    void* handle = ::dlopen(path.c_str(), dlopen_flags);
    if (handle == nullptr) {
      return absl::InternalError(absl::StrCat("cannot load ", path, ": ", ::dlerror()));
    }
    return PluginLibrary{handle, path};
  }
  return absl::NotFoundError(
      absl::StrCat("plugin ", file_name, " not found; tried:", tried, " (set ", env_var, ")"));
}

}  // namespace abcd
