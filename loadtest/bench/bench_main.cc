// abcd-bench: engine benchmarks without a server (memory per sequence, decode throughput
// against batch size, engine vs the PyTorch reference) and the serving overhead. See
// loadtest/results/README.md for the commands that produced the published numbers.
#include <iostream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/runtime/engine_flags.h"
#include "loadtest/bench/benchmarks.h"
#include "loadtest/lib/report.h"
#include "server/core/arguments.h"

namespace abcd::bench {
namespace {

constexpr char kUsage[] = R"(usage: abcd-bench COMMAND [options]
  bandwidth  [--bandwidth_mb 256]
  memory     --models DIR[,DIR..] [--lengths 128,256,...,32768] [--confirm_length 2048]
  decode     --models DIR[,DIR..] [--batches 1,4,16,64] [--contexts 128,512,2048] [--steps 8]
             [--rounds 3] [--weight_formats f32,bf16,bf16-dot,int8,int8-dot] [--prefill_tokens 512]
             [--kv_cache_format bf16|f16|f32] [--cpu_compute auto|fp32]
  linear     [--weight_formats f32,bf16,bf16-dot,f16,int8,int8-dot] [--shapes 1024x256,256x1024,256x8000]
             [--rows 1,2,3,4,5,6,7,8,16,64] [--rounds 5]   (cpu::Linear alone; not in `all`)
  seq2seq    --models DIR[,DIR..] [--lengths 512,1024,2048] [--batch 16] [--steps 4] [--rounds 3]
             [--kv_cache_format bf16|f16|f32]   (encoder-decoder models; not in `all`)
  reference  --models DIR[,DIR..] [--reference_batches 1,32] [--reference_steps 64] [--repeats 3]
             [--python /usr/bin/python3] [--script loadtest/bench_reference.py]
  overhead   --model DIR[,DIR..] [--server build/server/abcd-server] [--requests 48] [--concurrency 8]
             [--max_tokens 32] [--prompts loadtest/prompts/brown_test.jsonl] [--rounds 3]
  state      --models DIR[,DIR..] [--rounds 3] [--turns 16] [--turn_prompt 32] [--turn_tokens 64]
             [--prefix 1000] [--suffixes 32] [--suffix_tokens 16] [--in_flight 8] [--choices 8]
             [--choice_prompt 512] [--choice_tokens 32] [--session_store memory|redis://H:P]
             (sessions, prefix cache, n; not in `all`)
  prefill_chunk  --models DIR[,DIR..] [--contexts 2048,8192,32768] [--chunk 256] [--rounds 5]
             [--kv_cache_format bf16|f16|f32] [--weight_formats f32,bf16,bf16-dot,int8]
             [--cpu_compute auto|fp32] (a prompt chunk at position P; not in `all`)
  all        everything above with --models_dir DIR (holding abc/ rfa/ t2r/ softmax/ ...):
             --memory_types, --decode_types, --reference_types (or --reference_models DIR,..),
             --overhead_type pick the subdirectories
Common: --threads N (the engine's CPU threads, BLAS threads, and torch threads for reference;
        default 1)  --json FILE
)";

const std::set<std::string> kValued = {"models",
                                       "model",
                                       "models_dir",
                                       "lengths",
                                       "confirm_length",
                                       "batches",
                                       "contexts",
                                       "steps",
                                       "repeats",
                                       "python",
                                       "script",
                                       "server",
                                       "requests",
                                       "concurrency",
                                       "max_tokens",
                                       "prompts",
                                       "threads",
                                       "json",
                                       "bandwidth_mb",
                                       "memory_types",
                                       "decode_types",
                                       "reference_types",
                                       "overhead_type",
                                       "reference_batches",
                                       "reference_steps",
                                       "reference_models",
                                       "rounds",
                                       "weight_formats",
                                       "cpu_compute",
                                       "prefill_tokens",
                                       "kv_cache_format",
                                       "turns",
                                       "turn_prompt",
                                       "turn_tokens",
                                       "prefix",
                                       "suffixes",
                                       "suffix_tokens",
                                       "in_flight",
                                       "choices",
                                       "choice_prompt",
                                       "choice_tokens",
                                       "session_store",
                                       "batch",
                                       "shapes",
                                       "rows",
                                       "chunk"};

std::vector<std::string> ModelsIn(const std::string& dir, const std::string& types) {
  std::vector<std::string> out;
  for (const std::string& t : SplitList(types)) out.push_back(absl::StrCat(dir, "/", t));
  return out;
}

absl::StatusOr<int> Run(const std::string& command, const Arguments& args) {
  ABCD_ASSIGN_OR_RETURN(const int64_t threads, args.Int("threads", 1));
  SetBlasThreads(static_cast<int>(threads));
  nlohmann::json out;
  out["machine"] = MachineInfo();
  out["command"] = command;
  const bool all = command == "all";
  const std::string models_dir = args.String("models_dir", "");
  if (all && models_dir.empty()) return absl::InvalidArgumentError("all needs --models_dir");
  auto models_for = [&](const std::string& types_flag,
                        const std::string& default_types) -> std::vector<std::string> {
    if (args.Has("models")) return SplitList(args.String("models", ""));
    return ModelsIn(models_dir, args.String(types_flag, default_types));
  };

  ABCD_ASSIGN_OR_RETURN(const int64_t bandwidth_mb, args.Int("bandwidth_mb", 256));
  Bandwidth bandwidth;
  if (all || command == "bandwidth" || command == "decode" || command == "reference") {
    bandwidth = MeasureCopyBandwidth(static_cast<int>(bandwidth_mb), 5);
    std::cout << absl::StrFormat(
        "== memory bandwidth: memcpy of %d MiB, best of 5: %.2f GB/s (read + write) ==\n\n",
        bandwidth_mb, bandwidth.bytes_per_second / 1e9);
    out["bandwidth"] = {{"bytes_per_second", bandwidth.bytes_per_second},
                        {"buffer_bytes", bandwidth.buffer_bytes}};
  }
  if (all || command == "memory") {
    MemoryOptions o;
    o.models = models_for("memory_types", "softmax,window,abc,rfa,t2r,elu");
    ABCD_ASSIGN_OR_RETURN(
        o.lengths,
        ParseInts("lengths",
                  args.String("lengths", "128,256,512,1024,2048,4096,8192,16384,32768")));
    ABCD_ASSIGN_OR_RETURN(o.confirm_length, args.Int("confirm_length", 2048));
    ABCD_ASSIGN_OR_RETURN(out["memory"], RunMemory(o));
  }
  if (all || command == "decode") {
    DecodeOptions o;
    o.models = models_for("decode_types", "abc,rfa,t2r,softmax");
    ABCD_ASSIGN_OR_RETURN(o.batches, ParseInts("batches", args.String("batches", "1,4,16,64")));
    ABCD_ASSIGN_OR_RETURN(o.contexts,
                          ParseInts("contexts", args.String("contexts", "128,512,2048")));
    ABCD_ASSIGN_OR_RETURN(const int64_t steps, args.Int("steps", 8));
    o.steps = static_cast<int>(steps);
    ABCD_ASSIGN_OR_RETURN(const int64_t rounds, args.Int("rounds", 3));
    o.rounds = static_cast<int>(rounds);
    o.bandwidth = bandwidth;
    o.threads = static_cast<int>(threads);
    o.weight_formats = SplitList(args.String("weight_formats", ""));
    ABCD_ASSIGN_OR_RETURN(o.kv_cache_format, ParseKvFormat(args.String("kv_cache_format", "bf16"),
                                                           "--kv_cache_format"));
    ABCD_ASSIGN_OR_RETURN(o.prefill_tokens, args.Int("prefill_tokens", 512));
    o.cpu_compute = args.String("cpu_compute", std::string(kDefaultCpuCompute));
    ABCD_RETURN_IF_ERROR(CheckCpuComputeFlag(o.cpu_compute, "--cpu_compute"));
    ABCD_ASSIGN_OR_RETURN(out["decode"], RunDecode(o));
  }
  if (all || command == "reference") {
    ReferenceOptions o;
    o.models = args.Has("reference_models") ? SplitList(args.String("reference_models", ""))
                                            : models_for("reference_types", "abc");
    ABCD_ASSIGN_OR_RETURN(o.batches,
                          ParseInts("reference_batches", args.String("reference_batches", "1,32")));
    ABCD_ASSIGN_OR_RETURN(const int64_t steps, args.Int("reference_steps", 64));
    o.steps = static_cast<int>(steps);
    ABCD_ASSIGN_OR_RETURN(const int64_t repeats, args.Int("repeats", 3));
    o.repeats = static_cast<int>(repeats);
    o.threads = static_cast<int>(threads);
    o.bandwidth = bandwidth;
    o.python = args.String("python", "/usr/bin/python3");
    o.script = args.String("script", absl::StrCat(ABCD_SOURCE_DIR, "/loadtest/bench_reference.py"));
    ABCD_ASSIGN_OR_RETURN(out["reference"], RunReference(o));
  }
  if (all || command == "overhead") {
    OverheadOptions o;
    o.server = args.String("server", ABCD_SERVER_BINARY);
    o.prompts =
        args.String("prompts", absl::StrCat(ABCD_SOURCE_DIR, "/loadtest/prompts/brown_test.jsonl"));
    ABCD_ASSIGN_OR_RETURN(const int64_t requests, args.Int("requests", 48));
    ABCD_ASSIGN_OR_RETURN(const int64_t concurrency, args.Int("concurrency", 8));
    ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max_tokens", 32));
    ABCD_ASSIGN_OR_RETURN(const int64_t rounds, args.Int("rounds", 3));
    o.requests = static_cast<int>(requests);
    o.concurrency = static_cast<int>(concurrency);
    o.max_tokens = static_cast<int>(max_tokens);
    o.rounds = static_cast<int>(rounds);
    const std::vector<std::string> models = SplitList(args.String(
        "model", all ? absl::StrCat(models_dir, "/", args.String("overhead_type", "abc")) : ""));
    if (models.empty()) return absl::InvalidArgumentError("overhead needs --model");
    out["overhead"] = nlohmann::json::array();
    for (const std::string& model : models) {
      o.model = model;
      ABCD_ASSIGN_OR_RETURN(nlohmann::json result, RunOverhead(o));
      out["overhead"].push_back(std::move(result));
    }
  }
  if (command == "linear") {
    LinearOptions o;
    o.weight_formats = SplitList(args.String("weight_formats", "f32,bf16,f16,int8"));
    ABCD_ASSIGN_OR_RETURN(o.shapes,
                          ParseLinearShapes(args.String("shapes", "1024x256,256x1024,256x8000")));
    ABCD_ASSIGN_OR_RETURN(o.rows, ParseInts("rows", args.String("rows", "1,2,3,4,5,6,7,8,16,64")));
    ABCD_ASSIGN_OR_RETURN(const int64_t rounds, args.Int("rounds", 5));
    if (rounds < 1 || rounds > 1000) {
      return absl::InvalidArgumentError("--rounds must be in [1, 1000]");
    }
    o.rounds = static_cast<int>(rounds);
    o.threads = static_cast<int>(threads);
    ABCD_ASSIGN_OR_RETURN(out["linear"], RunLinear(o));
  }
  if (command == "prefill_chunk") {
    PrefillChunkOptions o;
    o.models = SplitList(args.String("models", ""));
    ABCD_ASSIGN_OR_RETURN(o.contexts,
                          ParseInts("contexts", args.String("contexts", "2048,8192,32768")));
    ABCD_ASSIGN_OR_RETURN(o.chunk, args.Int("chunk", 256));
    ABCD_ASSIGN_OR_RETURN(const int64_t rounds, args.Int("rounds", 5));
    if (o.chunk < 1 || o.chunk > 65536) {
      return absl::InvalidArgumentError("--chunk must be in [1, 65536]");
    }
    if (rounds < 1 || rounds > 1000) {
      return absl::InvalidArgumentError("--rounds must be in [1, 1000]");
    }
    for (int64_t context : o.contexts) {
      if (context < 0 || context > 262144) {
        return absl::InvalidArgumentError("--contexts must be in [0, 262144]");
      }
    }
    o.rounds = static_cast<int>(rounds);
    o.threads = static_cast<int>(args.Has("threads") ? threads : 2);
    ABCD_ASSIGN_OR_RETURN(o.kv_cache_format, ParseKvFormat(args.String("kv_cache_format", "bf16"),
                                                           "--kv_cache_format"));
    o.weight_formats = SplitList(args.String("weight_formats", ""));
    o.cpu_compute = args.String("cpu_compute", std::string(kDefaultCpuCompute));
    ABCD_RETURN_IF_ERROR(CheckCpuComputeFlag(o.cpu_compute, "--cpu_compute"));
    ABCD_ASSIGN_OR_RETURN(out["prefill_chunk"], RunPrefillChunk(o));
  }
  if (command == "seq2seq") {
    Seq2seqOptions o;
    o.models = SplitList(args.String("models", ""));
    if (o.models.empty()) return absl::InvalidArgumentError("seq2seq needs --models");
    ABCD_ASSIGN_OR_RETURN(o.lengths, ParseInts("lengths", args.String("lengths", "512,1024,2048")));
    ABCD_ASSIGN_OR_RETURN(o.batch, args.Int("batch", 16));
    ABCD_ASSIGN_OR_RETURN(const int64_t steps, args.Int("steps", 4));
    ABCD_ASSIGN_OR_RETURN(const int64_t rounds, args.Int("rounds", 3));
    if (o.batch < 1 || o.batch > 4096)
      return absl::InvalidArgumentError("--batch must be in [1, 4096]");
    if (steps < 1 || steps > 10000)
      return absl::InvalidArgumentError("--steps must be in [1, 10000]");
    if (rounds < 1 || rounds > 1000)
      return absl::InvalidArgumentError("--rounds must be in [1, 1000]");
    for (int64_t length : o.lengths) {
      if (length > 65536) return absl::InvalidArgumentError("--lengths must be at most 65536");
    }
    o.steps = static_cast<int>(steps);
    o.rounds = static_cast<int>(rounds);
    o.threads = static_cast<int>(threads);
    ABCD_ASSIGN_OR_RETURN(o.kv_cache_format, ParseKvFormat(args.String("kv_cache_format", "bf16"),
                                                           "--kv_cache_format"));
    ABCD_ASSIGN_OR_RETURN(out["seq2seq"], RunSeq2seq(o));
  }
  if (command == "state") {
    StateOptions o;
    o.models = SplitList(args.String("models", ""));
    if (o.models.empty()) return absl::InvalidArgumentError("state needs --models");
    o.threads = static_cast<int>(threads);
    o.session_store = args.String("session_store", "");
    const auto int_flag = [&](const char* name, int* value) -> absl::Status {
      ABCD_ASSIGN_OR_RETURN(const int64_t v, args.Int(name, *value));
      if (v < 1 || v > 1000000) {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " must be in [1, 1000000]"));
      }
      *value = static_cast<int>(v);
      return absl::OkStatus();
    };
    ABCD_RETURN_IF_ERROR(int_flag("rounds", &o.rounds));
    ABCD_RETURN_IF_ERROR(int_flag("turns", &o.turns));
    ABCD_RETURN_IF_ERROR(int_flag("turn_prompt", &o.turn_prompt_tokens));
    ABCD_RETURN_IF_ERROR(int_flag("turn_tokens", &o.turn_tokens));
    ABCD_RETURN_IF_ERROR(int_flag("prefix", &o.prefix_tokens));
    ABCD_RETURN_IF_ERROR(int_flag("suffixes", &o.suffixes));
    ABCD_RETURN_IF_ERROR(int_flag("suffix_tokens", &o.suffix_tokens));
    ABCD_RETURN_IF_ERROR(int_flag("in_flight", &o.in_flight));
    ABCD_RETURN_IF_ERROR(int_flag("choices", &o.choices));
    ABCD_RETURN_IF_ERROR(int_flag("choice_prompt", &o.choice_prompt_tokens));
    ABCD_RETURN_IF_ERROR(int_flag("choice_tokens", &o.choice_tokens));
    ABCD_ASSIGN_OR_RETURN(out["state"], RunState(o));
  }
  if (!out.contains("bandwidth") && !out.contains("memory") && !out.contains("decode") &&
      !out.contains("reference") && !out.contains("overhead") && !out.contains("state") &&
      !out.contains("seq2seq") && !out.contains("linear") && !out.contains("prefill_chunk")) {
    return absl::InvalidArgumentError(absl::StrCat("unknown command \"", command, "\""));
  }
  if (args.Has("json")) {
    ABCD_RETURN_IF_ERROR(loadtest::WriteJsonFile(args.String("json", ""), out));
    std::cout << "wrote " << args.String("json", "") << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace abcd::bench

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << abcd::bench::kUsage;
    return argc < 2 ? 2 : 0;
  }
  absl::StatusOr<abcd::Arguments> args =
      abcd::Arguments::Parse({argv + 2, argv + argc}, abcd::bench::kValued, {});
  if (!args.ok()) {
    std::cerr << "abcd-bench: " << args.status().message() << "\n" << abcd::bench::kUsage;
    return 2;
  }
  absl::StatusOr<int> rc = abcd::bench::Run(argv[1], *args);
  if (!rc.ok()) {
    std::cerr << "abcd-bench: " << rc.status().message() << "\n";
    return 1;
  }
  return *rc;
}
