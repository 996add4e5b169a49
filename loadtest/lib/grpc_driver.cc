#include "loadtest/lib/grpc_driver.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "abcd/v1/generator.grpc.pb.h"

namespace abcd::loadtest {
namespace {

std::string StatusName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "CODE_" + std::to_string(static_cast<int>(code));
  }
}

void SetDeadline(grpc::ClientContext& context, double timeout_s) {
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
}

void Finish(RequestRecord& record, const grpc::Status& status) {
  record.end = Clock::now();
  record.ok = status.ok();
  record.status = StatusName(status.error_code());
  if (!status.ok()) record.error = status.error_message();
}

class GrpcDriver final : public Driver {
 public:
  GrpcDriver(const std::string& target, Endpoint endpoint, int channels) : endpoint_(endpoint) {
    for (int i = 0; i < std::max(1, channels); ++i) {
      grpc::ChannelArguments args;
      args.SetInt("abcd.loadtest.channel", i);  // distinct arguments: a connection per channel
      args.SetMaxReceiveMessageSize(64 << 20);
      stubs_.push_back(abcd::v1::Generator::NewStub(
          grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args)));
    }
  }

  ~GrpcDriver() override {
    CancelAll();
    std::unique_lock<std::mutex> lock(mu_);
    idle_.wait(lock, [this] { return live_.empty(); });
  }

  void Start(const RequestSpec& spec, DoneCallback done) override;

  void CancelAll() override {
    std::lock_guard<std::mutex> lock(mu_);
    for (grpc::ClientContext* context : live_) context->TryCancel();
  }

  Endpoint endpoint() const override { return endpoint_; }

  void Register(grpc::ClientContext* context) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.insert(context);
  }
  void Unregister(grpc::ClientContext* context) {
    std::lock_guard<std::mutex> lock(mu_);
    live_.erase(context);
    if (live_.empty()) idle_.notify_all();
  }

 private:
  const Endpoint endpoint_;
  std::vector<std::unique_ptr<abcd::v1::Generator::Stub>> stubs_;
  std::atomic<uint64_t> next_{0};
  std::mutex mu_;
  std::condition_variable idle_;
  std::set<grpc::ClientContext*> live_;
};

// One Generate stream; deletes itself in OnDone, the reactor's last callback.
class GenerateCall final : public grpc::ClientReadReactor<abcd::v1::GenerateResponse> {
 public:
  GenerateCall(GrpcDriver& driver, abcd::v1::Generator::Stub& stub, const RequestSpec& spec,
               DoneCallback done)
      : driver_(driver), done_(std::move(done)) {
    request_.set_model(spec.model);
    request_.set_prompt(spec.prompt);
    request_.set_max_tokens(spec.max_tokens);
    request_.mutable_sampling()->set_temperature(spec.temperature);
    request_.mutable_sampling()->set_seed(spec.seed);
    request_.set_session_id(spec.session_id);  // "new", an id, or empty
    record_.index = spec.index;
    record_.prompt_tokens = spec.prompt_tokens;
    SetDeadline(context_, spec.timeout_s);
    driver_.Register(&context_);
    stub.async()->Generate(&context_, &request_, this);
    StartRead(&response_);
    record_.send = Clock::now();
    StartCall();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;  // end of stream or error: OnDone follows
    const Clock::time_point now = Clock::now();
    if (response_.token_ids_size() > 0) {
      record_.chunk_times.push_back(now);
      record_.chunk_tokens.push_back(response_.token_ids_size());
      tokens_ += response_.token_ids_size();
    }
    record_.text += response_.text();
    // The first response of a call on a session names it (conversations.h chains turns on it).
    if (!response_.session_id().empty()) record_.session_id = response_.session_id();
    if (response_.has_usage()) {
      has_usage_ = true;
      usage_prompt_ = response_.usage().prompt_tokens();
      usage_completion_ = response_.usage().completion_tokens();
    }
    StartRead(&response_);
  }

  void OnDone(const grpc::Status& status) override {
    Finish(record_, status);
    record_.output_tokens = has_usage_ ? usage_completion_ : tokens_;
    if (has_usage_ && usage_prompt_ > 0) record_.prompt_tokens = usage_prompt_;
    driver_.Unregister(&context_);
    DoneCallback done = std::move(done_);
    RequestRecord record = std::move(record_);
    delete this;
    done(std::move(record));
  }

 private:
  GrpcDriver& driver_;
  DoneCallback done_;
  grpc::ClientContext context_;
  abcd::v1::GenerateRequest request_;
  abcd::v1::GenerateResponse response_;
  RequestRecord record_;
  int tokens_ = 0;
  bool has_usage_ = false;
  int usage_prompt_ = 0;
  int usage_completion_ = 0;
};

// One Translate call (unary): the whole translation arrives at once.
class TranslateCall {
 public:
  TranslateCall(GrpcDriver& driver, abcd::v1::Generator::Stub& stub, const RequestSpec& spec,
                DoneCallback done)
      : driver_(driver), done_(std::move(done)) {
    request_.set_model(spec.model);
    request_.set_text(spec.prompt);
    request_.set_beam_size(spec.beam_size);
    request_.set_max_tokens(spec.max_tokens);
    record_.index = spec.index;
    record_.prompt_tokens = spec.prompt_tokens;
    SetDeadline(context_, spec.timeout_s);
    driver_.Register(&context_);
    record_.send = Clock::now();
    stub.async()->Translate(&context_, &request_, &response_,
                            [this](grpc::Status status) { OnDone(status); });
  }

 private:
  void OnDone(const grpc::Status& status) {
    Finish(record_, status);
    if (status.ok()) {
      record_.text = response_.translation();
      record_.output_tokens = response_.usage().completion_tokens();
      if (response_.usage().prompt_tokens() > 0) {
        record_.prompt_tokens = response_.usage().prompt_tokens();
      }
      record_.chunk_times.push_back(record_.end);
      record_.chunk_tokens.push_back(record_.output_tokens);
    }
    driver_.Unregister(&context_);
    DoneCallback done = std::move(done_);
    RequestRecord record = std::move(record_);
    delete this;
    done(std::move(record));
  }

  GrpcDriver& driver_;
  DoneCallback done_;
  grpc::ClientContext context_;
  abcd::v1::TranslateRequest request_;
  abcd::v1::TranslateResponse response_;
  RequestRecord record_;
};

void GrpcDriver::Start(const RequestSpec& spec, DoneCallback done) {
  abcd::v1::Generator::Stub& stub = *stubs_[next_.fetch_add(1) % stubs_.size()];
  if (endpoint_ == Endpoint::kGrpcTranslate) {
    new TranslateCall(*this, stub, spec, std::move(done));
  } else {
    new GenerateCall(*this, stub, spec, std::move(done));
  }
}

}  // namespace

std::unique_ptr<Driver> MakeGrpcDriver(const std::string& target, Endpoint endpoint, int channels) {
  return std::make_unique<GrpcDriver>(target, endpoint, channels);
}

}  // namespace abcd::loadtest
