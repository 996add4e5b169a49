// The probe and metrics routes, shared by HttpService and the admin listener:
//
//   GET /healthz   200 {"status":"ok"} while the process is up
//   GET /readyz    200 {"status":"ready"} when models.ready(), else 503 with "loading",
//                  "draining" or "failed" (and the backend's error)
//   GET /metrics   render_metrics(), Prometheus text format 0.0.4
//
// AdminService serves only these on a listener of its own (--admin_port), with its own
// connection cap and I/O thread, so that no crowd of API connections on the main port can
// starve Kubernetes probes or Prometheus scrapes. Other paths get 404, other methods 405;
// request bodies are refused (413) beyond a few KiB.
//
// Thread-safety: Start and Stop from one controlling thread; `models` and `render_metrics` must
// outlive the service, and render_metrics must be callable from any thread.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "server/core/served_models.h"
#include "server/http/http_server.h"

namespace abcd::http {

// The answer to a GET of a probe path, or nullopt when `path` is not one.
std::optional<ServerResponse> ProbeResponse(absl::string_view path, const ServedModels& models,
                                            const std::function<std::string()>& render_metrics);

class AdminService {
 public:
  AdminService(const ServedModels& models, std::function<std::string()> render_metrics,
               int max_connections = 64);
  ~AdminService();  // Stop()s
  AdminService(const AdminService&) = delete;
  AdminService& operator=(const AdminService&) = delete;

  // Binds host:port (0: ephemeral); UNAVAILABLE naming the address when it cannot.
  absl::Status Start(const std::string& host, int port);
  int port() const { return server_.port(); }
  void Stop() { server_.Stop(); }

 private:
  void Handle(const ServerRequest& request, Exchange& exchange) const;

  const ServedModels& models_;
  const std::function<std::string()> render_metrics_;
  HttpServer server_;
};

}  // namespace abcd::http
