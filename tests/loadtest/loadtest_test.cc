// Unit tests of the load-test library: metric definitions (against numpy's and vLLM's),
// goodput, loopback-only targets, the SSE and Prometheus readers, arrival processes, workloads
// and the closed/open-loop runner (with a fake driver).
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "loadtest/lib/conversations.h"
#include "loadtest/lib/host_check.h"
#include "loadtest/lib/prometheus_text.h"
#include "loadtest/lib/runner.h"
#include "loadtest/lib/sse_parser.h"
#include "loadtest/lib/stats.h"
#include "loadtest/lib/workload.h"

namespace abcd::loadtest {
namespace {

using std::chrono::milliseconds;

TEST(Stats, PercentilesInterpolateLikeNumpy) {
  std::vector<double> v = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  // numpy.percentile(range(1, 11), [50, 90, 99]) == [5.5, 9.1, 9.91]
  EXPECT_DOUBLE_EQ(Percentile(v, 50), 5.5);
  EXPECT_NEAR(Percentile(v, 90), 9.1, 1e-12);
  EXPECT_NEAR(Percentile(v, 99), 9.91, 1e-12);
  EXPECT_DOUBLE_EQ(Percentile({7}, 99), 7);
  const Distribution d = Describe({4, 1, 3, 2});
  EXPECT_EQ(d.count, 4u);
  EXPECT_DOUBLE_EQ(d.mean, 2.5);
  EXPECT_DOUBLE_EQ(d.median, 2.5);
  EXPECT_NEAR(d.std, std::sqrt(1.25), 1e-12);  // population std, as numpy.std
  EXPECT_EQ(Describe({}).mean, 0);
}

RequestRecord Streamed(int64_t index, Clock::time_point t0, int send_ms, std::vector<int> chunk_ms,
                       int output_tokens) {
  RequestRecord r;
  r.index = index;
  r.ok = true;
  r.status = "OK";
  r.send = r.arrival = t0 + milliseconds(send_ms);
  for (int c : chunk_ms) {
    r.chunk_times.push_back(r.send + milliseconds(c));
    r.chunk_tokens.push_back(1);
  }
  r.end = r.chunk_times.back();
  r.prompt_tokens = 10;
  r.output_tokens = output_tokens;
  return r;
}

TEST(Stats, MetricsFollowVllmDefinitions) {
  const Clock::time_point t0 = Clock::now();
  std::vector<RequestRecord> records;
  records.push_back(Streamed(0, t0, 0, {100, 110, 130}, 3));  // ttft 100, tpot 15, itl 10, 20
  records.push_back(Streamed(1, t0, 50, {200, 240}, 2));      // ttft 200, tpot 40, itl 40
  RequestRecord failed;
  failed.status = "RESOURCE_EXHAUSTED";
  failed.send = failed.end = failed.arrival = t0;
  records.push_back(failed);
  records.push_back(failed);
  Slo slo;
  slo.ttft_ms = 150;
  const BenchmarkMetrics m = ComputeMetrics(records, t0, t0 + milliseconds(2000), slo);
  EXPECT_EQ(m.completed, 2);
  EXPECT_EQ(m.failed, 2);
  EXPECT_EQ(m.errors_by_status.at("RESOURCE_EXHAUSTED"), 2);
  EXPECT_EQ(m.total_input_tokens, 20);
  EXPECT_EQ(m.total_output_tokens, 5);
  EXPECT_NEAR(m.ttft_ms.mean, 150, 1e-6);
  EXPECT_NEAR(m.tpot_ms.mean, 27.5, 1e-6);
  EXPECT_NEAR(m.itl_ms.mean, (10 + 20 + 40) / 3.0, 1e-6);
  EXPECT_NEAR(m.e2el_ms.mean, (130 + 240) / 2.0, 1e-6);
  EXPECT_NEAR(m.request_throughput, 1.0, 1e-9);
  EXPECT_NEAR(m.request_goodput, 0.5, 1e-9);  // only the first meets TTFT <= 150 ms
  EXPECT_NEAR(m.output_throughput, 2.5, 1e-9);
  EXPECT_NEAR(m.total_token_throughput, 12.5, 1e-9);
  EXPECT_EQ(m.max_concurrent_requests, 2);
  EXPECT_EQ(m.max_output_tokens_per_s, 5);
}

TEST(Stats, ParsesSlo) {
  absl::StatusOr<Slo> slo = ParseSlo("ttft:500, tpot:50,e2el:2000");
  ASSERT_TRUE(slo.ok()) << slo.status();
  EXPECT_EQ(*slo->ttft_ms, 500);
  EXPECT_EQ(*slo->tpot_ms, 50);
  EXPECT_EQ(*slo->e2el_ms, 2000);
  EXPECT_FALSE(ParseSlo("latency:5").ok());
  EXPECT_FALSE(ParseSlo("ttft:-1").ok());
  EXPECT_FALSE(ParseSlo("ttft").ok());
}

TEST(HostCheck, AcceptsOnlyLoopback) {
  for (const char* host : {"127.0.0.1", "127.3.2.1", "::1", "[::1]", "::ffff:127.0.0.1"}) {
    absl::StatusOr<std::string> address = LoopbackAddress(host);
    EXPECT_TRUE(address.ok()) << host;
  }
  EXPECT_EQ(*LoopbackAddress("localhost"), "127.0.0.1");
  EXPECT_EQ(*LoopbackAddress("LocalHost"), "127.0.0.1");
  EXPECT_EQ(*LoopbackAddress("[::1]"), "::1");
  for (const char* host :
       {"10.0.0.1", "0.0.0.0", "128.0.0.1", "192.168.1.1", "::", "::2", "example.com",
        "localhost.example.com", "127.0.0.1.nip.io", "", "::ffff:10.0.0.1"}) {
    absl::StatusOr<std::string> address = LoopbackAddress(host);
    ASSERT_FALSE(address.ok()) << host;
    EXPECT_NE(address.status().message().find("loopback"), std::string::npos);
  }
}

TEST(SseParser, SplitsEventsAcrossArbitraryChunks) {
  const std::string stream =
      "data: {\"a\":1}\n\n: comment\n\ndata: line1\ndata: line2\r\n\r\nevent: x\ndata: [DONE]\n\n";
  for (size_t piece = 1; piece <= stream.size(); ++piece) {
    SseParser parser;
    std::vector<std::string> events;
    for (size_t i = 0; i < stream.size(); i += piece) {
      for (std::string& e : parser.Feed(stream.substr(i, piece))) events.push_back(e);
    }
    ASSERT_EQ(events.size(), 3u) << "piece " << piece;
    EXPECT_EQ(events[0], "{\"a\":1}");
    EXPECT_EQ(events[1], "line1\nline2");
    EXPECT_EQ(events[2], "[DONE]");
    EXPECT_EQ(parser.pending(), 0u);
  }
}

TEST(SseParser, ReadsCompletionChunks) {
  CompletionChunk c = ParseCompletionChunk(
      R"({"id":"x","choices":[{"index":0,"text":"Hi","finish_reason":null}]})");
  EXPECT_FALSE(c.malformed);
  EXPECT_EQ(c.text, "Hi");
  EXPECT_FALSE(c.has_usage);
  c = ParseCompletionChunk(
      R"({"choices":[{"text":"","finish_reason":"length"}],"usage":{"prompt_tokens":5,"completion_tokens":7}})");
  EXPECT_TRUE(c.has_usage);
  EXPECT_EQ(c.prompt_tokens, 5);
  EXPECT_EQ(c.completion_tokens, 7);
  c = ParseCompletionChunk(R"({"error":{"message":"boom","type":"server_error"}})");
  EXPECT_TRUE(c.error);
  EXPECT_EQ(c.error_message, "boom");
  EXPECT_TRUE(ParseCompletionChunk("[DONE]").done);
  EXPECT_TRUE(ParseCompletionChunk("not json").malformed);
  EXPECT_TRUE(ParseCompletionChunk(R"({"choices":[]})").malformed);
  // OpenAI's stream_options.include_usage: "usage": null on every chunk, then a usage-only
  // chunk with "choices": [].
  c = ParseCompletionChunk(
      R"({"choices":[{"index":0,"text":"Hi","finish_reason":null}],"usage":null})");
  EXPECT_FALSE(c.malformed);
  EXPECT_FALSE(c.has_usage);
  EXPECT_EQ(c.text, "Hi");
  c = ParseCompletionChunk(
      R"({"id":"x","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}})");
  EXPECT_FALSE(c.malformed);
  EXPECT_TRUE(c.has_usage);
  EXPECT_EQ(c.prompt_tokens, 3);
  EXPECT_EQ(c.completion_tokens, 4);
  EXPECT_EQ(c.text, "");
  EXPECT_TRUE(ParseCompletionChunk(R"({"choices":[],"usage":null})").malformed);
}

TEST(PrometheusText, ParsesSamplesAndSumsByLabel) {
  const std::string text = R"(# HELP abcd_requests_total Requests.
# TYPE abcd_requests_total counter
abcd_requests_total{kind="generate",status="ok"} 12
abcd_requests_total{kind="generate",status="resource_exhausted"} 3
abcd_requests_total{kind="translate",status="ok"} 1
abcd_state_bytes_per_sequence{model="odd \"name\" \\ x"} 24576
abcd_batch_size_bucket{le="+Inf"} 9
abcd_running_sequences 4
broken{ 1
)";
  const MetricSnapshot s(ParsePrometheusText(text));
  EXPECT_EQ(s.samples().size(), 6u);
  EXPECT_EQ(s.Sum("abcd_requests_total"), 16);
  EXPECT_EQ(s.Sum("abcd_requests_total", {{"kind", "generate"}}), 15);
  EXPECT_EQ(s.Sum("abcd_requests_total", {{"kind", "generate"}, {"status", "ok"}}), 12);
  EXPECT_EQ(s.Sum("abcd_state_bytes_per_sequence", {{"model", "odd \"name\" \\ x"}}), 24576);
  EXPECT_EQ(s.Sum("abcd_batch_size_bucket", {{"le", "+Inf"}}), 9);
  EXPECT_EQ(s.Sum("abcd_running_sequences"), 4);
  EXPECT_FALSE(s.Has("broken"));
}

TEST(ArrivalProcess, GammaGapsHaveTheRequestedRateAndBurstiness) {
  for (double burstiness : {0.25, 1.0, 4.0}) {
    ArrivalProcess arrivals(20.0, burstiness, 1);
    const int n = 200000;
    double sum = 0, squares = 0;
    for (int i = 0; i < n; ++i) {
      const double g = arrivals.NextGap();
      sum += g;
      squares += g * g;
    }
    const double mean = sum / n;
    const double cv = std::sqrt(squares / n - mean * mean) / mean;
    EXPECT_NEAR(mean, 1.0 / 20, 0.002) << burstiness;
    EXPECT_NEAR(cv, 1 / std::sqrt(burstiness), 0.05) << burstiness;  // Poisson: cv = 1
  }
}

// A file of this test process's own, removed when it goes out of scope: ctest runs each test in
// a process of its own, several at once, and two that wrote the same path raced (one read the
// file while the other truncated it).
struct TempFile {
  TempFile(const std::string& name, const std::string& text)
      : path(::testing::TempDir() + "/" + std::to_string(getpid()) + "_" + name) {
    std::ofstream(path) << text;
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  const std::string path;
};

TEST(Workload, ParsesLengthRanges) {
  EXPECT_EQ(ParseLengthRange("x", "32")->min, 32);
  EXPECT_EQ(ParseLengthRange("x", "16:64")->max, 64);
  EXPECT_FALSE(ParseLengthRange("x", "0").ok());
  EXPECT_FALSE(ParseLengthRange("x", "9:3").ok());
  EXPECT_FALSE(ParseLengthRange("x", "a:b").ok());
  EXPECT_FALSE(ParseLengthRange("x", "1:2:3").ok());
}

TEST(Workload, IsDeterministicAndHonoursLengths) {
  const TempFile prompts("prompts.jsonl",
                         "{\"prompt\": \"one two three\", \"output_tokens\": 7}\n"
                         "plain text line\n\n{\"text\": \"from a text field\"}\n");
  WorkloadOptions o;
  o.prompts_file = prompts.path;
  o.seed = 5;
  absl::StatusOr<Workload> w = Workload::Create(o, nullptr);
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(w->prompt_count(), 3u);
  std::set<std::string> seen;
  for (int i = 0; i < 3; ++i) {
    const RequestSpec a = w->Make(i);
    seen.insert(a.prompt);
    EXPECT_EQ(a.max_tokens, a.prompt == "one two three" ? 7 : 32);
    EXPECT_EQ(w->Make(i).prompt, a.prompt);
  }
  EXPECT_EQ(seen.size(), 3u);  // one pass visits every prompt once

  o.output_tokens = {4, 9};
  absl::StatusOr<Workload> ranged = Workload::Create(o, nullptr);
  ASSERT_TRUE(ranged.ok());
  std::set<int> lengths;
  for (int i = 0; i < 200; ++i) {
    const int n = ranged->Make(i).max_tokens;
    EXPECT_GE(n, 4);
    EXPECT_LE(n, 9);
    lengths.insert(n);
  }
  EXPECT_EQ(lengths.size(), 6u);

  o.prompt_tokens = {8, 8};
  EXPECT_FALSE(Workload::Create(o, nullptr).ok());  // needs a tokenizer
  o.prompts_file = ::testing::TempDir() + "/missing.jsonl";
  EXPECT_FALSE(Workload::Create(o, nullptr).ok());
}

TEST(Workload, CutsPromptsToExactTokenCounts) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(
      std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm-untrained/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  WorkloadOptions o;
  o.prompts_file = std::string(ABCD_SOURCE_DIR) + "/loadtest/prompts/brown_test.jsonl";
  o.prompt_tokens = {64, 64};
  absl::StatusOr<Workload> w = Workload::Create(o, tokenizer->get());
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < 10; ++i) {
    const RequestSpec spec = w->Make(i);
    EXPECT_EQ(spec.prompt_tokens, 64);
    const size_t n = (*tokenizer)->Encode(spec.prompt)->size();
    EXPECT_NEAR(static_cast<double>(n), 64, 4) << spec.prompt;  // re-encoding may merge pieces
  }
}

TEST(Workload, PromptsLongerThanTheFileRepeatItsText) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = Tokenizer::Load(
      std::string(ABCD_SOURCE_DIR) + "/models/checkpoints/abc-lm-untrained/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  const TempFile prompts("short.jsonl", "{\"prompt\": \"the quick brown fox jumps\"}\n");
  const size_t file_tokens = (*tokenizer)->Encode("the quick brown fox jumps")->size();
  WorkloadOptions o;
  o.prompts_file = prompts.path;
  o.seed = 3;
  o.prompt_tokens = {100, 100};
  absl::StatusOr<Workload> w = Workload::Create(o, tokenizer->get());
  ASSERT_TRUE(w.ok()) << w.status();
  std::set<std::string> starts;
  for (int i = 0; i < 20; ++i) {
    const RequestSpec spec = w->Make(i);
    EXPECT_EQ(spec.prompt_tokens, 100);
    EXPECT_EQ(w->Make(i).prompt, spec.prompt);  // deterministic per index
    const size_t n = (*tokenizer)->Encode(spec.prompt)->size();
    EXPECT_NEAR(static_cast<double>(n), 100, 6) << spec.prompt;
    EXPECT_NE(spec.prompt.find("fox jumps"), std::string::npos);
    starts.insert(spec.prompt.substr(0, 6));
  }
  EXPECT_GT(starts.size(), 1u) << "every prompt started at the same token";
  EXPECT_LT(file_tokens, 100u);
}

// Completes every request after `latency` on its own thread; counts what is in flight.
class FakeDriver : public Driver {
 public:
  explicit FakeDriver(milliseconds latency) : latency_(latency) {}
  ~FakeDriver() override {
    for (std::thread& t : threads_) t.join();
  }
  void Start(const RequestSpec& spec, DoneCallback done) override {
    const int now = ++in_flight_;
    int peak = peak_.load();
    while (now > peak && !peak_.compare_exchange_weak(peak, now)) {
    }
    std::lock_guard<std::mutex> lock(mu_);
    threads_.emplace_back([this, spec, done = std::move(done)] {
      RequestRecord r;
      r.index = spec.index;
      r.send = Clock::now();
      for (int i = 0; i < 50 && !cancelled_.load(); ++i)
        std::this_thread::sleep_for(std::chrono::microseconds(latency_) / 50);
      r.chunk_times = {Clock::now()};
      r.chunk_tokens = {1};
      r.end = Clock::now();
      r.ok = !cancelled_.load();
      r.status = r.ok ? "OK" : "CANCELLED";
      r.output_tokens = 1;
      --in_flight_;
      done(std::move(r));
    });
  }
  void CancelAll() override { cancelled_.store(true); }
  Endpoint endpoint() const override { return Endpoint::kInProcess; }
  int peak() const { return peak_.load(); }

 private:
  const milliseconds latency_;
  std::atomic<int> in_flight_{0};
  std::atomic<int> peak_{0};
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::vector<std::thread> threads_;
};

Workload SimpleWorkload() {
  WorkloadOptions o;
  const TempFile prompts("runner_prompts.txt", "a\nb\nc\n");
  o.prompts_file = prompts.path;
  return *Workload::Create(o, nullptr);  // read whole: the file may go
}

TEST(Runner, ClosedLoopKeepsConcurrencyAndCount) {
  FakeDriver driver(milliseconds(20));
  PhaseOptions o;
  o.concurrency = 4;
  o.num_requests = 24;
  const PhaseResult r = RunPhase(driver, SimpleWorkload(), o, 100);
  ASSERT_EQ(r.records.size(), 24u);
  EXPECT_EQ(driver.peak(), 4);
  std::set<int64_t> indices;
  for (const RequestRecord& rec : r.records) indices.insert(rec.index);
  EXPECT_EQ(*indices.begin(), 100);
  EXPECT_EQ(*indices.rbegin(), 123);
  // 24 requests of 20 ms, 4 at a time: about 120 ms.
  EXPECT_GE(r.end - r.start, milliseconds(110));
}

TEST(Runner, OpenLoopFollowsTheRateAndTheCap) {
  FakeDriver driver(milliseconds(100));
  PhaseOptions o;
  o.request_rate = 200;
  o.num_requests = 40;
  o.max_concurrency = 5;
  const PhaseResult r = RunPhase(driver, SimpleWorkload(), o, 0);
  ASSERT_EQ(r.records.size(), 40u);
  EXPECT_EQ(driver.peak(), 5);
  // The cap makes requests wait for a slot: their client queue time shows it.
  const BenchmarkMetrics m = ComputeMetrics(r.records, r.start, r.end, {});
  EXPECT_GT(m.queue_ms.p99, 10.0);
}

TEST(Runner, DurationBoundsAndDrainCancels) {
  FakeDriver driver(milliseconds(2000));
  PhaseOptions o;
  o.concurrency = 3;
  o.duration_s = 0.2;
  o.drain_timeout_s = 0.1;
  const auto start = Clock::now();
  const PhaseResult r = RunPhase(driver, SimpleWorkload(), o, 0);
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(2));
  ASSERT_EQ(r.records.size(), 3u);
  EXPECT_EQ(r.cancelled_at_drain, 3);
  for (const RequestRecord& rec : r.records) EXPECT_EQ(rec.status, "CANCELLED");
}

// Answers each request on its own thread with "<" + prompt's last char + ">" and, for
// "new", a fresh session id; records every spec it was sent.
class ConversationDriver : public Driver {
 public:
  ~ConversationDriver() override {
    for (std::thread& t : threads_) t.join();
  }
  void Start(const RequestSpec& spec, DoneCallback done) override {
    std::lock_guard<std::mutex> lock(mu_);
    specs_.push_back(spec);
    const int id = next_id_++;
    threads_.emplace_back([spec, id, done = std::move(done)] {
      std::this_thread::sleep_for(milliseconds(2));
      RequestRecord r;
      r.index = spec.index;
      r.send = Clock::now();
      r.chunk_times = {Clock::now()};
      r.chunk_tokens = {1};
      r.end = Clock::now();
      r.ok = true;
      r.text = absl::StrCat("<", spec.prompt.substr(spec.prompt.size() - 1), ">");
      r.session_id = spec.session_id == "new" ? absl::StrCat("S", id) : spec.session_id;
      done(std::move(r));
    });
  }
  void CancelAll() override {}
  Endpoint endpoint() const override { return Endpoint::kInProcess; }
  std::vector<RequestSpec> specs() {
    std::lock_guard<std::mutex> lock(mu_);
    return specs_;
  }

 private:
  std::mutex mu_;
  std::vector<RequestSpec> specs_;
  std::vector<std::thread> threads_;
  int next_id_ = 0;
};

TEST(Conversations, SessionsNameTheServersIdAndTurnsRunInOrder) {
  ConversationDriver driver;
  ConversationOptions o;
  o.conversations = 5;
  o.turns = 3;
  o.concurrency = 2;
  const PhaseResult r = RunConversations(driver, SimpleWorkload(), o, 0);
  ASSERT_EQ(r.records.size(), 15u);
  std::map<int64_t, std::vector<RequestSpec>> by_conversation;  // index / turns
  for (const RequestSpec& spec : driver.specs()) by_conversation[spec.index / 3].push_back(spec);
  ASSERT_EQ(by_conversation.size(), 5u);
  for (const auto& [c, specs] : by_conversation) {
    ASSERT_EQ(specs.size(), 3u);
    EXPECT_EQ(specs[0].session_id, "new");
    EXPECT_EQ(specs[1].session_id.substr(0, 1), "S");  // the id the server returned
    EXPECT_EQ(specs[2].session_id, specs[1].session_id);
    for (int t = 0; t < 3; ++t) EXPECT_EQ(specs[t].index, c * 3 + t);
  }
  for (int turn = 0; turn < 3; ++turn) {
    EXPECT_EQ(std::count_if(r.records.begin(), r.records.end(),
                            [turn](const RequestRecord& rec) { return rec.turn == turn; }),
              5);
  }
  const std::vector<TurnSummary> turns = SummarizeTurns(r.records, 3);
  ASSERT_EQ(turns.size(), 3u);
  EXPECT_EQ(turns[2].requests, 5);
}

TEST(Conversations, ResendCarriesTheWholeHistory) {
  ConversationDriver driver;
  ConversationOptions o;
  o.conversations = 1;
  o.turns = 3;
  o.resend_history = true;
  const PhaseResult r = RunConversations(driver, SimpleWorkload(), o, 0);
  ASSERT_EQ(r.records.size(), 3u);
  const std::vector<RequestSpec> specs = driver.specs();
  ASSERT_EQ(specs.size(), 3u);
  const Workload w = SimpleWorkload();
  const std::string p0 = w.Make(0).prompt, p1 = w.Make(1).prompt, p2 = w.Make(2).prompt;
  const auto answer = [](const std::string& prompt) {
    return absl::StrCat("<", prompt.substr(prompt.size() - 1), ">");
  };
  EXPECT_EQ(specs[0].prompt, p0);
  EXPECT_EQ(specs[1].prompt, p0 + answer(p0) + p1);
  const std::string second = p0 + answer(p0) + p1;
  EXPECT_EQ(specs[2].prompt, second + answer(second) + p2);
  for (const RequestSpec& spec : specs) EXPECT_TRUE(spec.session_id.empty());
}

}  // namespace
}  // namespace abcd::loadtest
