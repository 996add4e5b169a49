// The state bytes a request may reach, for admission: every sequence's fixed block plus, on
// softmax layers, KV pages for its prompt and max_new_tokens (self attention) and for its
// source (cross attention). Thread-safety: a pure function.
#pragma once

#include <cstdint>

#include "engine/state/state_pool.h"

namespace abcd {

// Worst-case bytes for one request on `layout`.
int64_t RequestStateBytes(const StateLayout& layout, int64_t prompt_tokens, int64_t source_tokens,
                          int64_t max_new_tokens, int sequences);

}  // namespace abcd
