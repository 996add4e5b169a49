#include "engine/state/request_state_bytes.h"

namespace abcd {
int64_t RequestStateBytes(const StateLayout& layout, int64_t prompt_tokens, int64_t source_tokens,
                          int64_t max_new_tokens, int sequences) {
  int64_t self_kv_layers = 0, cross_kv_layers = 0;
  for (bool cross : layout.kv_is_cross) (cross ? cross_kv_layers : self_kv_layers)++;
  const int64_t per_sequence =
      layout.FixedBytes() +
      self_kv_layers * StatePool::RoundUpToKvPage(prompt_tokens + max_new_tokens) *
          layout.KvBytesPerToken() +
      cross_kv_layers * StatePool::RoundUpToKvPage(source_tokens) * layout.KvBytesPerToken();
  return per_sequence * sequences;
}

}  // namespace abcd
