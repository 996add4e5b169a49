#include "server/http/http_service.h"

#include <pthread.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/http/event_channel.h"
#include "server/http/http_errors.h"
#include "server/http/request_parser.h"

namespace abcd::http {
namespace {

using nlohmann::json;

// How often a waiting handler looks at Stop() and at its client's socket.
constexpr absl::Duration kPollInterval = absl::Milliseconds(50);
constexpr char kJson[] = "application/json";
constexpr char kMetricsContentType[] = "text/plain; version=0.0.4; charset=utf-8";

std::string Dump(const json& value) {
  // Model output may hold invalid UTF-8; replace it instead of throwing.
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::string_view KindOfPath(absl::string_view path) {
  if (path == "/v1/completions") return "completions";
  if (path == "/v1/translate") return "translate";
  if (path == "/v1/models" || absl::StartsWith(path, "/v1/models/")) return "list_models";
  return "";
}

// OpenAI reports EOS as "stop"; abcd's own reason goes in abcd_finish_reason.
absl::string_view OpenAiFinishReason(FinishReason reason) {
  return reason == FinishReason::kLength ? "length" : "stop";
}

json Usage(int prompt_tokens, int completion_tokens) {
  return {{"prompt_tokens", prompt_tokens},
          {"completion_tokens", completion_tokens},
          {"total_tokens", prompt_tokens + completion_tokens}};
}

// Moves the longest prefix of `pending` that does not end inside a UTF-8 character out of it,
// so streamed deltas never split a character (json would otherwise replace the halves).
std::string TakeCompleteUtf8(std::string& pending) {
  size_t start = pending.size();
  int continuation = 0;
  while (start > 0 && continuation < 4) {
    const auto byte = static_cast<unsigned char>(pending[start - 1]);
    if ((byte & 0xC0) != 0x80) break;
    --start;
    ++continuation;
  }
  size_t keep_from = pending.size();
  if (start > 0) {
    const auto lead = static_cast<unsigned char>(pending[start - 1]);
    const size_t length = (lead & 0x80) == 0      ? 1
                          : (lead & 0xE0) == 0xC0 ? 2
                          : (lead & 0xF0) == 0xE0 ? 3
                          : (lead & 0xF8) == 0xF0 ? 4
                                                  : 1;
    if (start - 1 + length > pending.size()) keep_from = start - 1;
  }
  std::string complete = pending.substr(0, keep_from);
  pending.erase(0, keep_from);
  return complete;
}

// Connection threads: `min_threads` start up front and more are added, up to `max_threads`,
// whenever every thread is busy (a streaming response holds its thread for its whole length,
// and probes must not queue behind streams). Threads are kept until shutdown.
class ElasticThreadPool : public httplib::TaskQueue {
 public:
  ElasticThreadPool(int min_threads, int max_threads)
      : max_threads_(static_cast<size_t>(std::max(1, std::max(min_threads, max_threads)))) {
    std::lock_guard<std::mutex> lock(mu_);
    for (int i = 0; i < min_threads; ++i) threads_.emplace_back([this] { Work(); });
  }

  void enqueue(std::function<void()> fn) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back(std::move(fn));
      if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { Work(); });
      }
    }
    cv_.notify_one();
  }

  void shutdown() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    // No thread is added after shutdown_ (only enqueue adds, and the server has stopped
    // enqueueing by now), so joining outside the lock is safe.
    for (std::thread& t : threads_) t.join();
  }

 private:
  void Work() {
    for (;;) {
      std::function<void()> fn;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
        --idle_;
        if (jobs_.empty()) return;  // shutdown_
        fn = std::move(jobs_.front());
        jobs_.pop_front();
      }
      fn();
    }
  }

  const size_t max_threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

}  // namespace

class HttpService::Impl {
 public:
  Impl(ServedModels& models, HttpHooks hooks, HttpOptions options)
      : models_(models), hooks_(std::move(hooks)), options_(options) {
    limits_.max_tokens_limit = options_.max_tokens_limit;
    limits_.max_batch_texts = options_.max_batch_texts;
    std::random_device random;
    id_seed_ = (uint64_t{random()} << 32) ^ random();
    created_ = absl::ToUnixSeconds(absl::Now());
    Configure();
  }

  httplib::Server& server() { return server_; }
  void set_stopping() { stopping_.store(true); }

 private:
  using Request = httplib::Request;
  using Response = httplib::Response;

  // One streaming completion, shared by the content provider and its releaser; only the HTTP
  // thread serving the request touches it.
  struct Stream {
    Executor* executor = nullptr;
    RequestId id = 0;
    std::shared_ptr<EventChannel> channel;
    std::string response_id;
    std::string model;
    int64_t created = 0;
    std::string pending;  // text held back until it completes a UTF-8 character
    bool closed = false;  // the outcome is settled (and counted)
  };

  void Configure();
  void Route(const std::string& pattern, const std::string& method, absl::string_view kind,
             httplib::Server::Handler handler);

  void Count(absl::string_view kind, absl::string_view label) {
    if (hooks_.count_request) hooks_.count_request(kind, label);
  }
  void Fail(Response& res, absl::string_view kind, const absl::Status& status) {
    const ErrorMapping mapping = MapStatusCode(status.code());
    res.status = mapping.http_status;
    res.set_content(ErrorBody(status), kJson);
    if (!kind.empty()) Count(kind, mapping.label);
  }
  void Reply(Response& res, absl::string_view kind, const json& body) {
    res.status = 200;
    res.set_content(Dump(body), kJson);
    if (!kind.empty()) Count(kind, "ok");
  }

  std::string NewId(absl::string_view prefix) {
    const uint64_t n = next_id_.fetch_add(1) + 1;
    return absl::StrCat(prefix,
                        absl::Hex(id_seed_ ^ (n * 0x9E3779B97F4A7C15ull), absl::kZeroPad16));
  }

  absl::StatusOr<const ServedModel*> ResolveModel(const std::string& name, ModelKind kind) const;

  // Waits for the request's last event; the text is every event's text joined.
  struct Outcome {
    std::string text;
    GenerationEvent last;
  };
  absl::StatusOr<Outcome> Collect(EventChannel& channel, Executor& executor, RequestId id);

  void Completions(const Request& req, Response& res);
  void StartStream(Response& res, std::shared_ptr<Stream> stream);
  bool StreamStep(Stream& stream, httplib::DataSink& sink);
  void StreamReleased(Stream& stream);
  json StreamChunk(const Stream& stream, const std::string& text) const;
  void Translate(const Request& req, Response& res);
  json ModelObject(const ServedModel& model) const;

  ServedModels& models_;
  const HttpHooks hooks_;
  const HttpOptions options_;
  ParseLimits limits_;
  httplib::Server server_;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_id_{0};
  uint64_t id_seed_ = 0;
  int64_t created_ = 0;
};

void HttpService::Impl::Route(const std::string& pattern, const std::string& method,
                              absl::string_view kind, httplib::Server::Handler handler) {
  // The route's own method, and 405 with Allow for the others (httplib answers 404 for them).
  httplib::Server::Handler not_allowed = [this, method, kind](const Request& req, Response& res) {
    res.set_header("Allow", method);
    res.status = 405;
    res.set_content(
        ErrorBody(absl::StrCat(req.method, " is not allowed on ", req.path, "; use ", method),
                  "invalid_request_error", ""),
        kJson);
    if (!kind.empty()) Count(kind, "invalid_argument");
  };
  auto pick = [&](const std::string& m) { return m == method ? handler : not_allowed; };
  server_.Get(pattern, pick("GET"));
  server_.Post(pattern, pick("POST"));
  server_.Put(pattern, pick("PUT"));
  server_.Patch(pattern, pick("PATCH"));
  server_.Delete(pattern, pick("DELETE"));
  server_.Options(pattern, pick("OPTIONS"));
}

void HttpService::Impl::Configure() {
  const int min_threads = std::max(1, options_.thread_count);
  const int max_threads = std::max(min_threads, options_.max_threads);
  server_.new_task_queue = [min_threads, max_threads] {
    return new ElasticThreadPool(min_threads, max_threads);
  };
  server_.set_payload_max_length(options_.max_body_bytes);
  server_.set_tcp_nodelay(true);

  Route("/v1/completions", "POST", "completions",
        [this](const Request& req, Response& res) { Completions(req, res); });
  Route("/v1/translate", "POST", "translate",
        [this](const Request& req, Response& res) { Translate(req, res); });
  Route("/v1/models", "GET", "list_models", [this](const Request&, Response& res) {
    json data = json::array();
    for (const ServedModel* model : models_.All()) data.push_back(ModelObject(*model));
    Reply(res, "list_models", {{"object", "list"}, {"data", std::move(data)}});
  });
  Route(R"(/v1/models/([^/]+))", "GET", "list_models", [this](const Request& req, Response& res) {
    const std::string name = req.matches[1];
    const ServedModel* model = models_.FindByName(name);
    if (model == nullptr) {
      return Fail(res, "list_models",
                  absl::NotFoundError(absl::StrCat("model '", name, "' is not served")));
    }
    Reply(res, "list_models", ModelObject(*model));
  });
  Route("/healthz", "GET", "",
        [](const Request&, Response& res) { res.set_content(R"({"status":"ok"})", kJson); });
  Route("/readyz", "GET", "", [this](const Request&, Response& res) {
    if (models_.ready()) {
      res.set_content(R"({"status":"ready"})", kJson);
      return;
    }
    res.status = 503;
    if (const std::string failure = models_.BackendFailure(); !failure.empty()) {
      res.set_content(Dump(json{{"status", "failed"}, {"error", failure}}), kJson);
      return;
    }
    res.set_content(models_.draining() ? R"({"status":"draining"})" : R"({"status":"loading"})",
                    kJson);
  });
  Route("/metrics", "GET", "", [this](const Request&, Response& res) {
    res.set_content(hooks_.render_metrics ? hooks_.render_metrics() : std::string(),
                    kMetricsContentType);
  });

  // httplib enforces max_body_bytes only on Content-Length bodies: a chunked body would be read
  // whole, however large. Refuse chunked bodies (clients send JSON with a length) before
  // anything is read, and close the connection since the body stays unread.
  httplib::Server::HandlerWithResponse pre_routing = [this](const Request& req, Response& res) {
    if (!req.has_header("Transfer-Encoding")) return httplib::Server::HandlerResponse::Unhandled;
    res.status = 411;
    res.set_header("Connection", "close");
    res.set_content(ErrorBody("request bodies must have a Content-Length (chunked transfer "
                              "encoding is not accepted)",
                              "invalid_request_error", ""),
                    kJson);
    if (absl::string_view kind = KindOfPath(req.path); !kind.empty()) {
      Count(kind, "invalid_argument");
    }
    return httplib::Server::HandlerResponse::Handled;
  };
  server_.set_pre_routing_handler(std::move(pre_routing));

  // Errors httplib raises itself (no route, body too large, malformed request) get JSON
  // bodies too; our handlers' errors already have one.
  httplib::Server::HandlerWithResponse on_error = [this](const Request& req, Response& res) {
    if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
    std::string message;
    absl::string_view type = "invalid_request_error";
    switch (res.status) {
      case 404:
        message = absl::StrCat("no route for ", req.method, " ", req.path);
        type = "not_found_error";
        break;
      case 413:
        message =
            absl::StrCat("request body exceeds the limit of ", options_.max_body_bytes, " bytes");
        if (absl::string_view kind = KindOfPath(req.path); !kind.empty()) {
          Count(kind, "invalid_argument");
        }
        break;
      case 400:
        message = "malformed HTTP request";
        break;
      default:
        message = absl::StrCat("HTTP ", res.status);
        if (res.status >= 500) type = "server_error";
        break;
    }
    res.set_content(ErrorBody(message, type, ""), kJson);
    return httplib::Server::HandlerResponse::Handled;
  };
  server_.set_error_handler(std::move(on_error));
  server_.set_exception_handler([](const Request&, Response& res, std::exception_ptr) {
    res.status = 500;
    res.set_content(ErrorBody("internal error", "server_error", ""), kJson);
  });
}

absl::StatusOr<const ServedModel*> HttpService::Impl::ResolveModel(const std::string& name,
                                                                   ModelKind kind) const {
  const ServedModel* model = nullptr;
  if (name.empty()) {
    model = models_.Find("", kind);
    if (model == nullptr) {
      return absl::NotFoundError(
          absl::StrCat("model is required: no ", ModelKindName(kind), " model is served"));
    }
  } else {
    model = models_.FindByName(name);
    if (model == nullptr) {
      std::vector<std::string> names;
      for (const ServedModel* m : models_.All()) {
        if (m->kind == kind) names.push_back(m->name);
      }
      return absl::InvalidArgumentError(absl::StrCat("model '", name, "' is not served (",
                                                     ModelKindName(kind),
                                                     " models: ", absl::StrJoin(names, ", "), ")"));
    }
    if (model->kind != kind) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", name, "' is a ", ModelKindName(model->kind), " model; use ",
          model->kind == ModelKind::kTranslation ? "/v1/translate" : "/v1/completions"));
    }
  }
  if (model->executor == nullptr) {
    return absl::UnavailableError(absl::StrCat("model '", model->name, "' is not loaded"));
  }
  if (models_.draining()) {
    return absl::UnavailableError("the server is draining; retry on another replica");
  }
  return model;
}

absl::StatusOr<HttpService::Impl::Outcome> HttpService::Impl::Collect(EventChannel& channel,
                                                                      Executor& executor,
                                                                      RequestId id) {
  Outcome outcome;
  std::vector<GenerationEvent> events;
  for (;;) {
    if (stopping_.load()) {
      executor.Cancel(id);
      return absl::UnavailableError("the server is shutting down");
    }
    events.clear();
    if (!channel.Take(&events, kPollInterval)) continue;
    for (GenerationEvent& event : events) {
      outcome.text += event.text;
      if (event.finished) {
        if (!event.status.ok()) return event.status;
        outcome.last = std::move(event);
        return outcome;
      }
    }
  }
}

void HttpService::Impl::Completions(const Request& req, Response& res) {
  constexpr absl::string_view kKind = "completions";
  absl::StatusOr<CompletionRequest> request = ParseCompletionRequest(req.body, limits_);
  if (!request.ok()) return Fail(res, kKind, request.status());
  absl::StatusOr<const ServedModel*> model =
      ResolveModel(request->model, ModelKind::kLanguageModel);
  if (!model.ok()) return Fail(res, kKind, model.status());
  Executor& executor = *(*model)->executor;

  auto channel = std::make_shared<EventChannel>();
  absl::StatusOr<RequestId> id =
      executor.Enqueue(std::move(request->generation), EventChannel::Callback(channel));
  if (!id.ok()) return Fail(res, kKind, id.status());

  if (request->stream) {
    auto stream = std::make_shared<Stream>();
    stream->executor = &executor;
    stream->id = *id;
    stream->channel = std::move(channel);
    stream->response_id = NewId("cmpl-");
    stream->model = (*model)->name;
    stream->created = absl::ToUnixSeconds(absl::Now());
    return StartStream(res, std::move(stream));
  }

  absl::StatusOr<Outcome> outcome = Collect(*channel, executor, *id);
  if (!outcome.ok()) return Fail(res, kKind, outcome.status());
  const GenerationEvent& last = outcome->last;
  json choice = {{"index", 0},
                 {"text", std::move(outcome->text)},
                 {"finish_reason", OpenAiFinishReason(last.finish_reason)},
                 {"abcd_finish_reason", FinishReasonName(last.finish_reason)},
                 {"logprobs", nullptr}};
  Reply(res, kKind,
        {{"id", NewId("cmpl-")},
         {"object", "text_completion"},
         {"created", absl::ToUnixSeconds(absl::Now())},
         {"model", (*model)->name},
         {"choices", json::array({std::move(choice)})},
         {"usage", Usage(last.prompt_tokens, last.completion_tokens)}});
}

json HttpService::Impl::StreamChunk(const Stream& stream, const std::string& text) const {
  return {
      {"id", stream.response_id},
      {"object", "text_completion"},
      {"created", stream.created},
      {"model", stream.model},
      {"choices",
       json::array(
           {{{"index", 0}, {"text", text}, {"finish_reason", nullptr}, {"logprobs", nullptr}}})}};
}

void HttpService::Impl::StartStream(Response& res, std::shared_ptr<Stream> stream) {
  res.status = 200;
  res.set_header("Cache-Control", "no-cache");
  res.set_header("X-Accel-Buffering", "no");
  res.set_chunked_content_provider(
      "text/event-stream",
      [this, stream](size_t, httplib::DataSink& sink) { return StreamStep(*stream, sink); },
      [this, stream](bool) { StreamReleased(*stream); });
}

bool HttpService::Impl::StreamStep(Stream& stream, httplib::DataSink& sink) {
  constexpr absl::string_view kKind = "completions";
  auto send_raw = [&sink](const std::string& payload) {
    const std::string event = absl::StrCat("data: ", payload, "\n\n");
    return sink.write(event.data(), event.size());
  };
  auto send = [&send_raw](const json& payload) { return send_raw(Dump(payload)); };
  auto finish = [&](absl::string_view label) {
    static constexpr absl::string_view kDone = "data: [DONE]\n\n";
    stream.closed = true;
    Count(kKind, label);
    if (!sink.write(kDone.data(), kDone.size())) return false;
    sink.done();
    return true;
  };
  auto abandon = [&]() {  // the client is gone: free the sequence now
    stream.closed = true;
    stream.executor->Cancel(stream.id);
    Count(kKind, "cancelled");
    return false;
  };

  if (stream.closed) {
    sink.done();
    return true;
  }
  if (!sink.is_writable()) return abandon();
  if (stopping_.load()) {
    stream.executor->Cancel(stream.id);
    const absl::Status status = absl::UnavailableError("the server is shutting down");
    send_raw(ErrorBody(status));
    return finish(MapStatusCode(status.code()).label);
  }
  std::vector<GenerationEvent> events;
  if (!stream.channel->Take(&events, kPollInterval)) return true;
  for (GenerationEvent& event : events) {
    stream.pending += event.text;
    if (!event.finished) {
      const std::string text = TakeCompleteUtf8(stream.pending);
      if (!text.empty() && !send(StreamChunk(stream, text))) return abandon();
      continue;
    }
    if (!event.status.ok()) {
      if (!stream.pending.empty() && !send(StreamChunk(stream, stream.pending))) return abandon();
      if (!send_raw(ErrorBody(event.status))) return abandon();
      return finish(MapStatusCode(event.status.code()).label);
    }
    json last = StreamChunk(stream, stream.pending);
    last["choices"][0]["finish_reason"] = OpenAiFinishReason(event.finish_reason);
    last["choices"][0]["abcd_finish_reason"] = FinishReasonName(event.finish_reason);
    last["usage"] = Usage(event.prompt_tokens, event.completion_tokens);
    stream.pending.clear();
    if (!send(last)) return abandon();
    return finish("ok");
  }
  return true;
}

void HttpService::Impl::StreamReleased(Stream& stream) {
  // The response is gone before the stream ended (write failure, server stop): cancel.
  if (!stream.closed) {
    stream.closed = true;
    stream.executor->Cancel(stream.id);
    Count("completions", "cancelled");
  }
}

void HttpService::Impl::Translate(const Request& req, Response& res) {
  constexpr absl::string_view kKind = "translate";
  absl::StatusOr<TranslateRequest> request = ParseTranslateRequest(req.body, limits_);
  if (!request.ok()) return Fail(res, kKind, request.status());
  absl::StatusOr<const ServedModel*> model = ResolveModel(request->model, ModelKind::kTranslation);
  if (!model.ok()) return Fail(res, kKind, model.status());
  Executor& executor = *(*model)->executor;

  // Every text is queued before any is awaited, so the batch decodes together.
  const size_t n = request->texts.size();
  std::vector<std::shared_ptr<EventChannel>> channels;
  std::vector<RequestId> ids;
  auto cancel_from = [&](size_t first) {
    for (size_t i = first; i < ids.size(); ++i) executor.Cancel(ids[i]);
  };
  for (size_t i = 0; i < n; ++i) {
    GenerationRequest generation;
    generation.source = std::move(request->texts[i]);
    generation.max_tokens = request->max_tokens;
    generation.beam_size = request->beam_size;
    generation.sampling.temperature = 0.0f;  // greedy / beam search, deterministic
    channels.push_back(std::make_shared<EventChannel>());
    absl::StatusOr<RequestId> id =
        executor.Enqueue(std::move(generation), EventChannel::Callback(channels.back()));
    if (!id.ok()) {
      cancel_from(0);
      absl::Status status = id.status();
      if (request->batch) {
        status = absl::Status(status.code(), absl::StrCat("texts[", i, "]: ", status.message()));
      }
      return Fail(res, kKind, status);
    }
    ids.push_back(*id);
  }

  json translations = json::array();
  int prompt_tokens = 0;
  int completion_tokens = 0;
  for (size_t i = 0; i < n; ++i) {
    absl::StatusOr<Outcome> outcome = Collect(*channels[i], executor, ids[i]);
    if (!outcome.ok()) {
      cancel_from(i + 1);
      return Fail(res, kKind, outcome.status());
    }
    translations.push_back(std::move(outcome->text));
    prompt_tokens += outcome->last.prompt_tokens;
    completion_tokens += outcome->last.completion_tokens;
  }
  json body = {{"model", (*model)->name}, {"usage", Usage(prompt_tokens, completion_tokens)}};
  if (request->batch) {
    body["translations"] = std::move(translations);
  } else {
    body["translation"] = std::move(translations[0]);
  }
  Reply(res, kKind, body);
}

json HttpService::Impl::ModelObject(const ServedModel& model) const {
  return {{"id", model.name},
          {"object", "model"},
          {"created", created_},
          {"owned_by", "abcd"},
          {"kind", ModelKindName(model.kind)},
          {"state_bytes_per_sequence", model.state_bytes_per_sequence}};
}

HttpService::HttpService(ServedModels& models, HttpHooks hooks, HttpOptions options)
    : impl_(std::make_unique<Impl>(models, std::move(hooks), options)) {}

HttpService::~HttpService() { Stop(); }

absl::Status HttpService::Start(const std::string& host, int port) {
  if (started_ || stopped_) {
    return absl::FailedPreconditionError("HttpService::Start may be called once");
  }
  httplib::Server& server = impl_->server();
  int bound = -1;
  if (port == 0) {
    bound = server.bind_to_any_port(host);
  } else if (server.bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", host, ":", port));
  }
  listener_ = std::thread([&server] {
    // Writing to a client that has gone raises SIGPIPE (httplib sends without MSG_NOSIGNAL);
    // block it on this thread, whose mask every connection thread inherits, so the write
    // fails with EPIPE instead of killing the process.
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe, nullptr);
    server.listen_after_bind();
  });
  // Stop() is a no-op for httplib until the accept loop runs; wait for it.
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!server.is_running() && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(1));
  started_ = true;
  port_ = bound;
  return absl::OkStatus();
}

void HttpService::Stop() {
  if (!started_ || stopped_) return;
  stopped_ = true;
  impl_->set_stopping();
  impl_->server().stop();
  listener_.join();
}

}  // namespace abcd::http
