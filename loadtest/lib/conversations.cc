#include "loadtest/lib/conversations.h"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>

namespace abcd::loadtest {
namespace {

struct Conversation {
  int64_t index = 0;
  int next_turn = 0;
  std::string session_id;  // what the server returned (sessions)
  std::string history;     // earlier prompts and outputs (resend)
};

// Finished turns, handed from driver threads to the issuing thread.
class Mailbox {
 public:
  void Post(std::shared_ptr<Conversation> c, RequestRecord record) {
    std::lock_guard<std::mutex> lock(mu_);
    done_.push_back({std::move(c), std::move(record)});
    cv_.notify_all();
  }
  // Waits for the next finished turn until `deadline`; false on timeout.
  bool Take(std::shared_ptr<Conversation>* c, RequestRecord* record, Clock::time_point deadline) {
    std::unique_lock<std::mutex> lock(mu_);
    if (!cv_.wait_until(lock, deadline, [this] { return !done_.empty(); })) return false;
    *c = std::move(done_.front().first);
    *record = std::move(done_.front().second);
    done_.pop_front();
    return true;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<std::shared_ptr<Conversation>, RequestRecord>> done_;
};

}  // namespace

PhaseResult RunConversations(Driver& driver, const Workload& workload,
                             const ConversationOptions& options, int64_t first_index) {
  auto mailbox = std::make_shared<Mailbox>();
  PhaseResult result;
  result.start = Clock::now();
  int64_t started = 0, in_flight = 0;
  const auto issue = [&](const std::shared_ptr<Conversation>& c) {
    RequestSpec spec = workload.Make(first_index + c->index * options.turns + c->next_turn);
    if (options.resend_history) {
      c->history += spec.prompt;
      spec.prompt = c->history;
      spec.prompt_tokens = 0;  // the server's usage counts the whole history
    } else {
      spec.session_id = c->next_turn == 0 ? "new" : c->session_id;
    }
    ++c->next_turn;
    ++in_flight;
    driver.Start(spec, [mailbox, c](RequestRecord record) { mailbox->Post(c, std::move(record)); });
  };
  const auto start_conversation = [&] {
    auto c = std::make_shared<Conversation>();
    c->index = started++;
    issue(c);
  };
  while (started < options.conversations && started < std::max(1, options.concurrency)) {
    start_conversation();
  }
  const auto drain_timeout = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(options.drain_timeout_s));
  while (in_flight > 0) {
    std::shared_ptr<Conversation> c;
    RequestRecord record;
    if (!mailbox->Take(&c, &record, Clock::now() + drain_timeout)) {
      result.cancelled_at_drain = in_flight;
      driver.CancelAll();
      break;
    }
    --in_flight;
    record.turn = c->next_turn - 1;
    const bool ok = record.ok;
    if (ok) {
      c->history += record.text;
      if (!record.session_id.empty()) c->session_id = record.session_id;
    }
    result.records.push_back(std::move(record));
    if (ok && c->next_turn < options.turns) {
      issue(c);
    } else if (started < options.conversations) {
      start_conversation();
    }
  }
  result.end = result.start;
  for (const RequestRecord& r : result.records) result.end = std::max(result.end, r.end);
  return result;
}

std::vector<TurnSummary> SummarizeTurns(const std::vector<RequestRecord>& records, int turns) {
  std::vector<TurnSummary> out;
  for (int turn = 0; turn < turns; ++turn) {
    std::vector<double> ttft;
    double prompt_tokens = 0;
    for (const RequestRecord& r : records) {
      if (r.turn != turn || !r.ok || r.chunk_times.empty()) continue;
      ttft.push_back(std::chrono::duration<double, std::milli>(r.chunk_times[0] - r.send).count());
      prompt_tokens += r.prompt_tokens;
    }
    TurnSummary s;
    s.turn = turn;
    s.requests = static_cast<int64_t>(ttft.size());
    if (!ttft.empty()) {
      std::sort(ttft.begin(), ttft.end());
      s.ttft_ms_p50 = ttft[ttft.size() / 2];
      s.prompt_tokens_mean = prompt_tokens / static_cast<double>(ttft.size());
    }
    out.push_back(s);
  }
  return out;
}

}  // namespace abcd::loadtest
