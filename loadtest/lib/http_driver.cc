#include "loadtest/lib/http_driver.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "loadtest/lib/sse_parser.h"
#include "nlohmann/json.hpp"

namespace abcd::loadtest {
namespace {

using nlohmann::json;

std::string ErrorMessage(const std::string& body) {
  const json j = json::parse(body, nullptr, false);
  if (j.is_object() && j.contains("error") && j["error"].is_object()) {
    return j["error"].value("message", body);
  }
  return body.substr(0, 200);
}

class HttpDriver final : public Driver {
 public:
  HttpDriver(std::string address, int port, Endpoint endpoint, int max_threads)
      : address_(std::move(address)),
        port_(port),
        endpoint_(endpoint),
        max_threads_(static_cast<size_t>(std::max(1, max_threads))) {}

  ~HttpDriver() override {
    CancelAll();
    {
      std::lock_guard<std::mutex> lock(mu_);
      shutdown_ = true;
    }
    cv_.notify_all();
    for (std::thread& t : threads_) t.join();
  }

  void Start(const RequestSpec& spec, DoneCallback done) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      jobs_.push_back({spec, std::move(done)});
      if (jobs_.size() > idle_ && threads_.size() < max_threads_) {
        threads_.emplace_back([this] { Work(); });
      }
    }
    cv_.notify_one();
  }

  void CancelAll() override { cancel_epoch_.fetch_add(1); }
  Endpoint endpoint() const override { return endpoint_; }

 private:
  struct Job {
    RequestSpec spec;
    DoneCallback done;
  };

  void Work() {
    httplib::Client client(address_, port_);
    client.set_keep_alive(true);
    client.set_tcp_nodelay(true);
    client.set_connection_timeout(10, 0);
    for (;;) {
      Job job;
      {
        std::unique_lock<std::mutex> lock(mu_);
        ++idle_;
        cv_.wait(lock, [this] { return !jobs_.empty() || shutdown_; });
        --idle_;
        if (jobs_.empty()) return;
        job = std::move(jobs_.front());
        jobs_.pop_front();
      }
      RequestRecord record = endpoint_ == Endpoint::kHttpTranslate ? Translate(client, job.spec)
                                                                   : Complete(client, job.spec);
      job.done(std::move(record));
    }
  }

  RequestRecord Complete(httplib::Client& client, const RequestSpec& spec);
  RequestRecord Translate(httplib::Client& client, const RequestSpec& spec);

  const std::string address_;
  const int port_;
  const Endpoint endpoint_;
  const size_t max_threads_;
  std::atomic<uint64_t> cancel_epoch_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<std::thread> threads_;
  size_t idle_ = 0;
  bool shutdown_ = false;
};

// A keep-alive connection the server closed after its last response (llama.cpp's server does
// after a stream) fails the next request on it with a read or write error before any of the
// answer arrived: such a request is sent again, once, on a new connection.
bool StaleConnection(httplib::Error error) {
  return error == httplib::Error::Read || error == httplib::Error::Write;
}

void FailTransport(RequestRecord& record, httplib::Error error, bool cancelled) {
  record.ok = false;
  record.status = cancelled ? "CANCELLED" : "TRANSPORT";
  record.error = httplib::to_string(error);
}

RequestRecord HttpDriver::Complete(httplib::Client& client, const RequestSpec& spec) {
  RequestRecord record;
  record.index = spec.index;
  record.prompt_tokens = spec.prompt_tokens;
  json body = {{"prompt", spec.prompt},
               {"max_tokens", spec.max_tokens},
               {"temperature", spec.temperature},
               {"seed", spec.seed},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (spec.ignore_eos) body["ignore_eos"] = true;
  if (!spec.model.empty()) body["model"] = spec.model;
  if (!spec.session_id.empty()) body["session_id"] = spec.session_id;

  const auto timeout = static_cast<time_t>(std::max(1.0, spec.timeout_s));
  client.set_read_timeout(timeout, 0);
  client.set_write_timeout(timeout, 0);
  const uint64_t epoch = cancel_epoch_.load();
  int status = 0;
  std::string raw;  // error bodies
  SseParser parser;
  bool done = false, stream_error = false, has_usage = false, malformed = false;
  int usage_prompt = 0, usage_completion = 0;

  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.set_header("Accept", "text/event-stream");
  req.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  req.response_handler = [&status](const httplib::Response& response) {
    status = response.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    const Clock::time_point now = Clock::now();
    if (cancel_epoch_.load() != epoch) return false;
    if (status != 200) {
      raw.append(data, size);
      return true;
    }
    for (const std::string& event : parser.Feed(absl::string_view(data, size))) {
      const CompletionChunk chunk = ParseCompletionChunk(event);
      if (chunk.done) {
        done = true;
      } else if (chunk.error) {
        stream_error = true;
        record.error = absl::StrCat(chunk.error_type, ": ", chunk.error_message);
      } else if (chunk.malformed) {
        malformed = true;
      } else {
        if (!chunk.text.empty()) {
          record.chunk_times.push_back(now);
          record.chunk_tokens.push_back(1);
          record.text += chunk.text;
        }
        if (!chunk.session_id.empty()) record.session_id = chunk.session_id;
        if (chunk.has_usage) {
          has_usage = true;
          usage_prompt = chunk.prompt_tokens;
          usage_completion = chunk.completion_tokens;
        }
      }
    }
    return true;
  };
  httplib::Response res;
  httplib::Error error = httplib::Error::Success;
  record.send = Clock::now();
  bool sent = client.send(req, res, error);
  if (!sent && status == 0 && StaleConnection(error) && cancel_epoch_.load() == epoch) {
    res = httplib::Response();
    error = httplib::Error::Success;
    sent = client.send(req, res, error);
  }
  record.end = Clock::now();
  if (!sent) {
    FailTransport(record, error, cancel_epoch_.load() != epoch);
    return record;
  }
  if (status != 200) {
    record.status = absl::StrCat("HTTP ", status);
    record.error = ErrorMessage(raw.empty() ? res.body : raw);
    return record;
  }
  if (stream_error) {
    record.status = "STREAM_ERROR";
    return record;
  }
  if (!done || !has_usage || malformed) {
    record.status = "INCOMPLETE_STREAM";
    record.error = malformed ? "an event was not a completion chunk"
                             : "the stream ended without usage and [DONE]";
    return record;
  }
  record.ok = true;
  record.output_tokens = usage_completion;
  if (usage_prompt > 0) record.prompt_tokens = usage_prompt;
  // A chunk may carry several tokens (or text held back for a stop string): put the tokens
  // the server counted but no event showed on the last chunk.
  const int shown = static_cast<int>(record.chunk_tokens.size());
  if (!record.chunk_tokens.empty() && usage_completion > shown) {
    record.chunk_tokens.back() += usage_completion - shown;
  }
  return record;
}

RequestRecord HttpDriver::Translate(httplib::Client& client, const RequestSpec& spec) {
  RequestRecord record;
  record.index = spec.index;
  record.prompt_tokens = spec.prompt_tokens;
  json body = {{"text", spec.prompt}, {"max_tokens", spec.max_tokens}};
  if (spec.beam_size > 0) body["beam_size"] = spec.beam_size;
  if (!spec.model.empty()) body["model"] = spec.model;
  const auto timeout = static_cast<time_t>(std::max(1.0, spec.timeout_s));
  client.set_read_timeout(timeout, 0);
  client.set_write_timeout(timeout, 0);
  const uint64_t epoch = cancel_epoch_.load();
  record.send = Clock::now();
  const std::string payload = body.dump(-1, ' ', false, json::error_handler_t::replace);
  httplib::Result result = client.Post("/v1/translate", payload, "application/json");
  if (!result && StaleConnection(result.error()) && cancel_epoch_.load() == epoch) {
    result = client.Post("/v1/translate", payload, "application/json");
  }
  record.end = Clock::now();
  if (!result) {
    FailTransport(record, result.error(), cancel_epoch_.load() != epoch);
    return record;
  }
  if (result->status != 200) {
    record.status = absl::StrCat("HTTP ", result->status);
    record.error = ErrorMessage(result->body);
    return record;
  }
  const json j = json::parse(result->body, nullptr, false);
  if (!j.is_object() || !j.contains("translation") || !j.contains("usage")) {
    record.status = "MALFORMED_RESPONSE";
    record.error = result->body.substr(0, 200);
    return record;
  }
  record.ok = true;
  record.text = j["translation"].is_string() ? j["translation"].get<std::string>() : "";
  record.output_tokens = j["usage"].value("completion_tokens", 0);
  if (const int p = j["usage"].value("prompt_tokens", 0); p > 0) record.prompt_tokens = p;
  record.chunk_times.push_back(record.end);
  record.chunk_tokens.push_back(record.output_tokens);
  return record;
}

}  // namespace

std::unique_ptr<Driver> MakeHttpDriver(const std::string& address, int port, Endpoint endpoint,
                                       int max_threads) {
  return std::make_unique<HttpDriver>(address, port, endpoint, max_threads);
}

}  // namespace abcd::loadtest
