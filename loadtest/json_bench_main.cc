// abcd-json-bench: what constrained JSON output (response_format) costs per generated token.
//
//   abcd-json-bench [--model DIR] [--batches 1,32] [--max_tokens 128] [--rounds 5]
//                   [--temperature 1]
//
// 1. The mask alone, on the model's vocabulary: a constraint driven by uniform random logits
//    over its mask (the schema below) until the value completes; microseconds per token of
//    Allowed() + Accept() with the per-request mask cache (as served), and of one trie walk
//    (a cache miss).
// 2. End to end through the Executor on the model: B requests at once with the schema
//    (--temperature, seeds 1..B), then the same B requests without it, each with max_tokens
//    equal to what its constrained twin generated and ignore_eos (the same tokens to generate);
//    rounds alternate which goes first; the median round's wall time per generated token.
#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "engine/sampling/sampler.h"
#include "engine/scheduler/executor.h"
#include "nlohmann/json.hpp"

namespace abcd {
namespace {

constexpr char kSchema[] = R"({"type": "object", "properties": {
    "name": {"type": "string"}, "age": {"type": "integer"},
    "colour": {"enum": ["red", "green", "blue"]},
    "scores": {"type": "array", "items": {"type": "number"}, "maxItems": 4},
    "address": {"type": "object", "properties": {"city": {"type": "string"},
                "zip": {"type": ["string", "null"]}}, "required": ["city", "zip"]},
    "ok": {"type": "boolean"}},
  "required": ["name", "age", "colour", "scores", "address", "ok"]})";

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void MaskAlone(const std::shared_ptr<const JsonGrammar>& grammar,
               const std::shared_ptr<const TokenVocabulary>& vocabulary,
               const ModelConfig& config) {
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(config.vocab_size));
  int64_t tokens = 0;
  int64_t misses = 0;
  double served = 0.0;
  for (int request = 0; request < 20; ++request) {
    TokenConstraint constraint(grammar, vocabulary);
    SamplingParams params;
    params.seed = static_cast<uint64_t>(request);
    Sampler sampler(params);
    for (int step = 0; step < 256 && !constraint.complete(); ++step) {
      for (float& l : logits) l = uniform(rng);
      auto start = std::chrono::steady_clock::now();
      const TokenMask& mask = constraint.Allowed();
      served += Seconds(start);
      if (mask.allowed == 0) break;
      const int32_t token = sampler.Sample(logits, {}, &mask);
      if (token == config.eos_id) break;
      start = std::chrono::steady_clock::now();
      if (!constraint.Accept(token).ok()) break;
      served += Seconds(start);
      ++tokens;
    }
    misses += constraint.walks();
  }
  std::printf(
      "mask alone (vocabulary %d, trie %zu nodes), uniform random logits over the mask: "
      "%lld tokens, %.1f us/token served (%lld trie walks, the rest from the per-state cache)\n",
      config.vocab_size, vocabulary->trie().size(), static_cast<long long>(tokens),
      1e6 * served / static_cast<double>(std::max<int64_t>(tokens, 1)),
      static_cast<long long>(misses));
  // One trie walk (a cache miss) in three states: before the value, in a string, in a number.
  const std::pair<const char*, const char*> states[] = {
      {"at the start", ""},
      {"in a string", " {\"name\": \"Ann"},
      {"in a number", " {\"name\": \"Ann\", \"age\": 4"}};
  std::printf("one trie walk:");
  for (const auto& [name, prefix] : states) {
    TokenConstraint at(grammar, vocabulary);
    for (const char* c = prefix; *c != 0; ++c) {
      // Single-byte pieces exist (byte fallback): advance through them.
      for (int32_t id = 0; id < vocabulary->vocab_size(); ++id) {
        if (vocabulary->bytes(id) == std::string(1, *c)) {
          (void)at.Accept(id);
          break;
        }
      }
    }
    std::vector<double> times;
    for (int i = 0; i < 21; ++i) {
      const auto start = std::chrono::steady_clock::now();
      const TokenMask walked = at.ComputeMask();
      times.push_back(Seconds(start) + (walked.allowed > 0 ? 0.0 : 1.0));
    }
    std::sort(times.begin(), times.end());
    std::printf(" %.1f us %s;", 1e6 * times[times.size() / 2], name);
  }
  std::printf(" (medians of 21)\n");
}

// Runs `requests` at once; returns the wall seconds and each request's generated tokens.
double RunBatch(Executor& executor, const std::vector<GenerationRequest>& requests,
                std::vector<int>* generated, std::vector<std::vector<int32_t>>* ids = nullptr) {
  if (ids != nullptr) ids->assign(requests.size(), {});
  std::mutex mu;
  std::condition_variable cv;
  int open = static_cast<int>(requests.size());
  generated->assign(requests.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < requests.size(); ++i) {
    auto enqueued = executor.Enqueue(requests[i], [&, i](GenerationEvent event) {
      std::lock_guard<std::mutex> lock(mu);
      (*generated)[i] += static_cast<int>(event.token_ids.size());
      if (ids != nullptr) {
        (*ids)[i].insert((*ids)[i].end(), event.token_ids.begin(), event.token_ids.end());
      }
      if (event.finished && --open == 0) cv.notify_all();
    });
    if (!enqueued.ok()) {
      std::fprintf(stderr, "enqueue: %s\n", std::string(enqueued.status().message()).c_str());
      std::exit(1);
    }
  }
  std::unique_lock<std::mutex> lock(mu);
  cv.wait(lock, [&] { return open == 0; });
  return Seconds(start);
}

// The model's constrained outputs replayed without the model: per token, the automaton's part
// (Allowed + Accept, the per-request cache as served) and the draw with and without the mask.
void Replay(const std::vector<std::vector<int32_t>>& outputs,
            const std::shared_ptr<const JsonGrammar>& grammar,
            const std::shared_ptr<const TokenVocabulary>& vocabulary, float temperature) {
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> uniform(-3.0f, 3.0f);
  std::vector<float> logits(static_cast<size_t>(vocabulary->vocab_size()));
  for (float& l : logits) l = uniform(rng);
  SamplingParams params;
  params.temperature = temperature;
  Sampler sampler(params);
  double automaton = 0.0, masked = 0.0, unmasked = 0.0;
  int64_t tokens = 0;
  for (const std::vector<int32_t>& output : outputs) {
    TokenConstraint constraint(grammar, vocabulary);
    for (int32_t token : output) {
      auto start = std::chrono::steady_clock::now();
      const TokenMask& mask = constraint.Allowed();
      automaton += Seconds(start);
      start = std::chrono::steady_clock::now();
      (void)sampler.Sample(logits, {}, &mask);
      masked += Seconds(start);
      start = std::chrono::steady_clock::now();
      (void)sampler.Sample(logits, {});
      unmasked += Seconds(start);
      start = std::chrono::steady_clock::now();
      if (!constraint.Accept(token).ok()) break;
      automaton += Seconds(start);
      ++tokens;
    }
  }
  const double n = static_cast<double>(std::max<int64_t>(tokens, 1));
  std::printf(
      "  replayed %lld tokens of these outputs: automaton %.1f us/token; the draw %.1f us "
      "with the mask, %.1f us without\n",
      static_cast<long long>(tokens), 1e6 * automaton / n, 1e6 * masked / n, 1e6 * unmasked / n);
}

void EndToEnd(Executor& executor, const std::shared_ptr<const JsonGrammar>& grammar,
              const std::shared_ptr<const TokenVocabulary>& vocabulary, int batch, int max_tokens,
              int rounds, float temperature) {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<double> with;
  std::vector<double> without;
  int64_t tokens = 0;
  for (int round = 0; round < rounds; ++round) {
    double constrained_seconds = 0.0;
    std::vector<GenerationRequest> constrained(static_cast<size_t>(batch));
    for (int i = 0; i < batch; ++i) {
      GenerationRequest& r = constrained[static_cast<size_t>(i)];
      r.prompt = "The record of the person reads";
      r.max_tokens = max_tokens;
      r.sampling.seed = static_cast<uint64_t>(i + 1);
      r.sampling.temperature = temperature;
      r.response_format = grammar;
    }
    // Constrained first on even rounds, plain first on odd ones (the plain run needs the
    // constrained run's token counts, so an odd round runs a constrained warm-up first).
    std::vector<int> generated;
    if (round % 2 == 1) RunBatch(executor, constrained, &generated);
    std::vector<GenerationRequest> plain = constrained;
    if (round % 2 == 0) {
      constrained_seconds = RunBatch(executor, constrained, &generated, &outputs);
    }
    tokens = 0;
    for (size_t i = 0; i < plain.size(); ++i) {
      plain[i].response_format = nullptr;
      plain[i].ignore_eos = true;
      plain[i].max_tokens = std::max(generated[i], 1);
      tokens += plain[i].max_tokens;
    }
    std::vector<int> plain_generated;
    const double plain_seconds = RunBatch(executor, plain, &plain_generated);
    if (round % 2 == 1) {
      constrained_seconds = RunBatch(executor, constrained, &generated, &outputs);
    }
    with.push_back(1e3 * constrained_seconds / static_cast<double>(tokens));
    without.push_back(1e3 * plain_seconds / static_cast<double>(tokens));
  }
  std::sort(with.begin(), with.end());
  std::sort(without.begin(), without.end());
  const double w = with[with.size() / 2];
  const double wo = without[without.size() / 2];
  std::printf(
      "temperature %.1f, batch %2d: %lld tokens per round; ms per generated token: %.3f with "
      "the schema, %.3f without (%+.3f ms, %+.0f%%), median of %d rounds\n",
      temperature, batch, static_cast<long long>(tokens), w, wo, w - wo, 100.0 * (w - wo) / wo,
      rounds);
  Replay(outputs, grammar, vocabulary, temperature);
}

int Main(int argc, char** argv) {
  std::string model_dir = std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm";
  std::vector<int> batches = {1, 32};
  int max_tokens = 128;
  int rounds = 5;
  float temperature = 1.0f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const std::string value = argv[i + 1];
    if (flag == "--model") {
      model_dir = value;
    } else if (flag == "--batches") {
      batches.clear();
      for (absl::string_view b : absl::StrSplit(value, ',')) {
        int n = 0;
        if (absl::SimpleAtoi(b, &n) && n > 0) batches.push_back(n);
      }
    } else if (flag == "--max_tokens") {
      (void)absl::SimpleAtoi(value, &max_tokens);
    } else if (flag == "--temperature") {
      (void)absl::SimpleAtof(value, &temperature);
    } else if (flag == "--rounds") {
      (void)absl::SimpleAtoi(value, &rounds);
    } else {
      std::fprintf(stderr, "unknown flag %s (see the header of loadtest/json_bench_main.cc)\n",
                   flag.c_str());
      return 2;
    }
  }
  auto model = Model::Load(model_dir);
  auto tokenizer = Tokenizer::LoadDirectory(model_dir);
  if (!model.ok() || !tokenizer.ok()) {
    std::fprintf(stderr, "cannot load %s\n", model_dir.c_str());
    return 1;
  }
  auto grammar = JsonGrammar::FromSchema(nlohmann::ordered_json::parse(kSchema), "schema");
  if (!grammar.ok()) return 1;
  const ModelConfig& config = (*model)->config();
  std::vector<std::string> bytes = (*tokenizer)->TokenBytes();
  bytes.resize(static_cast<size_t>(config.vocab_size));
  auto vocabulary = std::make_shared<const TokenVocabulary>(std::move(bytes),
                                                            std::vector<int32_t>{config.eos_id});
  MaskAlone(*grammar, vocabulary, config);
  ExecutorOptions options;
  options.max_running_sequences = 64;
  auto executor = Executor::Create(**model, **tokenizer, options);
  if (!executor.ok()) return 1;
  for (int batch : batches) {
    EndToEnd(**executor, *grammar, vocabulary, batch, max_tokens, rounds, temperature);
  }
  return 0;
}

}  // namespace
}  // namespace abcd

int main(int argc, char** argv) { return abcd::Main(argc, argv); }
