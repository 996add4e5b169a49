// abcd-server settings: command-line flags (`--name value` or `--name=value`), optionally on top
// of a JSON config file (`--config FILE`, same keys; the command line wins). Every value is
// range-checked and errors name the flag.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace abcd {

struct ServerConfig {
  std::string host = "0.0.0.0";
  int grpc_port = 50051;
  int http_port = 8080;
  std::vector<std::string> models;  // model directories; the first of each kind is default
  int64_t state_budget_mb = 1024;   // attention-state memory per model
  int max_waiting_requests = 256;   // per model; beyond it requests are refused
  int max_running_sequences = 256;  // per model batch cap
  int prefill_token_budget = 512;   // most prompt tokens prefilled per iteration (hard cap)
  // Prompt rows fed once through each decoder-only model when it starts serving, so the first
  // request does not pay for the engine's buffers (at most prefill_token_budget); -1: the
  // budget, 0: none.
  int warmup_tokens = -1;
  // time: prefill chunks sized so that, while streams decode, an iteration takes at most about
  // max(prefill_step_share x one decode step, iteration_budget_ms) longer; tokens:
  // prefill_token_budget every time.
  std::string prefill_policy = "time";
  double iteration_budget_ms = 0;
  double prefill_step_share = 1.0;  // time: prefill's extra time as a share of a decode step
  // time: a prompt that has waited longer than this since its enqueue is overdue, and every
  // iteration then takes at least all overdue prompts' remaining tokens (up to
  // prefill_token_budget), whatever that does to the running streams' inter-token latency.
  // 0: off.
  double prefill_deadline_ms = 1000;
  int max_prompt_tokens = 4096;
  int max_source_tokens = 512;         // translation: tokens of one source text (with eos)
  int max_batch_source_tokens = 8192;  // translation: source tokens of one batch together
  int encode_token_budget = 128;       // translation: encoder tokens per iteration (average)
  int max_tokens_limit = 4096;         // largest max_tokens a request may ask for
  int http_threads = 2;                // HTTP I/O threads (every connection runs on them)
  int http_max_connections = 1024;     // at it the idlest connection is closed (503 if none idle)
  // Probes and metrics (/healthz, /readyz, /metrics) on a listener of their own; -1: none.
  int admin_port = -1;
  // Request bodies in flight (HTTP bodies, gRPC messages, streamed session imports), summed
  // over every connection; beyond it a new body is refused (503 / RESOURCE_EXHAUSTED). 0: the
  // default, 512 MiB or a sixth of the cgroup's memory limit when that is less.
  int64_t max_inflight_body_mb = 0;
  int http_max_inflight = 256;      // HTTP completions + translations at once; beyond: 429
  double drain_grace_seconds = 30;  // SIGTERM: in-flight requests get this long to finish
  // An HTTP request body must arrive within this of its header, a gRPC ImportSessionChunks
  // stream within this of the call's start (408 / DEADLINE_EXCEEDED, its budget released).
  double body_timeout_seconds = 30;
  int max_connection_age_seconds = 300;        // gRPC: clients reconnect, so load rebalances
  int max_connection_age_grace_seconds = 600;  // streams open at max age get this long
  int keepalive_time_seconds = 60;
  int max_message_bytes = 4 << 20;  // gRPC receive limit of every message (sessions: chunks)
  std::string port_file;            // if set, {"grpc_port":..,"http_port":..} is written here
  // auto: the CUDA backend when this build has it, a GPU is present, the model runs there and
  // its start-up parity probe against the CPU passes; else the CPU. cuda: that or fail.
  std::string device = "auto";
  std::string device_weights = "bf16";  // CUDA projections: bf16, fp16 or fp32
  int threads = 1;            // CPU backend threads per model (default: the cores we may use)
  std::string weight_format;  // CPU matrices: f32, bf16, f16, int8; empty: the checkpoint's
  // CPU products (ResolveCpuCompute, engine/runtime/engine_flags.h): auto (the default: bf16
  // products for bf16 weights where the CPU has AVX512_BF16, exact otherwise), fp32 (exact for
  // bf16 weights, 16-bit activations for int8), bf16 (AVX512_BF16 dot products on activations
  // rounded to bf16; every served model must then keep bf16 weights) or int8 (W8A8: 8-bit
  // activations, AVX-512 VNNI; int8 weights).
  std::string cpu_compute = "auto";
  std::string kv_cache_format = "bf16";  // CPU softmax KV rows and txl rings: bf16, f16 or f32
  // Sessions (issue 14): where they live ("memory" or "redis://HOST:PORT[/DB]"), how long an
  // unused one lives, the memory store's byte budget, and the largest session blob accepted
  // (import) or saved.
  std::string session_store = "memory";
  int64_t session_ttl_s = 86400;
  int64_t session_store_mb = 1024;
  int64_t max_session_bytes = int64_t{64} << 20;
  int64_t prefix_cache_mb = 256;  // per decoder-only model; 0 turns the prefix cache off
  int max_choices = 16;           // largest n of a completion
  // Speculative decoding of language-model requests that do not choose: off, ngram or ngram:K.
  std::string speculative = "off";
  // --chat_template: a Jinja chat template file per language model name ("" key: every model
  // not named), used instead of the one in its tokenizer_config.json (server/chat/).
  std::map<std::string, std::string> chat_templates;
  // --tool_call_format: auto, hermes, llama3_json or mistral per language model name ("" key:
  // every model not named); checked and applied at load (server/chat/chat_tools.h).
  std::map<std::string, std::string> tool_call_formats;
};

// `default_models` is used when neither flags nor the config file name models.
absl::StatusOr<ServerConfig> ParseServerConfig(const std::vector<std::string>& args,
                                               const std::vector<std::string>& default_models);

// The flags, for --help.
std::string ServerUsage();

}  // namespace abcd
