#include "engine/scheduler/beam_search.h"

#include <algorithm>
#include <cmath>

namespace abcd {

BeamStep SelectBeams(std::span<const double> scores, std::span<const float> logits, int vocab,
                     int beam_size, int32_t eos_id) {
  std::vector<BeamChoice> candidates;
  for (size_t b = 0; b < scores.size(); ++b) {
    const float* row = logits.data() + b * vocab;
    const float max_logit = *std::max_element(row, row + vocab);
    double total = 0.0;
    for (int v = 0; v < vocab; ++v) total += std::exp(static_cast<double>(row[v]) - max_logit);
    const double log_total = max_logit + std::log(total);
    // Only the top 2 * beam_size tokens of each beam can survive the global selection.
    std::vector<int32_t> order(vocab);
    for (int v = 0; v < vocab; ++v) order[v] = v;
    const int keep = std::min(vocab, 2 * beam_size);
    std::partial_sort(
        order.begin(), order.begin() + keep, order.end(),
        [row](int32_t a, int32_t c) { return row[a] > row[c] || (row[a] == row[c] && a < c); });
    for (int i = 0; i < keep; ++i) {
      candidates.push_back({static_cast<int>(b), order[i], scores[b] + row[order[i]] - log_total});
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const BeamChoice& a, const BeamChoice& c) { return a.score > c.score; });
  BeamStep step;
  for (const BeamChoice& c : candidates) {
    if (static_cast<int>(step.continuing.size()) >= beam_size) break;
    if (c.token == eos_id) {
      step.finished.push_back(c);
    } else {
      step.continuing.push_back(c);
    }
  }
  return step;
}

}  // namespace abcd
