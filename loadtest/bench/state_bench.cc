// Sequence state as a product (issue 14), measured in-process on the Executor and the CPU
// backend, so the numbers are the engine's own (the wire adds the same to every row):
//   multi-turn     T turns of P new prompt tokens and G generated: time to first token per turn
//                  continuing a session, against resending the whole history (what clients of
//                  stateless servers do), without and with the prefix cache; with
//                  --session_store the session's blob goes through that store (memory or
//                  redis://) before and after every turn, timed;
//   shared prefix  one long prefix and S different suffixes, F in flight: prompt tokens actually
//                  prefilled and mean TTFT, prefix cache on and off;
//   choices        n = N from one prefill against N separate requests: prefilled tokens, wall time.
// Prompts are random token ids of the model's vocabulary (fixed seed), decoding is greedy with
// ignore_eos (choices: temperature 0.8), so every row does the same amount of work.
#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <random>

#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "engine/core/status_macros.h"
#include "engine/scheduler/executor.h"
#include "engine/state/sequence_blob.h"
#include "engine/tokenizer/tokenizer.h"
#include "loadtest/bench/benchmarks.h"
#include "server/sessions/session_manager.h"
#include "server/sessions/session_store.h"

namespace abcd::bench {
namespace {

// One request's events, with the time of its first token.
class Waiter {
 public:
  EventCallback Callback() {
    return [this](GenerationEvent event) {
      std::lock_guard<std::mutex> lock(mu_);
      const absl::Time now = absl::Now();
      if (!event.token_ids.empty() && first_token_ == absl::InfiniteFuture()) first_token_ = now;
      for (int32_t t : event.token_ids) tokens_[event.index].push_back(t);
      if (event.finished) {
        final_ = std::move(event);
        finished_ = now;
        done_ = true;
        cv_.notify_all();
      }
    };
  }
  // Blocks until the final event.
  const GenerationEvent& Wait() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
    return final_;
  }
  absl::Time first_token() const { return first_token_; }
  absl::Time finished() const { return finished_; }
  const std::vector<int32_t>& tokens(int index) { return tokens_[index]; }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  GenerationEvent final_;
  absl::Time first_token_ = absl::InfiniteFuture();
  absl::Time finished_;
  std::map<int, std::vector<int32_t>> tokens_;
};

struct Loaded {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

absl::StatusOr<Loaded> Load(const std::string& dir) {
  Loaded out;
  ABCD_ASSIGN_OR_RETURN(out.model, Model::Load(dir));
  ABCD_ASSIGN_OR_RETURN(out.tokenizer, Tokenizer::LoadDirectory(dir));
  return out;
}

absl::StatusOr<std::unique_ptr<Executor>> Start(const Loaded& loaded, const StateOptions& options,
                                                int64_t prefix_cache_bytes) {
  ExecutorOptions executor;
  executor.cpu_threads = options.threads;
  executor.state_budget_bytes = int64_t{4} << 30;
  executor.max_prompt_tokens = 8192;
  executor.prefix_cache_bytes = prefix_cache_bytes;
  executor.model_name = "bench";
  return Executor::Create(*loaded.model, *loaded.tokenizer, executor);
}

std::vector<int32_t> RandomTokens(std::mt19937& rng, int vocab, int count) {
  std::uniform_int_distribution<int32_t> pick(4, vocab - 1);
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int32_t& t : out) t = pick(rng);
  return out;
}

GenerationRequest Greedy(std::vector<int32_t> prompt, int max_tokens) {
  GenerationRequest request;
  request.prompt_token_ids = std::move(prompt);
  request.max_tokens = max_tokens;
  request.sampling.temperature = 0.0f;
  request.ignore_eos = true;
  return request;
}

double Ms(absl::Duration d) { return absl::ToDoubleMilliseconds(d); }

// --- multi-turn ---------------------------------------------------------------------------

struct TurnResult {
  double ttft_ms = 0;  // from the request's start (with a store: after the blob was fetched)
  int prefilled = 0;
  int64_t blob_bytes = 0;
  double fetch_ms = 0;  // sessions through a store: Get before the turn
  double save_ms = 0;   // ... and Put after it
};

// One conversation of options.turns turns. mode: "session", "resend" (cache off), "resend+cache".
absl::StatusOr<std::vector<TurnResult>> Conversation(const Loaded& loaded,
                                                     const StateOptions& options,
                                                     const std::string& mode, uint32_t seed) {
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                        Start(loaded, options, mode == "resend+cache" ? int64_t{512} << 20 : 0));
  std::mt19937 rng(seed);
  const int vocab = loaded.model->config().vocab_size;
  std::vector<int32_t> history;
  std::string state;
  std::vector<TurnResult> turns;
  // Sessions through a store (--session_store): the blob is fetched before and saved after
  // every turn, as abcd-server does.
  std::unique_ptr<SessionStore> store;
  const std::string id = SessionManager::NewId();
  if (mode == "session" && !options.session_store.empty()) {
    ABCD_ASSIGN_OR_RETURN(store, CreateSessionStore(options.session_store, {}));
  }
  for (int turn = 0; turn < options.turns; ++turn) {
    const std::vector<int32_t> prompt = RandomTokens(rng, vocab, options.turn_prompt_tokens);
    history.insert(history.end(), prompt.begin(), prompt.end());
    GenerationRequest request = Greedy(mode == "session" ? prompt : history, options.turn_tokens);
    TurnResult result;
    if (mode == "session") {
      if (store != nullptr && turn > 0) {
        const absl::Time fetch = absl::Now();
        ABCD_ASSIGN_OR_RETURN(StoredSession stored, store->Get(id));
        result.fetch_ms = Ms(absl::Now() - fetch);
        state = std::move(stored.blob);
      }
      request.resume_state = state;
      request.save_state = true;
    }
    Waiter waiter;
    const absl::Time start = absl::Now();
    ABCD_RETURN_IF_ERROR(executor->Enqueue(std::move(request), waiter.Callback()).status());
    const GenerationEvent& last = waiter.Wait();
    ABCD_RETURN_IF_ERROR(last.status);
    const std::vector<int32_t>& generated = waiter.tokens(0);
    history.insert(history.end(), generated.begin(), generated.end());
    result.ttft_ms = Ms(waiter.first_token() - start);
    result.prefilled = last.prompt_tokens - last.cached_prompt_tokens;
    if (mode == "session") {
      state = last.saved_state;
      result.blob_bytes = static_cast<int64_t>(state.size());
      if (store != nullptr) {
        const absl::Time save = absl::Now();
        ABCD_RETURN_IF_ERROR(store->Put(id, state));
        result.save_ms = Ms(absl::Now() - save);
      }
    }
    turns.push_back(result);
  }
  return turns;
}

absl::StatusOr<nlohmann::json> MultiTurn(const Loaded& loaded, const StateOptions& options) {
  const std::vector<std::string> modes = {"session", "resend", "resend+cache"};
  // Rounds interleave the modes; each turn's TTFT is the median over rounds.
  std::map<std::string, std::vector<std::vector<TurnResult>>> runs;
  for (int round = 0; round < options.rounds; ++round) {
    for (const std::string& mode : modes) {
      ABCD_ASSIGN_OR_RETURN(std::vector<TurnResult> turns,
                            Conversation(loaded, options, mode, 1234 + round));
      runs[mode].push_back(std::move(turns));
    }
  }
  nlohmann::json out = nlohmann::json::object();
  std::cout << absl::StrFormat("%-5s", "turn");
  for (const std::string& mode : modes) {
    std::cout << absl::StrFormat(" | %14s TTFT ms  prefilled", mode);
  }
  std::cout << " | session blob bytes\n";
  std::map<std::string, std::vector<double>> ttft;
  for (int turn = 0; turn < options.turns; ++turn) {
    std::cout << absl::StrFormat("%-5d", turn + 1);
    for (const std::string& mode : modes) {
      std::vector<double> samples;
      for (const auto& run : runs[mode]) samples.push_back(run[turn].ttft_ms);
      std::sort(samples.begin(), samples.end());
      const double median = samples[samples.size() / 2];
      ttft[mode].push_back(median);
      const int prefilled = runs[mode][0][turn].prefilled;
      std::cout << absl::StrFormat(" | %19.2f  %9d", median, prefilled);
      out[mode]["ttft_ms"].push_back(median);
      out[mode]["prefilled_tokens"].push_back(prefilled);
    }
    const int64_t blob = runs["session"][0][turn].blob_bytes;
    out["session"]["blob_bytes"].push_back(blob);
    std::cout << absl::StrFormat(" | %d", blob);
    if (!options.session_store.empty()) {
      std::vector<double> fetch, save;
      for (const auto& run : runs["session"]) {
        fetch.push_back(run[turn].fetch_ms);
        save.push_back(run[turn].save_ms);
      }
      std::sort(fetch.begin(), fetch.end());
      std::sort(save.begin(), save.end());
      const double f = fetch[fetch.size() / 2], v = save[save.size() / 2];
      const double share = f / (f + ttft["session"].back());
      out["session"]["fetch_ms"].push_back(f);
      out["session"]["save_ms"].push_back(v);
      out["session"]["fetch_share_of_ttft"].push_back(share);
      std::cout << absl::StrFormat(" | fetch %.3f ms (%.1f%% of TTFT)  save %.3f ms", f,
                                   100 * share, v);
    }
    std::cout << "\n";
  }
  for (const std::string& mode : modes) {
    const double ratio = ttft[mode].back() / ttft[mode].front();
    out[mode]["last_over_first"] = ratio;
    std::cout << absl::StrFormat("%s: turn %d TTFT / turn 1 TTFT = %.2f\n", mode, options.turns,
                                 ratio);
  }
  return out;
}

// --- shared prefix ------------------------------------------------------------------------

absl::StatusOr<nlohmann::json> SharedPrefix(const Loaded& loaded, const StateOptions& options) {
  std::mt19937 rng(99);
  const int vocab = loaded.model->config().vocab_size;
  const std::vector<int32_t> prefix = RandomTokens(rng, vocab, options.prefix_tokens);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < options.suffixes; ++i) {
    std::vector<int32_t> prompt = prefix;
    const std::vector<int32_t> suffix = RandomTokens(rng, vocab, options.suffix_tokens);
    prompt.insert(prompt.end(), suffix.begin(), suffix.end());
    prompts.push_back(std::move(prompt));
  }
  nlohmann::json out = nlohmann::json::object();
  std::map<std::string, std::vector<std::vector<int32_t>>> outputs;
  for (const bool cache : {false, true}) {
    const std::string name = cache ? "cache_on" : "cache_off";
    std::vector<double> ttfts;
    std::vector<double> walls;
    int64_t prefilled = 0, prompt_tokens = 0;
    for (int round = 0; round < options.rounds; ++round) {
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                            Start(loaded, options, cache ? int64_t{512} << 20 : 0));
      std::vector<std::unique_ptr<Waiter>> waiters;
      std::vector<absl::Time> starts;
      const absl::Time begin = absl::Now();
      prefilled = prompt_tokens = 0;
      // options.in_flight requests outstanding at a time, in order.
      size_t next = 0, done = 0;
      double ttft_sum = 0;
      std::vector<std::vector<int32_t>> tokens(prompts.size());
      while (done < prompts.size()) {
        while (next < prompts.size() && next - done < static_cast<size_t>(options.in_flight)) {
          waiters.push_back(std::make_unique<Waiter>());
          starts.push_back(absl::Now());
          ABCD_RETURN_IF_ERROR(executor
                                   ->Enqueue(Greedy(prompts[next], options.suffix_tokens),
                                             waiters.back()->Callback())
                                   .status());
          ++next;
        }
        const GenerationEvent& last = waiters[done]->Wait();
        ABCD_RETURN_IF_ERROR(last.status);
        ttft_sum += Ms(waiters[done]->first_token() - starts[done]);
        prefilled += last.prompt_tokens - last.cached_prompt_tokens;
        prompt_tokens += last.prompt_tokens;
        tokens[done] = waiters[done]->tokens(0);
        ++done;
      }
      walls.push_back(Ms(absl::Now() - begin));
      ttfts.push_back(ttft_sum / static_cast<double>(prompts.size()));
      outputs[name] = tokens;
    }
    std::sort(ttfts.begin(), ttfts.end());
    std::sort(walls.begin(), walls.end());
    out[name] = {{"prompt_tokens", prompt_tokens},
                 {"prefilled_tokens", prefilled},
                 {"mean_ttft_ms", ttfts[ttfts.size() / 2]},
                 {"wall_ms", walls[walls.size() / 2]}};
    std::cout << absl::StrFormat(
        "%-9s  prompt tokens %6d  prefilled %6d  mean TTFT %8.2f ms  wall %8.1f ms\n", name,
        prompt_tokens, prefilled, ttfts[ttfts.size() / 2], walls[walls.size() / 2]);
  }
  const double fewer = static_cast<double>(out["cache_off"]["prefilled_tokens"].get<int64_t>()) /
                       std::max<int64_t>(1, out["cache_on"]["prefilled_tokens"].get<int64_t>());
  const double faster = out["cache_off"]["mean_ttft_ms"].get<double>() /
                        out["cache_on"]["mean_ttft_ms"].get<double>();
  out["prefill_ratio"] = fewer;
  out["ttft_ratio"] = faster;
  out["identical_outputs"] = outputs["cache_on"] == outputs["cache_off"];
  std::cout << absl::StrFormat(
      "cache off / on: %.1fx the prefilled tokens, %.1fx the mean TTFT; outputs identical: %s\n",
      fewer, faster, outputs["cache_on"] == outputs["cache_off"] ? "yes" : "NO");
  return out;
}

// --- n choices ----------------------------------------------------------------------------

absl::StatusOr<nlohmann::json> Choices(const Loaded& loaded, const StateOptions& options) {
  std::mt19937 rng(7);
  const std::vector<int32_t> prompt =
      RandomTokens(rng, loaded.model->config().vocab_size, options.choice_prompt_tokens);
  const auto request = [&](int n, uint64_t seed) {
    GenerationRequest r = Greedy(prompt, options.choice_tokens);
    r.sampling.temperature = 0.8f;
    r.sampling.seed = seed;
    r.n = n;
    return r;
  };
  nlohmann::json out = nlohmann::json::object();
  std::vector<double> one_walls, separate_walls;
  int64_t one_prefilled = 0, separate_prefilled = 0;
  bool identical = true;
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor, Start(loaded, options, 0));
  for (int round = 0; round < options.rounds; ++round) {
    Waiter together;
    absl::Time start = absl::Now();
    ABCD_RETURN_IF_ERROR(
        executor->Enqueue(request(options.choices, 5), together.Callback()).status());
    const GenerationEvent& last = together.Wait();
    ABCD_RETURN_IF_ERROR(last.status);
    one_walls.push_back(Ms(together.finished() - start));
    one_prefilled = last.prompt_tokens;

    std::vector<std::unique_ptr<Waiter>> waiters;
    start = absl::Now();
    for (int i = 0; i < options.choices; ++i) {
      waiters.push_back(std::make_unique<Waiter>());
      ABCD_RETURN_IF_ERROR(
          executor->Enqueue(request(1, 5 + static_cast<uint64_t>(i)), waiters.back()->Callback())
              .status());
    }
    separate_prefilled = 0;
    absl::Time end = start;
    for (int i = 0; i < options.choices; ++i) {
      const GenerationEvent& e = waiters[i]->Wait();
      ABCD_RETURN_IF_ERROR(e.status);
      separate_prefilled += e.prompt_tokens;
      end = std::max(end, waiters[i]->finished());
      identical = identical && waiters[i]->tokens(0) == together.tokens(i);
    }
    separate_walls.push_back(Ms(end - start));
  }
  std::sort(one_walls.begin(), one_walls.end());
  std::sort(separate_walls.begin(), separate_walls.end());
  const double one = one_walls[one_walls.size() / 2];
  const double separate = separate_walls[separate_walls.size() / 2];
  out = {{"n", options.choices},
         {"one_request", {{"prefilled_tokens", one_prefilled}, {"wall_ms", one}}},
         {"separate", {{"prefilled_tokens", separate_prefilled}, {"wall_ms", separate}}},
         {"identical_choices", identical}};
  std::cout << absl::StrFormat(
      "n=%d in one request: prefilled %d, wall %.1f ms | %d separate requests: prefilled %d, "
      "wall %.1f ms | choice i == request with seed+i: %s\n",
      options.choices, one_prefilled, one, options.choices, separate_prefilled, separate,
      identical ? "yes" : "NO");
  return out;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunState(const StateOptions& options) {
  nlohmann::json out = nlohmann::json::object();
  for (const std::string& dir : options.models) {
    ABCD_ASSIGN_OR_RETURN(Loaded loaded, Load(dir));
    std::cout << "== " << dir << " (" << options.threads << " threads) ==\n";
    nlohmann::json model;
    std::cout << absl::StrFormat("-- multi-turn: %d turns of %d new prompt tokens, %d generated\n",
                                 options.turns, options.turn_prompt_tokens, options.turn_tokens);
    ABCD_ASSIGN_OR_RETURN(model["multi_turn"], MultiTurn(loaded, options));
    std::cout << absl::StrFormat("-- shared prefix: %d tokens, %d suffixes of %d, %d in flight\n",
                                 options.prefix_tokens, options.suffixes, options.suffix_tokens,
                                 options.in_flight);
    ABCD_ASSIGN_OR_RETURN(model["shared_prefix"], SharedPrefix(loaded, options));
    std::cout << absl::StrFormat("-- choices: n=%d, prompt %d tokens, %d generated each\n",
                                 options.choices, options.choice_prompt_tokens,
                                 options.choice_tokens);
    ABCD_ASSIGN_OR_RETURN(model["choices"], Choices(loaded, options));
    std::cout << "\n";
    out[dir] = std::move(model);
  }
  return out;
}

}  // namespace abcd::bench
