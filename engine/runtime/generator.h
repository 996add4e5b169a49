// Single-sequence text generation over a Model and StatePool: tokenize, prefill the prompt in
// one Decode call, then sample one token per step until max_tokens, EOS or a stop string.
// This is the in-process path behind `abcd-cli generate`; the serving scheduler batches many
// sequences through the same Model::Decode.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/model/model.h"
#include "engine/ops/cpu_context.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/finish_reason.h"
#include "engine/state/state_pool.h"
#include "engine/tokenizer/tokenizer.h"

namespace abcd {

struct GenerateOptions {
  int max_tokens = 64;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<std::string> stop;  // generation ends when the text contains one (not included)
  CpuContext* context = nullptr;  // threads and buffers to run on; null: one thread
};

struct GenerateResult {
  std::vector<int32_t> prompt_ids;
  std::vector<int32_t> token_ids;
  std::string text;
  FinishReason finish_reason = FinishReason::kLength;
  int64_t state_bytes = 0;  // attention-state bytes the sequence held at the end
};

// Called after each generated token with its id and the text it released (text that may start
// a stop string is held back until decided). At EOS, held-back text arrives with the eos id.
using TokenCallback = std::function<void(int32_t id, absl::string_view new_text)>;

absl::StatusOr<GenerateResult> Generate(const Model& model, const Tokenizer& tokenizer,
                                        StatePool& pool, absl::string_view prompt,
                                        const GenerateOptions& options,
                                        const TokenCallback& on_token = nullptr);

}  // namespace abcd
