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
  const std::string json_path = dir + "/tokenizer.json";
  const std::string model_path = dir + "/tokenizer.model";
  const bool has_json = FileExists(json_path), has_model = FileExists(model_path);
  if (!has_json && !has_model) {
    return absl::NotFoundError(absl::StrCat(
        dir, ": no tokenizer.json (Hugging Face tokenizers) or tokenizer.model (SentencePiece)"));
  }
  std::string path = has_json ? json_path : model_path;
  absl::StatusOr<std::unique_ptr<Tokenizer>> loaded = Tokenizer::Load(path);
  if (!loaded.ok() && has_json && has_model) {
    path = model_path;
    loaded = Tokenizer::Load(path);
  }
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, std::move(loaded));
  if (tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": the tokenizer has ", tokenizer->vocab_size(),
                     " pieces, more than the model's vocab_size ", config.vocab_size,
                     " (config.json): the ids it encodes past vocab_size have no embedding row"));
  }
  return tokenizer;
}

}  // namespace abcd
