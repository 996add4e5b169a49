#include "loadtest/lib/executor_driver.h"

#include <cctype>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"

namespace abcd::loadtest {
namespace {

std::string CodeName(absl::StatusCode code) {
  std::string name = absl::StatusCodeToString(code);
  for (char& c : name) c = c == ' ' ? '_' : static_cast<char>(std::toupper(c));
  return name;
}

class ExecutorDriver final : public Driver {
 public:
  explicit ExecutorDriver(Executor& executor) : executor_(executor) {}

  void Start(const RequestSpec& spec, DoneCallback done) override {
    GenerationRequest request;
    request.prompt = spec.prompt;
    request.max_tokens = spec.max_tokens;
    request.sampling.temperature = spec.temperature;
    request.sampling.seed = spec.seed;
    request.ignore_eos = spec.ignore_eos;
    request.deadline = absl::Now() + absl::Seconds(spec.timeout_s);
    // Sessions in process: the driver keeps the saved states, as the server's store would.
    std::string session_id = spec.session_id;
    if (!session_id.empty()) {
      std::lock_guard<std::mutex> lock(mu_);
      if (session_id == "new") {
        session_id = absl::StrCat("s", next_session_++);
      } else if (auto it = sessions_.find(session_id); it != sessions_.end()) {
        request.resume_state = it->second;
      }
      request.save_state = true;
    }

    // The callback runs on the engine thread; the record is its own until the last event.
    auto state = std::make_shared<State>();
    state->record.index = spec.index;
    state->record.prompt_tokens = spec.prompt_tokens;
    state->done = std::move(done);
    state->record.send = Clock::now();
    state->session_id = session_id;
    absl::StatusOr<RequestId> id = executor_.Enqueue(
        std::move(request), [this, state](GenerationEvent event) { OnEvent(*state, event); });
    if (!id.ok()) {
      state->record.end = Clock::now();
      state->record.status = CodeName(id.status().code());
      state->record.error = std::string(id.status().message());
      DoneCallback callback = std::move(state->done);
      callback(std::move(state->record));
      return;
    }
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(*id);
  }

  void CancelAll() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (RequestId id : live_) executor_.Cancel(id);
  }

  Endpoint endpoint() const override { return Endpoint::kInProcess; }

 private:
  struct State {
    RequestRecord record;
    DoneCallback done;
    std::string session_id;
  };

  void OnEvent(State& state, const GenerationEvent& event) {
    const Clock::time_point now = Clock::now();
    RequestRecord& r = state.record;
    if (!event.token_ids.empty()) {
      r.chunk_times.push_back(now);
      r.chunk_tokens.push_back(static_cast<int>(event.token_ids.size()));
    }
    r.text += event.text;
    if (!event.finished) return;
    r.end = now;
    r.ok = event.status.ok();
    r.status = CodeName(event.status.code());
    if (!r.ok) r.error = std::string(event.status.message());
    r.output_tokens = event.completion_tokens;
    if (!state.session_id.empty()) {
      r.session_id = state.session_id;
      if (r.ok) {
        std::lock_guard<std::mutex> lock(mu_);
        sessions_[state.session_id] = event.saved_state;
      }
    }
    if (event.prompt_tokens > 0) r.prompt_tokens = event.prompt_tokens;
    DoneCallback callback = std::move(state.done);
    callback(std::move(r));
  }

  Executor& executor_;
  std::mutex mu_;
  std::set<RequestId> live_;  // every id started; Cancel ignores the ones already finished
  std::map<std::string, std::string> sessions_;  // id -> saved state (sessions in process)
  int64_t next_session_ = 1;
};

}  // namespace

std::unique_ptr<Driver> MakeExecutorDriver(Executor& executor) {
  return std::make_unique<ExecutorDriver>(executor);
}

}  // namespace abcd::loadtest
