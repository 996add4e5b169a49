#include "server/http/admin_service.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/http/http_errors.h"

namespace abcd::http {
namespace {

ServerResponse Json(int status, std::string body) {
  ServerResponse response;
  response.status = status;
  response.body = std::move(body);
  return response;
}

ServerResponse Readiness(const ServedModels& models) {
  if (models.ready()) return Json(200, R"({"status":"ready"})");
  if (const std::string failure = models.BackendFailure(); !failure.empty()) {
    const nlohmann::json body = {{"status", "failed"}, {"error", failure}};
    return Json(503, body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  return Json(503, models.draining() ? R"({"status":"draining"})" : R"({"status":"loading"})");
}

ServerLimits AdminLimits(int max_connections) {
  ServerLimits limits;
  limits.io_threads = 1;
  limits.max_connections = max_connections;
  limits.listen_backlog = 256;
  limits.max_body_bytes = size_t{4} << 10;
  return limits;
}

}  // namespace

std::optional<ServerResponse> ProbeResponse(absl::string_view path, const ServedModels& models,
                                            const std::function<std::string()>& render_metrics) {
  if (path == "/healthz") return Json(200, R"({"status":"ok"})");
  if (path == "/readyz") return Readiness(models);
  if (path == "/metrics") {
    ServerResponse response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (render_metrics) response.body = render_metrics();
    return response;
  }
  return std::nullopt;
}

AdminService::AdminService(const ServedModels& models, std::function<std::string()> render_metrics,
                           int max_connections)
    : models_(models),
      render_metrics_(std::move(render_metrics)),
      server_(
          AdminLimits(max_connections),
          [this](ServerRequest request, std::shared_ptr<Exchange> exchange) {
            Handle(request, *exchange);
          },
          nullptr) {}

AdminService::~AdminService() { Stop(); }

absl::Status AdminService::Start(const std::string& host, int port) {
  return server_.Start(host, port);
}

void AdminService::Handle(const ServerRequest& request, Exchange& exchange) const {
  std::optional<ServerResponse> response = ProbeResponse(request.path, models_, render_metrics_);
  if (!response.has_value()) {
    return exchange.Reply(
        Json(404, ErrorBody(absl::StrCat("no route for ", request.path.substr(0, 256),
                                         " on the admin port (/healthz, /readyz, /metrics)"),
                            "not_found_error", "")));
  }
  if (request.method != "GET") {
    ServerResponse refusal =
        Json(405, ErrorBody(absl::StrCat(request.method.substr(0, 16), " is not allowed on ",
                                         request.path, "; use GET"),
                            "invalid_request_error", ""));
    refusal.headers.emplace_back("Allow", "GET");
    return exchange.Reply(std::move(refusal));
  }
  exchange.Reply(*std::move(response));
}

}  // namespace abcd::http
