#include "server/core/model_tokenizer.h"

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"

namespace abcd {

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadModelTokenizer(const std::string& dir,
                                                              const ModelConfig& config) {
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tokenizer, Tokenizer::LoadDirectory(dir));
  if (tokenizer->vocab_size() > config.vocab_size) {
    return absl::InvalidArgumentError(
        absl::StrCat(tokenizer->path(), ": the tokenizer has ", tokenizer->vocab_size(),
                     " pieces, more than the model's vocab_size ", config.vocab_size,
                     " (config.json): the ids it encodes past vocab_size have no embedding row"));
  }
  return tokenizer;
}

std::vector<int32_t> PrefilledIds(const ModelConfig& config, std::vector<int32_t> prompt) {
  if (config.add_bos || prompt.empty()) prompt.insert(prompt.begin(), config.bos_id);
  return prompt;
}

}  // namespace abcd
