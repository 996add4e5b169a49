#include "server/core/server_config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/runtime/engine_flags.h"
#include "nlohmann/json.hpp"
#include "server/core/arguments.h"

namespace abcd {
namespace {

const std::set<std::string> kValued = {"config",
                                       "host",
                                       "grpc_port",
                                       "http_port",
                                       "models",
                                       "state_budget_mb",
                                       "max_waiting_requests",
                                       "max_running_sequences",
                                       "prefill_token_budget",
                                       "warmup_tokens",
                                       "prefill_policy",
                                       "iteration_budget_ms",
                                       "prefill_step_share",
                                       "prefill_deadline_ms",
                                       "max_prompt_tokens",
                                       "max_source_tokens",
                                       "max_batch_source_tokens",
                                       "encode_token_budget",
                                       "max_tokens_limit",
                                       "http_threads",
                                       "http_max_connections",
                                       "http_max_inflight",
                                       "admin_port",
                                       "max_inflight_body_mb",
                                       "drain_grace_seconds",
                                       "body_timeout_seconds",
                                       "max_connection_age_seconds",
                                       "max_connection_age_grace_seconds",
                                       "keepalive_time_seconds",
                                       "max_message_bytes",
                                       "port_file",
                                       "device",
                                       "device_weights",
                                       "threads",
                                       "weight_format",
                                       "cpu_compute",
                                       "kv_cache_format",
                                       "session_store",
                                       "session_ttl_s",
                                       "session_store_mb",
                                       "max_session_bytes",
                                       "prefix_cache_mb",
                                       "max_choices",
                                       "speculative",
                                       "chat_template",
                                       "tool_call_format"};

absl::Status ApplyConfigFile(const std::string& path, Arguments& args) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--config: cannot open ", path));
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  if (absl::Status depth = CheckJsonNesting(text, absl::StrCat("--config: ", path)); !depth.ok()) {
    return depth;
  }
  const nlohmann::json root = nlohmann::json::parse(text, nullptr, false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat("--config: ", path, " is not a JSON object"));
  }
  for (const auto& [key, value] : root.items()) {
    if (!kValued.contains(key) || key == "config") {
      return absl::InvalidArgumentError(absl::StrCat("--config: unknown key \"", key, "\""));
    }
    if (value.is_string()) {
      args.SetDefault(key, value.get<std::string>());
    } else if (value.is_number()) {
      args.SetDefault(key, value.dump());
    } else if (key == "models" && value.is_array()) {
      std::string joined;
      for (const auto& m : value) {
        if (!m.is_string()) return absl::InvalidArgumentError("--config: models must be strings");
        absl::StrAppend(&joined, joined.empty() ? "" : ",", m.get<std::string>());
      }
      args.SetDefault(key, joined);
    } else {
      return absl::InvalidArgumentError(
          absl::StrCat("--config: \"", key, "\" must be a string or a number"));
    }
  }
  return absl::OkStatus();
}

// The same directory twice (however spelt: trailing slash, "..", a symlink) would load the model
// twice under one name, the second copy unreachable: refused, naming the flag and both spellings.
absl::Status CheckDistinctModels(const std::vector<std::string>& models) {
  std::map<std::string, std::string> seen;  // canonical path -> as given
  for (const std::string& dir : models) {
    std::error_code error;
    std::filesystem::path canonical = std::filesystem::weakly_canonical(dir, error);
    if (error) canonical = std::filesystem::path(dir).lexically_normal();
    std::string key = canonical.lexically_normal().string();
    while (key.size() > 1 && key.back() == '/') key.pop_back();
    const auto [it, inserted] = seen.emplace(key, dir);
    if (!inserted) {
      return absl::InvalidArgumentError(
          it->second == dir ? absl::StrCat("--models names the directory \"", dir, "\" twice")
                            : absl::StrCat("--models names the directory ", key, " twice (as \"",
                                           it->second, "\" and \"", dir, "\")"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> Ranged(const Arguments& args, const std::string& name, int64_t fallback,
                               int64_t low, int64_t high) {
  ABCD_ASSIGN_OR_RETURN(const int64_t value, args.Int(name, fallback));
  if (value < low || value > high) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", name, " must be in [", low, ", ", high, "], got ", value));
  }
  return value;
}

// 512 MiB, or a sixth of the cgroup (v2) memory limit when that is less (at least 16 MiB).
int64_t DefaultInflightBodyMb() {
  constexpr int64_t kDefault = 512;
  std::ifstream in("/sys/fs/cgroup/memory.max");
  int64_t limit = 0;
  if (!(in >> limit) || limit <= 0) return kDefault;  // "max" or no cgroup v2
  return std::clamp<int64_t>((limit >> 20) / 6, 16, kDefault);
}

}  // namespace

std::string ServerUsage() {
  return "usage: abcd-server [--config FILE] [--host H] [--grpc_port P] [--http_port P]\n"
         "  [--models DIR[,DIR...]] [--state_budget_mb MB] [--max_waiting_requests N]\n"
         "  [--max_running_sequences N] [--prefill_token_budget N] [--warmup_tokens N]\n"
         "  [--prefill_policy time|tokens]\n"
         "  [--iteration_budget_ms MS] [--prefill_step_share F] [--prefill_deadline_ms MS]\n"
         "  [--max_prompt_tokens N] [--max_source_tokens N] [--max_batch_source_tokens N]\n"
         "  [--encode_token_budget N] [--max_tokens_limit N] [--http_threads N]\n"
         "  [--http_max_connections N] [--http_max_inflight N] [--admin_port P]\n"
         "  [--max_inflight_body_mb MB]\n"
         "  [--drain_grace_seconds S] [--body_timeout_seconds S]\n"
         "  [--max_connection_age_seconds S] [--max_connection_age_grace_seconds S]\n"
         "  [--keepalive_time_seconds S]\n"
         "  [--max_message_bytes N] [--port_file FILE] [--device auto|cpu|cuda|cuda:N]\n"
         "  [--device_weights bf16|fp16|fp32] [--threads N] [--weight_format f32|bf16|f16|int8]\n"
         "  [--cpu_compute auto|fp32|bf16|int8]\n"
         "  [--kv_cache_format bf16|f16|f32] [--session_store memory|redis://HOST:PORT[/DB]]\n"
         "  [--session_ttl_s S] [--session_store_mb MB] [--max_session_bytes N]\n"
         "  [--prefix_cache_mb MB] [--max_choices N] [--chat_template FILE|MODEL=FILE[,...]]\n"
         "  [--speculative off|ngram|ngram:K]\n"
         "  [--tool_call_format auto|hermes|llama3_json|mistral|MODEL=FORMAT[,...]]\n"
         "Ports may be 0 (ephemeral; see --port_file). Defaults serve the bundled models.\n";
}

absl::StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& argv,
                                               const std::vector<std::string>& default_models) {
  ABCD_ASSIGN_OR_RETURN(Arguments args, Arguments::Parse(argv, kValued, {}));
  if (args.Has("config")) ABCD_RETURN_IF_ERROR(ApplyConfigFile(args.String("config", ""), args));
  ServerConfig c;
  c.host = args.String("host", c.host);
  if (c.host.empty()) return absl::InvalidArgumentError("--host must not be empty");
  ABCD_ASSIGN_OR_RETURN(c.grpc_port, Ranged(args, "grpc_port", c.grpc_port, 0, 65535));
  ABCD_ASSIGN_OR_RETURN(c.http_port, Ranged(args, "http_port", c.http_port, 0, 65535));
  if (c.grpc_port != 0 && c.grpc_port == c.http_port) {
    return absl::InvalidArgumentError(
        absl::StrCat("--grpc_port and --http_port must differ (both ", c.grpc_port, ")"));
  }
  if (args.Has("models")) {
    c.models = absl::StrSplit(args.String("models", ""), ',', absl::SkipEmpty());
    if (c.models.empty()) return absl::InvalidArgumentError("--models must name a directory");
  } else {
    c.models = default_models;
  }
  ABCD_RETURN_IF_ERROR(CheckDistinctModels(c.models));
  ABCD_ASSIGN_OR_RETURN(c.state_budget_mb,
                        Ranged(args, "state_budget_mb", c.state_budget_mb, 1, int64_t{1} << 20));
  ABCD_ASSIGN_OR_RETURN(c.max_waiting_requests,
                        Ranged(args, "max_waiting_requests", c.max_waiting_requests, 0, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.max_running_sequences,
                        Ranged(args, "max_running_sequences", c.max_running_sequences, 1, 1 << 16));
  ABCD_ASSIGN_OR_RETURN(c.prefill_token_budget,
                        Ranged(args, "prefill_token_budget", c.prefill_token_budget, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.warmup_tokens,
                        Ranged(args, "warmup_tokens", c.warmup_tokens, -1, 1 << 20));
  c.prefill_policy = args.String("prefill_policy", c.prefill_policy);
  ABCD_RETURN_IF_ERROR(CheckPrefillPolicyFlag(c.prefill_policy, "--prefill_policy"));
  ABCD_ASSIGN_OR_RETURN(c.iteration_budget_ms,
                        args.Double("iteration_budget_ms", c.iteration_budget_ms));
  if (!(c.iteration_budget_ms >= 0 && c.iteration_budget_ms <= 10000)) {
    return absl::InvalidArgumentError("--iteration_budget_ms must be in [0, 10000]");
  }
  ABCD_ASSIGN_OR_RETURN(c.prefill_step_share,
                        args.Double("prefill_step_share", c.prefill_step_share));
  if (!(c.prefill_step_share > 0 && c.prefill_step_share <= 16)) {
    return absl::InvalidArgumentError("--prefill_step_share must be in (0, 16]");
  }
  ABCD_ASSIGN_OR_RETURN(c.prefill_deadline_ms,
                        args.Double("prefill_deadline_ms", c.prefill_deadline_ms));
  if (!(c.prefill_deadline_ms >= 0 && c.prefill_deadline_ms <= 1e6)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--prefill_deadline_ms must be in [0, 1000000], got ", c.prefill_deadline_ms));
  }
  ABCD_ASSIGN_OR_RETURN(c.max_prompt_tokens,
                        Ranged(args, "max_prompt_tokens", c.max_prompt_tokens, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.max_source_tokens,
                        Ranged(args, "max_source_tokens", c.max_source_tokens, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.max_batch_source_tokens, Ranged(args, "max_batch_source_tokens",
                                                          c.max_batch_source_tokens, 1, 1 << 24));
  ABCD_ASSIGN_OR_RETURN(c.encode_token_budget,
                        Ranged(args, "encode_token_budget", c.encode_token_budget, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.max_tokens_limit,
                        Ranged(args, "max_tokens_limit", c.max_tokens_limit, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.http_threads, Ranged(args, "http_threads", c.http_threads, 1, 64));
  ABCD_ASSIGN_OR_RETURN(c.http_max_connections,
                        Ranged(args, "http_max_connections", c.http_max_connections, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.http_max_inflight,
                        Ranged(args, "http_max_inflight", c.http_max_inflight, 1, 1 << 20));
  ABCD_ASSIGN_OR_RETURN(c.admin_port, Ranged(args, "admin_port", c.admin_port, -1, 65535));
  if (c.admin_port > 0 && (c.admin_port == c.http_port || c.admin_port == c.grpc_port)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--admin_port must differ from --http_port and --grpc_port (", c.admin_port, ")"));
  }
  c.max_inflight_body_mb = DefaultInflightBodyMb();
  ABCD_ASSIGN_OR_RETURN(
      c.max_inflight_body_mb,
      Ranged(args, "max_inflight_body_mb", c.max_inflight_body_mb, 1, int64_t{1} << 20));
  ABCD_ASSIGN_OR_RETURN(c.drain_grace_seconds,
                        args.Double("drain_grace_seconds", c.drain_grace_seconds));
  if (!(c.drain_grace_seconds >= 0 && c.drain_grace_seconds <= 3600)) {
    return absl::InvalidArgumentError("--drain_grace_seconds must be in [0, 3600]");
  }
  ABCD_ASSIGN_OR_RETURN(c.body_timeout_seconds,
                        args.Double("body_timeout_seconds", c.body_timeout_seconds));
  if (!(c.body_timeout_seconds > 0 && c.body_timeout_seconds <= 3600)) {
    return absl::InvalidArgumentError("--body_timeout_seconds must be in (0, 3600]");
  }
  ABCD_ASSIGN_OR_RETURN(
      c.max_connection_age_seconds,
      Ranged(args, "max_connection_age_seconds", c.max_connection_age_seconds, 1, 1 << 24));
  ABCD_ASSIGN_OR_RETURN(c.max_connection_age_grace_seconds,
                        Ranged(args, "max_connection_age_grace_seconds",
                               c.max_connection_age_grace_seconds, 1, 1 << 24));
  ABCD_ASSIGN_OR_RETURN(c.keepalive_time_seconds, Ranged(args, "keepalive_time_seconds",
                                                         c.keepalive_time_seconds, 1, 1 << 24));
  ABCD_ASSIGN_OR_RETURN(c.max_message_bytes,
                        Ranged(args, "max_message_bytes", c.max_message_bytes, 1024, 1 << 30));
  c.port_file = args.String("port_file", "");
  c.device = args.String("device", c.device);
  ABCD_RETURN_IF_ERROR(CheckDeviceFlag(c.device, "--device"));
  c.device_weights = args.String("device_weights", c.device_weights);
  ABCD_RETURN_IF_ERROR(CheckDeviceWeightsFlag(c.device_weights, "--device_weights"));
  c.threads = ThreadPool::AvailableCores();
  ABCD_ASSIGN_OR_RETURN(c.threads, Ranged(args, "threads", c.threads, 1, 1024));
  c.kv_cache_format = args.String("kv_cache_format", c.kv_cache_format);
  ABCD_RETURN_IF_ERROR(CheckKvFormatFlag(c.kv_cache_format, "--kv_cache_format"));
  c.session_store = args.String("session_store", c.session_store);
  if (c.session_store != "memory" && c.session_store.rfind("redis://", 0) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--session_store must be memory or redis://HOST:PORT[/DB], got \"",
                     c.session_store.substr(0, 64), "\""));
  }
  ABCD_ASSIGN_OR_RETURN(c.session_ttl_s,
                        Ranged(args, "session_ttl_s", c.session_ttl_s, 1, int64_t{1} << 32));
  ABCD_ASSIGN_OR_RETURN(c.session_store_mb,
                        Ranged(args, "session_store_mb", c.session_store_mb, 1, int64_t{1} << 24));
  ABCD_ASSIGN_OR_RETURN(c.max_session_bytes, Ranged(args, "max_session_bytes", c.max_session_bytes,
                                                    1024, int64_t{1} << 30));
  ABCD_ASSIGN_OR_RETURN(c.prefix_cache_mb,
                        Ranged(args, "prefix_cache_mb", c.prefix_cache_mb, 0, int64_t{1} << 24));
  ABCD_ASSIGN_OR_RETURN(c.max_choices, Ranged(args, "max_choices", c.max_choices, 1, 1024));
  c.speculative = args.String("speculative", c.speculative);
  ABCD_RETURN_IF_ERROR(CheckSpeculativeFlag(c.speculative, "--speculative"));
  for (const absl::string_view entry :
       absl::StrSplit(args.String("chat_template", ""), ',', absl::SkipEmpty())) {
    const size_t eq = entry.find('=');
    const std::string model(eq == entry.npos ? "" : entry.substr(0, eq));
    const std::string file(eq == entry.npos ? entry : entry.substr(eq + 1));
    if (file.empty() || (eq == 0) || c.chat_templates.contains(model)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--chat_template must be FILE or MODEL=FILE[,MODEL=FILE...] with each model once, got \"",
          entry, "\""));
    }
    c.chat_templates[model] = file;
  }
  for (const absl::string_view entry :
       absl::StrSplit(args.String("tool_call_format", ""), ',', absl::SkipEmpty())) {
    const size_t eq = entry.find('=');
    const std::string model(eq == entry.npos ? "" : entry.substr(0, eq));
    const std::string format(eq == entry.npos ? entry : entry.substr(eq + 1));
    if (format.empty() || (eq == 0) || c.tool_call_formats.contains(model)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tool_call_format must be FORMAT or MODEL=FORMAT[,MODEL=FORMAT...] with "
                       "each model once, got \"",
                       entry, "\""));
    }
    c.tool_call_formats[model] = format;
  }
  c.cpu_compute = args.String("cpu_compute", c.cpu_compute);
  ABCD_RETURN_IF_ERROR(CheckCpuComputeFlag(c.cpu_compute, "--cpu_compute"));
  c.weight_format = args.String("weight_format", "");
  if (!c.weight_format.empty()) {
    ABCD_RETURN_IF_ERROR(CheckWeightFormatFlag(c.weight_format, "--weight_format"));
  }
  return c;
}

}  // namespace abcd
