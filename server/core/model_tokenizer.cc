#include "server/core/model_tokenizer.h"

#include <sys/stat.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd {
namespace {

bool FileExists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& dir,
                                                              const ModelConfig& config) {
  const std::string path = dir + "/tokenizer.model";
  if (!FileExists(path)) {
    if (FileExists(dir + "/tokenizer.json")) {
      return absl::FailedPreconditionError(absl::StrCat(
          dir, "/tokenizer.json: only a SentencePiece tokenizer.model is supported, and ", dir,
          " has none (tokenizer.json is not read)"));
    }
    return absl::NotFoundError(
        absl::StrCat(path, ": not found (abcd needs the SentencePiece tokenizer.model)"));
  }
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::Load(path));
  if (tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the tokenizer has ", tokenizer->vocab_size(),
                     " pieces, more than the model's vocab_size ", config.vocab_size,
                     " (config.json): the ids it encodes past vocab_size have no embedding row"));
  }
  return tokenizer;
}

}  // namespace abcd
