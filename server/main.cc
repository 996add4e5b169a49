// abcd-server: serves the configured models over gRPC (abcd.v1.Generator, health, reflection)
// and HTTP/JSON, with Prometheus metrics. SIGTERM/SIGINT drain: health turns NOT_SERVING,
// /readyz 503, new requests UNAVAILABLE, in-flight requests get --drain_grace_seconds to finish,
// then the process exits 0.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/resource_quota.h>
#include <malloc.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "engine/backend/backend_factory.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/engine_flags.h"
#include "engine/scheduler/speculation.h"
#include "server/chat/chat_template.h"
#include "server/core/body_budget.h"
#include "server/core/log.h"
#include "server/core/model_tokenizer.h"
#include "server/core/served_models.h"
#include "server/core/server_config.h"
#include "server/core/session_ops.h"
#include "server/grpc/generator_service.h"
#include "server/http/admin_service.h"
#include "server/http/http_service.h"
#include "server/metrics/server_metrics.h"
#include "server/metrics/transport_metrics.h"
#include "server/sessions/session_manager.h"
#include "server/sessions/session_store.h"

namespace abcd {
namespace {

absl::StatusOr<std::unique_ptr<ServedModel>> LoadServedModel(const std::string& dir,
                                                             const ServerConfig& config,
                                                             ServerMetrics& metrics) {
  auto served = std::make_unique<ServedModel>();
  served->name = std::filesystem::path(dir).lexically_normal().filename().string();
  if (served->name.empty()) {
    served->name = std::filesystem::path(dir).lexically_normal().parent_path().filename().string();
  }
  ModelLoadOptions load;
  ABCD_ASSIGN_OR_RETURN(load.kv_cache_format,
                        ParseKvFormat(config.kv_cache_format, "--kv_cache_format"));
  if (!config.weight_format.empty()) {
    ABCD_ASSIGN_OR_RETURN(load.weight_format, ParseWeightFormat(config.weight_format));
  }
  // The tokenizer first: a directory without a usable tokenizer.json or tokenizer.model fails
  // before the weights are read and packed.
  ABCD_ASSIGN_OR_RETURN(const ModelConfig model_config, LoadModelDirectoryConfig(dir));
  ABCD_ASSIGN_OR_RETURN(served->tokenizer, LoadModelTokenizer(dir, model_config));
  ABCD_ASSIGN_OR_RETURN(served->model, Model::Load(dir, load));
  served->kind = served->model->config().is_encoder_decoder() ? ModelKind::kTranslation
                                                              : ModelKind::kLanguageModel;
  if (served->kind == ModelKind::kLanguageModel) {  // server/chat/chat_template.h
    auto named = config.chat_templates.find(served->name);
    if (named == config.chat_templates.end()) named = config.chat_templates.find("");
    auto format = config.tool_call_formats.find(served->name);
    if (format == config.tool_call_formats.end()) format = config.tool_call_formats.find("");
    std::optional<chat::ToolCallFormat> tool_call_format;
    if (format != config.tool_call_formats.end()) {
      ABCD_ASSIGN_OR_RETURN(tool_call_format,
                            chat::ParseToolCallFormat(format->second, "--tool_call_format"));
    }
    ABCD_ASSIGN_OR_RETURN(
        served->chat_template,
        chat::ChatTemplate::Load(dir, named == config.chat_templates.end() ? "" : named->second,
                                 tool_call_format));
  }
  BackendOptions backend_options;
  ABCD_ASSIGN_OR_RETURN(const DeviceSelection device, ParseDevice(config.device, "--device"));
  backend_options.device = device.choice;
  backend_options.cuda_device = device.cuda_device;
  backend_options.state_budget_bytes = config.state_budget_mb << 20;
  backend_options.cpu_threads = config.threads;
  ABCD_ASSIGN_OR_RETURN(backend_options.cpu_products,
                        ResolveCpuCompute(config.cpu_compute, served->model->weight_format(),
                                          "--cpu_compute", served->name, "--weight_format"));
  backend_options.max_sequences = config.max_running_sequences;
  backend_options.max_prefill_tokens = config.prefill_token_budget;
  backend_options.max_context =
      static_cast<int64_t>(config.max_prompt_tokens) + config.max_tokens_limit;
  backend_options.device_weights = config.device_weights;
  ABCD_ASSIGN_OR_RETURN(CreatedBackend created,
                        CreateDecodeBackend(*served->model, backend_options));
  if (!created.fallback_reason.empty()) {
    LogEvent("cuda_unavailable", {{"name", served->name}, {"reason", created.fallback_reason}});
  }
  const DecodeBackend& backend = *created.backend;
  served->state_bytes_per_sequence = backend.state_bytes_per_sequence();
  ExecutorOptions options;
  options.state_budget_bytes = config.state_budget_mb << 20;
  options.max_waiting_requests = config.max_waiting_requests;
  options.max_running_sequences = config.max_running_sequences;
  options.prefill_token_budget = config.prefill_token_budget;
  options.warmup_tokens =
      config.warmup_tokens < 0 ? config.prefill_token_budget : config.warmup_tokens;
  ABCD_ASSIGN_OR_RETURN(options.prefill_policy,
                        ParsePrefillPolicy(config.prefill_policy, "--prefill_policy"));
  options.iteration_budget_ms = config.iteration_budget_ms;
  options.prefill_step_share = config.prefill_step_share;
  options.prefill_deadline_ms = config.prefill_deadline_ms;
  options.max_prompt_tokens = config.max_prompt_tokens;
  options.max_source_tokens = config.max_source_tokens;
  options.max_batch_source_tokens = config.max_batch_source_tokens;
  options.encode_token_budget = config.encode_token_budget;
  options.max_new_tokens = config.max_tokens_limit;
  options.max_choices = config.max_choices;
  options.model_name = served->name;  // written into the model's session blobs
  if (served->kind == ModelKind::kLanguageModel) {
    options.prefix_cache_bytes = config.prefix_cache_mb << 20;
    ABCD_ASSIGN_OR_RETURN(options.speculative,
                          ParseSpeculativeFlag(config.speculative, "--speculative"));
  }
  options.observer = metrics.AddModel(served->name, served->state_bytes_per_sequence);
  for (const auto& [tensor, count] : served->model->non_finite_tensors()) {
    LogEvent(
        "model_warning",
        {{"name", served->name}, {"tensor", tensor}, {"non_finite_values", absl::StrCat(count)}});
  }
  LogEvent("model_loaded",
           {{"name", served->name},
            {"kind", std::string(ModelKindName(served->kind))},
            {"dir", dir},
            {"backend", backend.name()},
            {"device", backend.device_description()},
            {"state_bytes_per_sequence", absl::StrCat(served->state_bytes_per_sequence)},
            {"state_capacity_bytes", absl::StrCat(backend.capacity_bytes())},
            {"weight_bytes", absl::StrCat(backend.weight_bytes())},
            {"prefill_policy", config.prefill_policy}});
  ABCD_ASSIGN_OR_RETURN(served->executor,
                        Executor::Create(std::move(created.backend), *served->tokenizer, options));
  return served;
}

bool AllIdle(const ServedModels& models) {
  for (const ServedModel* m : models.All()) {
    const ExecutorStats stats = m->executor->LatestStats();
    if (stats.running_sequences > 0 || stats.waiting_requests > 0) return false;
  }
  return true;
}

// Process-wide settings before any thread starts. Signals are taken synchronously (sigwait in
// WaitForStop); every thread started later inherits the mask. SIGPIPE is ignored: a closed
// client socket is an error return, not a crash. Returns the blocked stop signals.
sigset_t SetUpProcess() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);
  // Blocks of 1 MiB and more (request messages, a refused 4 MB prompt) are mapped apart and
  // unmapped when freed, instead of staying in a thread's malloc arena: a burst of large
  // requests does not leave the process that much larger. (glibc's default threshold grows
  // to the largest block freed, up to 32 MiB.)
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  return signals;
}

// Every HTTP connection is a descriptor: take the hard limit so --http_max_connections fits.
void RaiseDescriptorLimit() {
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
    files.rlim_cur = files.rlim_max;
    setrlimit(RLIMIT_NOFILE, &files);
  }
}

// Loads every --models directory into `models` and checks that each --chat_template and
// --tool_call_format names a language model among them (and each format is known).
absl::Status LoadModels(const ServerConfig& config, ServerMetrics& metrics, ServedModels& models) {
  for (const std::string& dir : config.models) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> served,
                          LoadServedModel(dir, config, metrics));
    models.Add(std::move(served));
  }
  for (const auto& [name, file] : config.chat_templates) {
    const ServedModel* named = models.FindByName(name);
    if (!name.empty() && (named == nullptr || named->kind != ModelKind::kLanguageModel)) {
      return absl::InvalidArgumentError(absl::StrCat("--chat_template ", name, "=", file,
                                                     ": no language model named '", name, "'"));
    }
  }
  for (const auto& [name, format] : config.tool_call_formats) {
    ABCD_RETURN_IF_ERROR(chat::ParseToolCallFormat(format, "--tool_call_format").status());
    const ServedModel* named = models.FindByName(name);
    if (!name.empty() && (named == nullptr || named->kind != ModelKind::kLanguageModel)) {
      return absl::InvalidArgumentError(absl::StrCat("--tool_call_format ", name, "=", format,
                                                     ": no language model named '", name, "'"));
    }
  }
  return absl::OkStatus();
}

// What the frontends need from the rest of the process; all outlive the Frontends.
struct FrontendDeps {
  ServedModels& models;
  ServerMetrics& metrics;
  const SessionOps* sessions;
  BodyBudget* body_budget;
  TransportMetrics* transport_metrics;
};

// The listening frontends, declared in start order (destroyed in reverse).
struct Frontends {
  std::unique_ptr<GeneratorService> generator;
  std::unique_ptr<grpc::ResourceQuota> grpc_quota;
  std::unique_ptr<grpc::Server> grpc_server;
  int grpc_port = 0;
  std::unique_ptr<http::HttpService> http;
  std::unique_ptr<http::AdminService> admin;  // null with --admin_port -1
};

// The gRPC server (abcd.v1.Generator, health, reflection) on --grpc_port.
absl::Status StartGrpc(const ServerConfig& config, const FrontendDeps& deps, Frontends& f) {
  GrpcOptions grpc_options;
  grpc_options.max_prompt_tokens = config.max_prompt_tokens;
  grpc_options.max_choices = config.max_choices;
  grpc_options.sessions = deps.sessions;
  grpc_options.body_budget = deps.body_budget;
  grpc_options.chunked_import_timeout = absl::Seconds(config.body_timeout_seconds);
  ServerMetrics* metrics = &deps.metrics;  // captured by value: outlives the frontends
  f.generator = std::make_unique<GeneratorService>(
      deps.models, GrpcHooks{[metrics](absl::string_view kind, const absl::Status& s) {
        metrics->CountRequest(kind, s);
      }},
      grpc_options);
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(absl::StrCat(config.host, ":", config.grpc_port),
                           grpc::InsecureServerCredentials(), &f.grpc_port);
  builder.RegisterService(f.generator.get());
  // Every received message is at most --max_message_bytes (a Generate or Translate request;
  // session blobs beyond it come in chunks through ImportSessionChunks), so no call makes gRPC
  // buffer more. An exported session blob up to --max_session_bytes is sent in one message.
  builder.SetMaxReceiveMessageSize(config.max_message_bytes);
  // gRPC receives a message whole before its size is checked; its memory quota makes the
  // transport refuse new streams and shrink flow-control windows under pressure, so calls with
  // oversized messages cannot together buffer much more than the body budget.
  f.grpc_quota = std::make_unique<grpc::ResourceQuota>("abcd-grpc");
  f.grpc_quota->Resize(static_cast<size_t>(config.max_inflight_body_mb) << 19);  // half of it
  builder.SetResourceQuota(*f.grpc_quota);
  builder.SetMaxSendMessageSize(static_cast<int>(
      std::max<int64_t>(config.max_message_bytes, config.max_session_bytes + (64 << 10))));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             config.max_connection_age_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
                             config.max_connection_age_grace_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, config.keepalive_time_seconds * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20 * 1000);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10 * 1000);
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  // Exclusive port: without this gRPC sets SO_REUSEPORT, and a second server on the same port
  // would start and silently take half the connections.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  f.grpc_server = builder.BuildAndStart();
  if (f.grpc_server == nullptr || f.grpc_port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen on ", config.host, ":",
                                               config.grpc_port,
                                               " for gRPC: address in use or not available"));
  }
  return absl::OkStatus();
}

// gRPC, then HTTP on --http_port, then the admin listener (probes and metrics on their own
// port: no crowd on the API port can starve them). On an error the gRPC server is shut down.
absl::Status StartFrontends(const ServerConfig& config, const FrontendDeps& deps, Frontends& f) {
  ABCD_RETURN_IF_ERROR(StartGrpc(config, deps, f));
  http::HttpOptions http_options;
  http_options.thread_count = config.http_threads;
  http_options.max_connections = config.http_max_connections;
  http_options.max_inflight = config.http_max_inflight;
  http_options.max_tokens_limit = config.max_tokens_limit;
  http_options.max_choices = config.max_choices;
  http_options.max_prompt_tokens = config.max_prompt_tokens;
  http_options.sessions = deps.sessions;
  http_options.body_budget = deps.body_budget;
  http_options.body_timeout = absl::Seconds(config.body_timeout_seconds);
  ServerMetrics* metrics = &deps.metrics;  // captured by value: outlives the frontends
  f.http = std::make_unique<http::HttpService>(
      deps.models,
      http::HttpHooks{[metrics] { return metrics->Render(); },
                      [metrics](absl::string_view kind, absl::string_view status) {
                        metrics->CountRequest(kind, status);
                      }},
      http_options);
  absl::Status status = f.http->Start(config.host, config.http_port);
  if (status.ok()) {
    http::HttpService* http = f.http.get();
    deps.transport_metrics->set_evicted_connections([http] { return http->evicted_connections(); });
    if (config.admin_port >= 0) {
      f.admin = std::make_unique<http::AdminService>(deps.models,
                                                     [metrics] { return metrics->Render(); });
      status = f.admin->Start(config.host, config.admin_port);
      if (!status.ok())
        status = absl::Status(status.code(), absl::StrCat("--admin_port: ", status.message()));
    }
  }
  if (!status.ok()) f.grpc_server->Shutdown();
  return status;
}

// Serving: readiness on, health SERVING, the port file written, one "serving" log line.
void AnnounceServing(const ServerConfig& config, ServedModels& models, const Frontends& f) {
  models.set_ready(true);
  // grpc.health.v1 answers for "" (the server) and for the service by name (a probe naming
  // abcd.v1.Generator); the calls without a name below turn both.
  grpc::HealthCheckServiceInterface* health = f.grpc_server->GetHealthCheckService();
  health->SetServingStatus(abcd::v1::Generator::service_full_name(), true);
  health->SetServingStatus(true);
  const int admin_port = f.admin ? f.admin->port() : -1;
  if (!config.port_file.empty()) {
    const std::string tmp = config.port_file + ".tmp";
    std::ofstream(tmp) << "{\"grpc_port\": " << f.grpc_port << ", \"http_port\": " << f.http->port()
                       << ", \"admin_port\": " << admin_port << "}\n";
    std::filesystem::rename(tmp, config.port_file);
  }
  LogEvent("serving", {{"host", config.host},
                       {"grpc_port", absl::StrCat(f.grpc_port)},
                       {"http_port", absl::StrCat(f.http->port())},
                       {"admin_port", absl::StrCat(admin_port)},
                       {"max_inflight_body_mb", absl::StrCat(config.max_inflight_body_mb)},
                       {"models", absl::StrCat(config.models.size())}});
}

// Waits for SIGTERM/SIGINT and returns its number. Meanwhile, once a second: trim the heap, and
// has a model's backend failed for good? Then gRPC health turns NOT_SERVING (readyz already
// answers 503), so the orchestrator's probes restart the process, the one remedy for a poisoned
// GPU context.
int WaitForStop(const sigset_t& signals, const ServedModels& models,
                grpc::HealthCheckServiceInterface* health) {
  int signal_number = -1;
  bool failure_reported = false;
  while (signal_number <= 0) {
    const timespec tick{1, 0};
    signal_number = sigtimedwait(&signals, nullptr, &tick);
    // Freed pages inside the malloc arenas (a burst of large requests' transport buffers) go
    // back to the system, but only while nothing decodes: a pass holds the arenas' locks, and
    // under load it stalled the engine thread's allocations for tens of milliseconds (p99
    // inter-token latency 36 ms instead of 6 ms at 16 streams).
    if (models.Idle()) malloc_trim(0);
    if (signal_number > 0 || failure_reported) continue;
    if (const std::string failure = models.BackendFailure(); !failure.empty()) {
      failure_reported = true;
      LogEvent("backend_failed", {{"error", failure}});
      health->SetServingStatus(false);
    }
  }
  return signal_number;
}

// Drains: NOT_SERVING, new requests refused, in-flight ones get --drain_grace_seconds; then
// everything left is cut and the frontends stop. Returns whether every request finished.
bool DrainAndStop(const ServerConfig& config, ServedModels& models, Frontends& f) {
  models.set_draining(true);
  f.grpc_server->GetHealthCheckService()->SetServingStatus(false);
  for (const ServedModel* m : models.All()) m->executor->StartDraining();
  const absl::Time grace_end = absl::Now() + absl::Seconds(config.drain_grace_seconds);
  while (!AllIdle(models) && absl::Now() < grace_end) absl::SleepFor(absl::Milliseconds(20));
  const bool clean = AllIdle(models);
  // Cut whatever is left: the engines end every request (UNAVAILABLE) within the iteration
  // they are in, so each open call gets its final event and the frontends stop at once. The
  // short gRPC deadline covers final writes still in flight and idle client connections that
  // have not yet read the GOAWAY (shutdown would otherwise wait for them).
  for (const ServedModel* m : models.All()) m->executor->Shutdown();
  f.grpc_server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(250));
  f.http->Stop();
  if (f.admin) f.admin->Stop();
  return clean;
}

int Fatal(const absl::Status& status) {
  LogEvent("fatal", {{"error", std::string(status.message())}});
  return 1;
}

// Load, start the frontends, wait for a stop signal, drain.
int Run(int argc, char** argv) {
  const sigset_t signals = SetUpProcess();
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (!args.empty() && (args[0] == "--help" || args[0] == "-h")) {
    std::cout << ServerUsage();
    return 0;
  }
  absl::StatusOr<ServerConfig> config =
      ParseServerConfig(args, absl::StrSplit(ABCD_DEFAULT_MODELS, ','));
  if (!config.ok()) {
    std::cerr << "abcd-server: " << config.status().message() << "\n" << ServerUsage();
    return 2;
  }
  RaiseDescriptorLimit();

  ServerMetrics metrics;
  ServedModels models;
  if (absl::Status status = LoadModels(*config, metrics, models); !status.ok()) {
    return Fatal(status);
  }
  // Sessions: the store (memory, or Redis shared by replicas; a Redis that is down at start is
  // still created and connects lazily) behind one manager for both frontends.
  SessionStoreOptions store_options;
  store_options.budget_bytes = config->session_store_mb << 20;
  store_options.ttl = absl::Seconds(config->session_ttl_s);
  absl::StatusOr<std::unique_ptr<SessionStore>> store =
      CreateSessionStore(config->session_store, store_options);
  if (!store.ok()) return Fatal(store.status());
  SessionMetrics session_metrics(metrics.registry());
  SessionManager session_manager(*std::move(store), &session_metrics);
  metrics.AddRenderHook([&session_manager] { session_manager.RefreshMetrics(); });
  const SessionOps sessions(&session_manager, models, config->max_session_bytes);
  LogEvent("sessions", {{"store", session_manager.store().name()},
                        {"ttl_s", absl::StrCat(config->session_ttl_s)},
                        {"max_session_bytes", absl::StrCat(config->max_session_bytes)}});
  // One budget for request bodies in flight on both frontends (body_budget.h). Bodies up to
  // the HTTP body limit (completions, translations) may use all of it, larger ones 3/4.
  BodyBudget body_budget(config->max_inflight_body_mb << 20, int64_t{1} << 20);
  TransportMetrics transport_metrics(metrics.registry(), &body_budget);
  metrics.AddRenderHook([&transport_metrics] { transport_metrics.Refresh(); });

  Frontends frontends;
  if (absl::Status status = StartFrontends(
          *config, {models, metrics, &sessions, &body_budget, &transport_metrics}, frontends);
      !status.ok()) {
    return Fatal(status);
  }
  AnnounceServing(*config, models, frontends);
  const int signal_number =
      WaitForStop(signals, models, frontends.grpc_server->GetHealthCheckService());
  LogEvent("draining", {{"signal", absl::StrCat(signal_number)},
                        {"grace_seconds", absl::StrCat(config->drain_grace_seconds)}});
  const bool clean = DrainAndStop(*config, models, frontends);
  LogEvent("stopped", {{"drained", clean ? "true" : "false"}});
  return 0;
}

}  // namespace
}  // namespace abcd

int main(int argc, char** argv) { return abcd::Run(argc, argv); }
