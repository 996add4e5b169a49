// The gRPC frontend (server/grpc/generator_service.h) in-process on a loopback port. Over a
// fake executor that counts what reaches it (issue 44): n and the number of chat messages are
// refused before any work; a chunked session import holds in the body budget what it has
// received, not what it declared, and one that stalls is ended at its receive deadline with its
// budget released. Also BodyBudget::TryResize. Over the HTTP tests' scripted executor
// (tests/testing/fake_executor.h): Generate streams the engine's events in order with the finish
// reason and usage last, a client's cancel reaches the executor, and the executor's refusals and
// failures are the call's status. Both suites start the service through one fixture
// (InProcessGrpcTest).
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "server/core/body_budget.h"
#include "server/core/served_models.h"
#include "server/core/session_ops.h"
#include "server/grpc/generator_service.h"
#include "tests/testing/fake_executor.h"

namespace abcd {
namespace {

// Counts the requests that reach it and refuses each (so a call never waits on it).
class CountingExecutor final : public Executor {
 public:
  absl::StatusOr<RequestId> Enqueue(GenerationRequest, EventCallback) override {
    enqueued.fetch_add(1);
    return absl::FailedPreconditionError("reached the executor");
  }
  void Cancel(RequestId) override {}
  void StartDraining() override {}
  void Shutdown() override {}
  ExecutorStats LatestStats() const override { return {}; }
  const DecodeBackend& backend() const override { std::abort(); }  // never asked for here

  std::atomic<int> enqueued{0};
};

constexpr int kMaxPromptTokens = 64;
constexpr int64_t kBudgetBytes = int64_t{8} << 20;  // bodies over 1 MiB may use 6 MiB

// The service in-process on a loopback port, serving one model whose executor the suite gives;
// shut down after each test. `Base`: ::testing::Test, or GoldenModelSuite for an executor over
// the golden model.
template <typename Base>
class InProcessGrpcTest : public Base {
 protected:
  // Serves `executor` as the model `name`, with `options`; from SetUp, under
  // ASSERT_NO_FATAL_FAILURE.
  void StartService(const std::string& name, std::unique_ptr<Executor> executor,
                    const GrpcOptions& options) {
    auto model = std::make_unique<ServedModel>();
    model->name = name;
    model->executor = std::move(executor);
    models_.Add(std::move(model));
    models_.set_ready(true);
    service_ = std::make_unique<GeneratorService>(models_, GrpcHooks{}, options);
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = abcd::v1::Generator::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  // The server and service go before the suite's own members (what `options` pointed at).
  void TearDown() override {
    stub_.reset();
    if (server_ != nullptr) server_->Shutdown(std::chrono::system_clock::now());
    server_.reset();
    service_.reset();
  }

  ServedModels models_;
  std::unique_ptr<GeneratorService> service_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<abcd::v1::Generator::Stub> stub_;
};

class GrpcServiceTest : public InProcessGrpcTest<::testing::Test> {
 protected:
  void SetUp() override {
    auto executor = std::make_unique<CountingExecutor>();
    executor_ = executor.get();
    GrpcOptions options;
    options.max_prompt_tokens = kMaxPromptTokens;
    options.max_choices = 16;
    options.sessions = &sessions_;
    options.body_budget = &budget_;
    options.chunked_import_timeout = absl::Milliseconds(400);
    ASSERT_NO_FATAL_FAILURE(StartService("fake", std::move(executor), options));
  }

  grpc::Status Generate(const abcd::v1::GenerateRequest& request) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  }

  // Waits until the budget holds something (the server has taken a chunk).
  bool BudgetHoldsBytes() {
    for (int i = 0; i < 500 && budget_.used() == 0; ++i) absl::SleepFor(absl::Milliseconds(10));
    return budget_.used() > 0;
  }

  CountingExecutor* executor_ = nullptr;
  SessionOps sessions_{nullptr, models_, kBudgetBytes};  // no store: a whole import is refused
  BodyBudget budget_{kBudgetBytes, int64_t{1} << 20};
};

TEST_F(GrpcServiceTest, NIsRefusedBeforeAnyWork) {
  abcd::v1::GenerateRequest request;
  request.set_prompt("hello");
  request.set_n(2147483647);
  const absl::Time start = absl::Now();
  const grpc::Status status = Generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(), "n must be in [1, 16], got 2147483647");
  EXPECT_EQ(executor_->enqueued.load(), 0);
  std::cout << "n = 2147483647 refused in " << absl::Now() - start << "\n";
  request.set_n(16);  // within the limit: on to the executor
  EXPECT_EQ(Generate(request).error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(executor_->enqueued.load(), 1);
}

TEST_F(GrpcServiceTest, MoreMessagesThanPromptTokensAreRefusedWhileScanning) {
  abcd::v1::GenerateRequest request;
  for (int i = 0; i < kMaxPromptTokens; ++i) request.add_messages()->set_role("user");
  // As many as the prompt could hold: on to rendering (this fake model has no template).
  grpc::Status status = Generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  request.add_messages()->set_role("user");
  status = Generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "messages has more than 64 entries"))
      << status.error_message();
  // The case: 400,000 empty messages (3.2 MB) are refused at the 65th.
  request.clear_messages();
  for (int i = 0; i < 400000; ++i) request.add_messages();
  const absl::Time start = absl::Now();
  status = Generate(request);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--max_prompt_tokens"))
      << status.error_message();
  std::cout << "400,000 messages refused in " << absl::Now() - start << "\n";
  EXPECT_EQ(executor_->enqueued.load(), 0);
}

// A chunked import that declares 6 MiB and stalls after 100 KB holds 100 KB of the budget, and
// is ended at its receive deadline with all of it released.
TEST_F(GrpcServiceTest, StalledChunkedImportHoldsWhatItSentUntilItsDeadline) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  abcd::v1::SessionInfo info;
  auto writer = stub_->ImportSessionChunks(&context, &info);
  abcd::v1::SessionChunk chunk;
  chunk.set_total_bytes(int64_t{6} << 20);
  chunk.set_data(std::string(100000, 'x'));
  ASSERT_TRUE(writer->Write(chunk));
  const absl::Time start = absl::Now();
  ASSERT_TRUE(BudgetHoldsBytes());
  EXPECT_EQ(budget_.used(), 100000);  // what it holds, not the 6 MiB it declared
  // A second upload declaring as much still fits meanwhile.
  {
    grpc::ClientContext other_context;
    abcd::v1::SessionInfo other_info;
    auto other = stub_->ImportSessionChunks(&other_context, &other_info);
    ASSERT_TRUE(other->Write(chunk));
    other->WritesDone();
    const grpc::Status short_upload = other->Finish();
    EXPECT_EQ(short_upload.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << short_upload.error_message();
    EXPECT_TRUE(absl::StrContains(short_upload.error_message(), "total_bytes"));
  }
  const grpc::Status status = writer->Finish();  // the client sends nothing more
  const absl::Duration took = absl::Now() - start;
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_TRUE(absl::StartsWith(status.error_message(), "session chunks not received within 400ms"))
      << status.error_message();
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_EQ(budget_.used(), 0);
}

// The buffer is charged as it grows: an upload whose data goes past what the budget has left is
// refused there, with everything it held released; one declaring more than a large body may
// ever hold is refused at its first chunk.
TEST_F(GrpcServiceTest, ChunkedImportIsRefusedWhenItsDataOutgrowsTheBudget) {
  BodyBudget::Charge held;
  ASSERT_TRUE(budget_.TryCharge(int64_t{3} << 20, "http", &held));
  auto upload = [&](int64_t total, int chunks) {
    grpc::ClientContext context;
    abcd::v1::SessionInfo info;
    auto writer = stub_->ImportSessionChunks(&context, &info);
    const std::string piece(1 << 20, 'x');
    for (int i = 0; i < chunks; ++i) {
      abcd::v1::SessionChunk chunk;
      if (i == 0) chunk.set_total_bytes(total);
      chunk.set_data(piece);
      if (!writer->Write(chunk)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  };
  // 1, 2, then 4 MiB of buffer: 3 + 4 MiB is over the 6 MiB a large body may use.
  grpc::Status status = upload(int64_t{6} << 20, 6);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_TRUE(absl::StrContains(status.error_message(), "--max_inflight_body_mb"));
  EXPECT_EQ(budget_.used(), int64_t{3} << 20);
  EXPECT_EQ(budget_.refused_grpc(), 1);
  status = upload(int64_t{7} << 20, 1);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << status.error_message();
  EXPECT_EQ(budget_.refused_grpc(), 2);
  held.Release();
  EXPECT_EQ(budget_.used(), 0);
}

// The service over testing::FakeExecutor (a real CPU backend over the golden dec_abc model).
class GrpcScriptedTest : public InProcessGrpcTest<testing::GoldenModelSuite> {
 protected:
  void SetUp() override {
    ASSERT_NE(model_, nullptr);
    auto executor = std::make_unique<testing::FakeExecutor>(*model_);
    lm_ = executor.get();
    GrpcOptions options;
    options.max_prompt_tokens = kMaxPromptTokens;
    options.max_choices = 4;
    ASSERT_NO_FATAL_FAILURE(StartService("lm", std::move(executor), options));
  }

  // Every response of a Generate call for `prompt`, and its status.
  grpc::Status Generate(const std::string& prompt,
                        std::vector<abcd::v1::GenerateResponse>* responses) {
    abcd::v1::GenerateRequest request;
    request.set_prompt(prompt);
    request.set_max_tokens(7);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    auto reader = stub_->Generate(&context, request);
    abcd::v1::GenerateResponse response;
    while (reader->Read(&response)) responses->push_back(response);
    return reader->Finish();
  }

  testing::FakeExecutor* lm_ = nullptr;
};

TEST_F(GrpcScriptedTest, GenerateStreamsEventsInOrderThenFinishReasonAndUsage) {
  testing::FakeExecutor::Behavior behavior;
  behavior.pieces = {"Hel", "lo", " there"};
  behavior.reason = FinishReason::kEos;
  lm_->set_behavior(behavior);
  std::vector<abcd::v1::GenerateResponse> responses;
  const grpc::Status status = Generate("hello", &responses);
  ASSERT_TRUE(status.ok()) << status.error_message();
  ASSERT_EQ(responses.size(), 4u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(responses[i].text(), behavior.pieces[i]);
    ASSERT_EQ(responses[i].token_ids_size(), 1);
    EXPECT_EQ(responses[i].token_ids(0), i);
    EXPECT_EQ(responses[i].finish_reason(), abcd::v1::FINISH_REASON_UNSPECIFIED);
    EXPECT_FALSE(responses[i].has_usage());
  }
  EXPECT_EQ(responses[3].text(), "");
  EXPECT_EQ(responses[3].finish_reason(), abcd::v1::FINISH_REASON_EOS);
  EXPECT_EQ(responses[3].usage().prompt_tokens(), 5);  // the fake counts the prompt's bytes
  EXPECT_EQ(responses[3].usage().completion_tokens(), 3);
  const std::vector<GenerationRequest> reached = lm_->requests();
  ASSERT_EQ(reached.size(), 1u);
  EXPECT_EQ(reached[0].prompt, "hello");
  EXPECT_EQ(reached[0].max_tokens, 7);
}

TEST_F(GrpcScriptedTest, ClientCancelReachesTheExecutor) {
  testing::FakeExecutor::Behavior behavior;
  behavior.pieces = {"x"};
  behavior.until_cancelled = true;
  behavior.piece_delay = absl::Milliseconds(5);
  lm_->set_behavior(behavior);
  abcd::v1::GenerateRequest request;
  request.set_prompt("hi");
  grpc::ClientContext context;
  auto reader = stub_->Generate(&context, request);
  abcd::v1::GenerateResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.text(), "x");
  context.TryCancel();
  while (reader->Read(&response)) {
  }
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
  const absl::Time give_up = absl::Now() + absl::Seconds(5);
  while (!lm_->WasCancelled(lm_->last_id()) && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(lm_->WasCancelled(lm_->last_id()));
}

TEST_F(GrpcScriptedTest, ExecutorRefusalsAndFailuresAreTheCallsStatus) {
  testing::FakeExecutor::Behavior refuse;
  refuse.enqueue_status = absl::ResourceExhaustedError("the queue is full");
  lm_->set_behavior(refuse);
  std::vector<abcd::v1::GenerateResponse> responses;
  grpc::Status status = Generate("hello", &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(status.error_message(), "the queue is full");
  EXPECT_TRUE(responses.empty());
  // A failure after some text: the text streamed, then the failure ends the call.
  testing::FakeExecutor::Behavior fail;
  fail.pieces = {"partial"};
  fail.final_status = absl::InternalError("the backend failed");
  lm_->set_behavior(fail);
  status = Generate("hello", &responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INTERNAL);
  EXPECT_TRUE(absl::StrContains(status.error_message(), "the backend failed"))
      << status.error_message();
  ASSERT_EQ(responses.size(), 1u);
  EXPECT_EQ(responses[0].text(), "partial");
}

TEST(BodyBudgetTest, TryResizeChargesOnlyTheDifference) {
  BodyBudget budget(4000, 100);  // bodies over 100 bytes may use 3000
  BodyBudget::Charge charge;
  ASSERT_TRUE(budget.TryResize(80, "grpc", &charge));
  EXPECT_EQ(budget.used(), 80);
  ASSERT_TRUE(budget.TryResize(2000, "grpc", &charge));
  EXPECT_EQ(budget.used(), 2000);
  BodyBudget::Charge other;
  ASSERT_TRUE(budget.TryCharge(900, "http", &other));
  // 2000 -> 2200 would take 3100 in all, over 3000: refused, and the charge keeps its 2000.
  EXPECT_FALSE(budget.TryResize(2200, "grpc", &charge));
  EXPECT_EQ(charge.bytes(), 2000);
  EXPECT_EQ(budget.used(), 2900);
  EXPECT_EQ(budget.refused_grpc(), 1);
  ASSERT_TRUE(budget.TryResize(500, "grpc", &charge));  // shrinking always succeeds
  EXPECT_EQ(budget.used(), 1400);
  charge.Release();
  other.Release();
  EXPECT_EQ(budget.used(), 0);
}

}  // namespace
}  // namespace abcd
