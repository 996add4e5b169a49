// The CUDA backend under the Executor, against the CPU backend: the start-up parity probe
// passes on every decoder-only fixture, mixed batches (prompt chunks next to single decode
// rows, forks) give the CPU's logits row for row, bad rows are refused naming the row with no
// state changed, and the Executor on CUDA generates the CPU Executor's greedy tokens for
// concurrent requests. fp32 weights, so the CPU tolerance applies. Skipped without a GPU.
#include "engine/backend/cuda_backend.h"

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "engine/backend/cpu_backend.h"
#include "engine/model/model.h"
#include "engine/scheduler/executor.h"
#include "engine/scheduler/speculation.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/engine/fixtures.h"
#include "tests/engine/scheduler/event_collector.h"
#include "tests/testing/model_dirs.h"

namespace abcd::cuda {
namespace {

using abcd::testing::Collector;
using abcd::testing::FixtureDir;
using abcd::testing::FixtureNames;
using abcd::testing::kLmDir;
using abcd::testing::SpeculationCounter;
using abcd::testing::Tokens;

CudaBackendOptions Fp32Options() {
  CudaBackendOptions options;
  options.max_sequences = 8;
  options.max_context = 256;
  options.weights = WeightType::kF32;
  options.cuda_graphs = false;
  return options;
}

class CudaBackendTest : public CudaTest {
 protected:
  // The CPU model of fixture `name` and its CUDA backend; null backend when the CUDA path does
  // not run the model (then the error must be Unimplemented).
  std::unique_ptr<CudaBackend> Make(const std::string& dir,
                                    const CudaBackendOptions& options = Fp32Options()) {
    absl::StatusOr<std::unique_ptr<Model>> model = Model::Load(dir);
    EXPECT_TRUE(model.ok()) << model.status();
    if (!model.ok()) return nullptr;
    models_.push_back(std::move(*model));
    absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
        CudaBackend::Create(*models_.back(), options);
    if (!backend.ok()) {
      EXPECT_EQ(backend.status().code(), absl::StatusCode::kUnimplemented)
          << dir << ": " << backend.status();
      return nullptr;
    }
    return std::move(*backend);
  }
  // Speculative decoding on CUDA (n-gram drafts verified with the device's checkpoints, the
  // steps without a draft sampled on the device) generates the plain CPU Executor's greedy
  // tokens for concurrent requests and for one alone (batch-1 verify passes).
  void ExpectSpeculativeExecutorGivesThePlainCpuGreedyTokens(std::unique_ptr<CudaBackend> cuda);
  std::vector<std::unique_ptr<Model>> models_;
};

std::vector<DecodeRow> Rows(SequenceId sequence, std::vector<int32_t> tokens,
                            std::vector<bool> want) {
  std::vector<DecodeRow> rows;
  for (size_t i = 0; i < tokens.size(); ++i) rows.push_back({sequence, tokens[i], want[i]});
  return rows;
}

TEST_F(CudaBackendTest, ParityProbePassesOnEveryDecoderFixture) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> backend = Make(FixtureDir(name));
    if (backend == nullptr) continue;
    ++checked;
    EXPECT_LE(backend->probe_relative_error(), kLogitsTolerance) << name;
    EXPECT_EQ(backend->name(), "cuda");
    EXPECT_EQ(backend->memory().sequences, 0) << name << ": the probe must release its slots";
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CudaBackendTest, MixedBatchesAndForksEqualTheCpuBackend) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name));
    if (cuda == nullptr) continue;
    ++checked;
    CpuBackend cpu(*models_.back(), int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    auto token = [vocab](int i) { return static_cast<int32_t>((i * 37 + 11) % vocab); };
    DecodeBackend* backends[] = {&cpu, cuda.get()};
    std::vector<float> logits[2];
    for (int b = 0; b < 2; ++b) {
      DecodeBackend& backend = *backends[b];
      const SequenceId a = backend.Acquire().value();
      const SequenceId s = backend.Acquire().value();
      const SequenceId c = backend.Acquire().value();
      // 1: three prompt chunks of 6, 1 and 3 rows (logits on the last, the only, every row).
      std::vector<DecodeRow> rows =
          Rows(a, {token(1), token(2), token(3), token(4), token(5), token(6)},
               {false, false, false, false, false, true});
      for (const DecodeRow& r : Rows(s, {token(7)}, {true})) rows.push_back(r);
      for (const DecodeRow& r : Rows(c, {token(8), token(9), token(10)}, {true, true, true})) {
        rows.push_back(r);
      }
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      // 2: single rows next to a 4-row chunk with logits on its first and last rows.
      rows = Rows(a, {token(11)}, {true});
      for (const DecodeRow& r :
           Rows(s, {token(12), token(13), token(14), token(15)}, {true, false, false, true})) {
        rows.push_back(r);
      }
      for (const DecodeRow& r : Rows(c, {token(16)}, {true})) rows.push_back(r);
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      // 3: a fork of `a` continues differently from `a`.
      const SequenceId fork = backend.Fork(a).value();
      rows = {{a, token(17), true}, {fork, token(18), true}, {c, token(19), true}};
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      rows = {{fork, token(20), true}, {a, token(21), true}};
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      for (SequenceId id : {a, s, c, fork}) backend.Release(id);
      EXPECT_EQ(backend.memory().sequences, 0);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size()) << name;
    ExpectClose(logits[1], logits[0], kLogitsTolerance, name + " mixed batches");
  }
  EXPECT_GT(checked, 0);
}

// A Decode() with more rows than one forward pass carries (max_sequences + max_prefill_tokens)
// is cut into passes in row order, a long prompt chunk continuing in the next pass; the logits
// still equal the CPU backend's. Tiny limits also take the probe's one-sequence-at-a-time path.
TEST_F(CudaBackendTest, RowsBeyondOnePassAreSplitInRowOrder) {
  CudaBackendOptions options = Fp32Options();
  options.max_sequences = 3;
  options.max_prefill_tokens = 2;  // 5 rows per pass
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name), options);
    if (cuda == nullptr) continue;
    ++checked;
    CpuBackend cpu(*models_.back(), int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    auto token = [vocab](int i) { return static_cast<int32_t>((i * 53 + 5) % vocab); };
    DecodeBackend* backends[] = {&cpu, cuda.get()};
    std::vector<float> logits[2];
    for (int b = 0; b < 2; ++b) {
      DecodeBackend& backend = *backends[b];
      const SequenceId a = backend.Acquire().value();
      const SequenceId s = backend.Acquire().value();
      const SequenceId c = backend.Acquire().value();
      // 11 rows: passes [a x5], [a x2, s, c x2], [c x1].
      std::vector<DecodeRow> rows =
          Rows(a, {token(1), token(2), token(3), token(4), token(5), token(6), token(7)},
               {false, false, true, false, false, true, true});
      for (const DecodeRow& r : Rows(s, {token(8)}, {true})) rows.push_back(r);
      for (const DecodeRow& r : Rows(c, {token(9), token(10), token(11)}, {true, false, true})) {
        rows.push_back(r);
      }
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      rows = {{c, token(12), true}, {a, token(13), true}, {s, token(14), true}};
      ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name;
      for (SequenceId id : {a, s, c}) backend.Release(id);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size()) << name;
    ExpectClose(logits[1], logits[0], kLogitsTolerance, name + " split passes");
  }
  EXPECT_GT(checked, 0);
}

// Speculative decoding's checkpoints: a verify run of 5 rows with a checkpoint after each of
// the first 4, next to another sequence's rows, then Rollback to checkpoint 2 and on to 1:
// the next logits equal the CPU backend doing the same (whose rollback is exact,
// rollback_test.cc). Once with every row in one pass, once cut into passes of 5 rows, so the
// run's checkpoints are numbered across passes. A checkpoint the last call did not write is
// OUT_OF_RANGE and changes nothing; the next Decode forgets the checkpoints.
TEST_F(CudaBackendTest, RollbackToACheckpointEqualsTheCpuBackend) {
  CudaBackendOptions split = Fp32Options();
  split.max_sequences = 3;
  split.max_prefill_tokens = 2;
  int checked = 0;
  for (const CudaBackendOptions& options : {Fp32Options(), split}) {
    for (const std::string& name : FixtureNames()) {
      const std::string where = name + (options.max_sequences == 3 ? " (5-row passes)" : "");
      std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name), options);
      if (cuda == nullptr) continue;
      ++checked;
      ASSERT_TRUE(cuda->checkpoints_supported());
      EXPECT_EQ(cuda->CheckpointBytes(4), 4 * cuda->state_bytes_per_sequence());
      CpuBackend cpu(*models_.back(), int64_t{1} << 30);
      const int32_t vocab = cuda->config().vocab_size;
      auto token = [vocab](int i) { return static_cast<int32_t>((i * 29 + 7) % vocab); };
      DecodeBackend* backends[] = {&cpu, cuda.get()};
      std::vector<float> logits[2];
      for (int b = 0; b < 2; ++b) {
        DecodeBackend& backend = *backends[b];
        const SequenceId a = backend.Acquire().value();
        const SequenceId s = backend.Acquire().value();
        std::vector<DecodeRow> rows = Rows(a, {token(1), token(2), token(3)}, {false, false, true});
        for (const DecodeRow& r : Rows(s, {token(4), token(5)}, {false, true})) rows.push_back(r);
        ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << where;
        // The verify pass: s's two rows, then a's five (checkpoints 0-3 after its first four).
        rows = Rows(s, {token(6), token(7)}, {true, true});
        for (int i = 0; i < 5; ++i) rows.push_back({a, token(8 + i), true, /*checkpoint=*/i < 4});
        ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << where;
        EXPECT_EQ(backend.Rollback(a, 4).code(), absl::StatusCode::kOutOfRange) << where;
        EXPECT_EQ(backend.Rollback(s, 0).code(), absl::StatusCode::kOutOfRange) << where;
        ASSERT_TRUE(backend.Rollback(a, 2).ok()) << where;
        ASSERT_TRUE(backend.Rollback(a, 1).ok()) << where;  // an earlier one stays valid
        // a now holds its prompt and token(8), token(9): two more rows continue from there.
        rows = Rows(a, {token(20), token(21)}, {true, true});
        rows.push_back({s, token(22), true});
        ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << where;
        EXPECT_EQ(backend.Rollback(a, 0).code(), absl::StatusCode::kOutOfRange)
            << where << ": a later Decode forgets the checkpoints";
        for (SequenceId id : {a, s}) backend.Release(id);
        EXPECT_EQ(backend.memory().sequences, 0);
      }
      ASSERT_EQ(logits[0].size(), logits[1].size()) << where;
      ExpectClose(logits[1], logits[0], kLogitsTolerance, where + " rollback");
    }
  }
  EXPECT_GT(checked, 0);
}

// A verify pass of one sequence runs from a captured graph (buckets of 2, 4, ... 32 rows, the
// rest padding): 2, 3, 4, 5 and 17 rows, each followed by a rollback to a middle checkpoint,
// give the CPU backend's logits.
TEST_F(CudaBackendTest, VerifyPassesFromGraphsEqualTheCpuBackend) {
  CudaBackendOptions graphs = Fp32Options();
  graphs.cuda_graphs = true;
  graphs.max_sequences = 32;
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name), graphs);
    if (cuda == nullptr) continue;
    ++checked;
    CpuBackend cpu(*models_.back(), int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    auto token = [vocab](int i) { return static_cast<int32_t>((i * 41 + 3) % vocab); };
    DecodeBackend* backends[] = {&cpu, cuda.get()};
    std::vector<float> logits[2];
    for (int b = 0; b < 2; ++b) {
      DecodeBackend& backend = *backends[b];
      const SequenceId a = backend.Acquire().value();
      ASSERT_TRUE(
          backend.Decode(Rows(a, {token(1), token(2), token(3)}, {false, false, true}), &logits[b])
              .ok())
          << name;
      int next = 4;
      for (int length : {2, 3, 4, 5, 17}) {
        std::vector<DecodeRow> rows;
        for (int i = 0; i < length; ++i) rows.push_back({a, token(next++), true, i + 1 < length});
        ASSERT_TRUE(backend.Decode(rows, &logits[b]).ok()) << name << " " << length << " rows";
        ASSERT_TRUE(backend.Rollback(a, (length - 1) / 2).ok()) << name << " " << length;
      }
      ASSERT_TRUE(backend.Decode(Rows(a, {token(next)}, {true}), &logits[b]).ok()) << name;
      backend.Release(a);
    }
    ASSERT_EQ(logits[0].size(), logits[1].size()) << name;
    ExpectClose(logits[1], logits[0], kLogitsTolerance, name + " verify graphs");
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CudaBackendTest, BadRowsAreRefusedNamingTheRowAndChangeNothing) {
  std::unique_ptr<CudaBackend> cuda = Make(kLmDir);
  ASSERT_NE(cuda, nullptr);
  CpuBackend cpu(*models_.back(), int64_t{1} << 30);
  const int32_t vocab = cuda->config().vocab_size;
  const SequenceId on_cuda = cuda->Acquire().value();
  const SequenceId on_cpu = cpu.Acquire().value();
  std::vector<float> ignored;
  const absl::Status unknown =
      cuda->Decode(std::vector<DecodeRow>{{on_cuda, 5, true}, {on_cuda + 100, 5, true}}, &ignored);
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(unknown.message().find("rows[1]"), std::string::npos) << unknown;
  const absl::Status token = cuda->Decode(std::vector<DecodeRow>{{on_cuda, vocab, true}}, &ignored);
  EXPECT_EQ(token.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(token.message().find("rows[0].token"), std::string::npos) << token;
  // The refused batches left the sequence empty: the next row is its first.
  std::vector<float> expected, actual;
  ASSERT_TRUE(cpu.Decode(std::vector<DecodeRow>{{on_cpu, 5, true}}, &expected).ok());
  ASSERT_TRUE(cuda->Decode(std::vector<DecodeRow>{{on_cuda, 5, true}}, &actual).ok());
  ExpectClose(actual, expected, kLogitsTolerance, "after refused rows");
}

TEST_F(CudaBackendTest, DeviceSampledGreedyTokensAreTheCpuArgmax) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name));
    if (cuda == nullptr) continue;
    ++checked;
    CpuBackend cpu(*models_.back(), int64_t{1} << 30);
    const int32_t vocab = cuda->config().vocab_size;
    std::vector<SequenceId> on_cuda, on_cpu;
    for (int i = 0; i < 5; ++i) {
      on_cuda.push_back(cuda->Acquire().value());
      on_cpu.push_back(cpu.Acquire().value());
    }
    SamplingParams greedy;
    greedy.temperature = 0.0f;
    std::vector<int32_t> inputs = {1, 2, 3, 4, 5};
    for (int step = 0; step < 12; ++step) {
      std::vector<SampledRow> sampled;
      std::vector<DecodeRow> rows;
      for (int i = 0; i < 5; ++i) {
        sampled.push_back({on_cuda[i], inputs[i] % vocab, greedy, static_cast<uint64_t>(step)});
        rows.push_back({on_cpu[i], inputs[i] % vocab, true});
      }
      std::vector<int32_t> tokens;
      ASSERT_TRUE(cuda->DecodeAndSample(sampled, &tokens).ok()) << name;
      std::vector<float> logits;
      ASSERT_TRUE(cpu.Decode(rows, &logits).ok()) << name;
      ASSERT_EQ(tokens.size(), 5u);
      for (int i = 0; i < 5; ++i) {
        const float* row = logits.data() + static_cast<int64_t>(i) * vocab;
        EXPECT_EQ(tokens[i], std::max_element(row, row + vocab) - row)
            << name << " step " << step << " row " << i;
        inputs[i] = tokens[i];
      }
    }
    SamplingParams penalised = greedy;
    penalised.repetition_penalty = 1.2f;
    std::vector<int32_t> tokens;
    const absl::Status refused =
        cuda->DecodeAndSample(std::vector<SampledRow>{{on_cuda[0], 1, penalised, 0}}, &tokens);
    EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << name;
    EXPECT_NE(refused.message().find("rows[0]"), std::string::npos) << refused;
  }
  EXPECT_GT(checked, 0);
}

TEST_F(CudaBackendTest, SoftmaxRequestsBeyondTheKvCapacityAreRefused) {
  int checked = 0;
  for (const std::string& name : FixtureNames()) {
    std::unique_ptr<CudaBackend> cuda = Make(FixtureDir(name));
    if (cuda == nullptr) continue;
    auto fits = cuda->RequestBytes(100, 0, 156, 1);
    ASSERT_TRUE(fits.ok()) << name << ": " << fits.status();
    if (*fits == cuda->state_bytes_per_sequence()) continue;  // bounded: no KV
    ++checked;
    EXPECT_EQ(cuda->RequestBytes(100, 0, 157, 1).status().code(),
              absl::StatusCode::kResourceExhausted)
        << name;
    EXPECT_EQ(cuda->RequestBytes(1, 0, 1, 9).status().code(), absl::StatusCode::kResourceExhausted)
        << name << ": more sequences than slots";
  }
  EXPECT_GT(checked, 0) << "no softmax fixture ran on the CUDA backend";
}

TEST_F(CudaBackendTest, ExecutorOnCudaGeneratesTheCpuExecutorsGreedyTokens) {
  std::unique_ptr<CudaBackend> cuda = Make(kLmDir);
  ASSERT_NE(cuda, nullptr);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(kLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ExecutorOptions options;
  options.max_running_sequences = 8;
  options.prefill_token_budget = 7;  // prompts arrive in chunks next to decode rows
  auto on_cuda = Executor::Create(std::move(cuda), **tokenizer, options);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();
  auto on_cpu = Executor::Create(*models_.back(), **tokenizer, options);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  EXPECT_EQ((*on_cuda)->backend().name(), "cuda");

  const std::vector<std::string> prompts = {
      "This program is free software",
      "Open file",
      "The quick brown fox jumps over the dog",
      "a",
      "You should have received a copy of the GNU General Public License",
      "Save changes?"};
  std::vector<std::vector<int32_t>> tokens[2];
  Executor* executors[] = {on_cpu->get(), on_cuda->get()};
  for (int e = 0; e < 2; ++e) {
    std::vector<std::unique_ptr<Collector>> collectors;
    for (const std::string& prompt : prompts) {
      GenerationRequest request;
      request.prompt = prompt;
      request.max_tokens = 16;
      request.sampling.temperature = 0.0f;
      request.ignore_eos = true;
      collectors.push_back(std::make_unique<Collector>());
      ASSERT_TRUE(executors[e]->Enqueue(request, collectors.back()->Callback()).ok());
    }
    for (auto& collector : collectors) {
      const std::vector<GenerationEvent> events = collector->Wait();
      tokens[e].push_back(Tokens(events));
      EXPECT_TRUE(events.back().status.ok()) << events.back().status;
    }
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    EXPECT_EQ(tokens[1][i], tokens[0][i]) << prompts[i];
    EXPECT_EQ(tokens[1][i].size(), 16u) << prompts[i];
  }
}

// Eager passes, and with CUDA graphs (batch-1 verify passes replayed).
TEST_F(CudaBackendTest, SpeculativeExecutorOnCudaGeneratesThePlainCpuGreedyTokens) {
  for (bool graphs : {false, true}) {
    SCOPED_TRACE(graphs ? "graphs" : "eager");
    CudaBackendOptions options = Fp32Options();
    options.cuda_graphs = graphs;
    ExpectSpeculativeExecutorGivesThePlainCpuGreedyTokens(Make(kLmDir, options));
  }
}

void CudaBackendTest::ExpectSpeculativeExecutorGivesThePlainCpuGreedyTokens(
    std::unique_ptr<CudaBackend> cuda) {
  ASSERT_NE(cuda, nullptr);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer =
      Tokenizer::Load(kLmDir + "/tokenizer.model");
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  ExecutorOptions options;
  options.max_running_sequences = 8;
  auto on_cpu = Executor::Create(*models_.back(), **tokenizer, options);
  ASSERT_TRUE(on_cpu.ok()) << on_cpu.status();
  SpeculationCounter drafts;
  options.speculative = {SpeculativeMode::kNgram, 4};
  options.observer = &drafts;
  auto on_cuda = Executor::Create(std::move(cuda), **tokenizer, options);
  ASSERT_TRUE(on_cuda.ok()) << on_cuda.status();

  const std::vector<std::string> prompts = {
      "Open file. Save file. Open file. Save file. Open file.", "a",
      "This program is free software. This program is free software. This program is"};
  std::vector<std::vector<int32_t>> tokens[2];
  Executor* executors[] = {on_cpu->get(), on_cuda->get()};
  for (int e = 0; e < 2; ++e) {
    for (bool together : {true, false}) {
      std::vector<std::unique_ptr<Collector>> collectors;
      for (const std::string& prompt : prompts) {
        GenerationRequest request;
        request.prompt = prompt;
        request.max_tokens = 32;
        request.sampling.temperature = 0.0f;
        request.ignore_eos = true;
        collectors.push_back(std::make_unique<Collector>());
        ASSERT_TRUE(executors[e]->Enqueue(request, collectors.back()->Callback()).ok());
        if (!together) collectors.back()->Wait();
      }
      for (auto& collector : collectors) {
        const std::vector<GenerationEvent> events = collector->Wait();
        tokens[e].push_back(Tokens(events));
        EXPECT_TRUE(events.back().status.ok()) << events.back().status;
      }
    }
  }
  ASSERT_EQ(tokens[1].size(), tokens[0].size());
  for (size_t i = 0; i < tokens[0].size(); ++i) {
    EXPECT_EQ(tokens[1][i], tokens[0][i])
        << prompts[i % prompts.size()] << (i < prompts.size() ? " (together)" : " (alone)");
  }
  EXPECT_GT(drafts.drafted_.load(), 0);
  EXPECT_GT(drafts.accepted_.load(), 0);
  (*on_cuda)->Shutdown();
}

}  // namespace
}  // namespace abcd::cuda
