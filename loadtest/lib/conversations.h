// Multi-turn conversations (issue 14's session workload): `conversations` conversations of
// `turns` turns each, at most `concurrency` conversations active at once; a conversation's turns
// run one after another, each turn's prompt is the workload's next prompt. Two ways to carry the
// history, so the two can be compared on one server:
//   sessions  turn 1 asks for a new session ("new"), later turns name the id the server returned
//             and send only their new prompt (the server continues from the saved state);
//   resend    every turn sends the whole conversation so far (earlier prompts and outputs, as
//             text) plus its new prompt, as clients of stateless servers do.
// A failed turn ends its conversation. Records carry their turn (0-based).
#pragma once

#include <cstdint>

#include "loadtest/lib/driver.h"
#include "loadtest/lib/runner.h"
#include "loadtest/lib/workload.h"

namespace abcd::loadtest {

struct ConversationOptions {
  int64_t conversations = 8;
  int turns = 4;
  int concurrency = 4;
  bool resend_history = false;  // false: sessions
  double drain_timeout_s = 300;
};

// Turn t of conversation c uses workload request first_index + c * turns + t.
PhaseResult RunConversations(Driver& driver, const Workload& workload,
                             const ConversationOptions& options, int64_t first_index);

// Per turn: the median time to first token (ms) of the turn's successful requests, and how many.
struct TurnSummary {
  int turn = 0;
  int64_t requests = 0;
  double ttft_ms_p50 = 0;
  double prompt_tokens_mean = 0;  // the server's count: new tokens only with sessions
};
std::vector<TurnSummary> SummarizeTurns(const std::vector<RequestRecord>& records, int turns);

}  // namespace abcd::loadtest
