// One step of beam search: from the live beams' scores and next-token logits, choose the
// beam_size best continuations and the hypotheses that end with EOS. Pure function; the
// executor maps the chosen parents onto forked sequence states.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace abcd {

struct BeamChoice {
  int parent;  // index of the live beam it extends
  int32_t token;
  double score;  // sum of log-probabilities including this token
};

struct BeamStep {
  std::vector<BeamChoice> continuing;  // at most beam_size, best first
  std::vector<BeamChoice> finished;    // token == eos, best first
};

// `logits`: [scores.size(), vocab]. Candidates are ranked by total log-probability; EOS
// candidates that rank within the top beam_size become finished hypotheses.
BeamStep SelectBeams(std::span<const double> scores, std::span<const float> logits, int vocab,
                     int beam_size, int32_t eos_id);

// Length-normalised score used to compare hypotheses of different lengths.
inline double NormalizedScore(double score, int64_t length) {
  return score / static_cast<double>(length > 0 ? length : 1);
}

}  // namespace abcd
