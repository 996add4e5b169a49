// The abcd-bench benchmarks. Each prints a human table to stdout and returns its numbers as
// JSON (abcd-bench --json FILE writes them; loadtest/plot.py draws them).
//
//   memory     bytes of attention state per sequence against generated length, per layer type:
//              StatePool arithmetic up to 32768 tokens, confirmed by a real decode to a shorter
//              length.
//   decode     decode step time and tokens/s against batch size at several context lengths, each
//              next to its memory-bandwidth floor; speed-up of each bounded type over softmax.
//   seq2seq    the seeds' decode-speed figure (issue 15): greedy tokens/s and state bytes per
//              sequence of encoder-decoder models against source = target length, with a
//              measured step breakdown and the seeds' ratios (seq2seq_bench.cc).
//   linear     cpu::Linear alone per weight format, shape and row count (linear_bench.cc).
//   reference  the engine against the PyTorch reference (loadtest/bench_reference.py) on the
//              same checkpoint and tokens, both recurrent decode, in one run.
//   state      sessions, the prefix cache and n choices (state_bench.cc), in-process.
//   prefill_chunk  one prompt chunk deep in a long prompt (prefill_chunk_bench.cc): the whole
//              model's time for the chunk at position P, and the softmax causal-run kernel's.
//   overhead   one greedy workload through the in-process Executor, then through abcd-server
//              over gRPC and HTTP/SSE.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/state/kv_cache.h"
#include "loadtest/bench/bench_common.h"
#include "nlohmann/json.hpp"

namespace abcd::bench {

// A state budget no benchmark reaches (the pools are sized by what the runs hold).
inline constexpr int64_t kUnlimitedStateBytes = std::numeric_limits<int64_t>::max() / 4;
// Prompt rows per Decode call, as the server's default prefill chunk.
inline constexpr int64_t kPrefillChunkRows = 512;

struct MemoryOptions {
  std::vector<std::string> models;
  std::vector<int64_t> lengths;  // generated tokens
  int64_t confirm_length = 2048;
};
absl::StatusOr<nlohmann::json> RunMemory(const MemoryOptions& options);

struct DecodeOptions {
  std::vector<std::string> models;
  // Each model is loaded once per format ("f32", "bf16", "f16", "int8"); empty: the
  // checkpoint's own format only.
  std::vector<std::string> weight_formats;
  std::vector<int64_t> batches;
  std::vector<int64_t> contexts;
  int steps = 8;    // timed decode steps per measurement (median taken)
  int rounds = 3;   // measurements per point, the models interleaved (median taken)
  int threads = 1;  // the engine's CpuContext threads
  KvFormat kv_cache_format = KvFormat::kBf16;  // softmax KV cache rows (the server's default)
  int64_t prefill_tokens = 512;                // prompt length of the prefill table (0: no table)
  Bandwidth bandwidth;                         // the DRAM floor (256 MiB memcpy)
  // --cpu_compute for the entries without "-dot" (ResolveCpuCompute, engine/runtime/
  // engine_flags.h): "auto" (the server's default: bf16 products for bf16 weights where the
  // CPU has AVX512_BF16) or "fp32" (exact); "bf16-dot" / "int8-dot" entries force theirs.
  std::string cpu_compute = "auto";
};
absl::StatusOr<nlohmann::json> RunDecode(const DecodeOptions& options);

// cpu::Linear alone (linear_bench.cc): y = x W^T for each weight format x shape x row count.
struct LinearShape {
  int64_t in = 0;
  int64_t out = 0;
};
// "1024x256,256x8000" (in x out); INVALID_ARGUMENT naming --shapes otherwise.
absl::StatusOr<std::vector<LinearShape>> ParseLinearShapes(const std::string& list);
struct LinearOptions {
  std::vector<std::string> weight_formats;  // "f32", "bf16", "f16", "int8"
  std::vector<LinearShape> shapes;
  std::vector<int64_t> rows;  // rows of x per call
  int rounds = 5;             // measurements per point, every point interleaved (median taken)
  double min_seconds = 0.05;  // each measurement repeats the call for at least this long
  int threads = 1;            // a ThreadPool of this many threads (1: the caller's thread)
};
absl::StatusOr<nlohmann::json> RunLinear(const LinearOptions& options);

struct Seq2seqOptions {
  std::vector<std::string> models;  // encoder-decoder model directories
  std::vector<int64_t> lengths;     // source length = target length before the timed steps
  int64_t batch = 16;               // sequences decoded per step (forks of one prefilled one)
  int steps = 4;                    // timed greedy steps per measurement (median taken)
  int rounds = 3;                   // measurements per point, the models interleaved (median)
  int threads = 1;                  // the engine's CpuContext threads
  KvFormat kv_cache_format = KvFormat::kBf16;  // softmax KV cache rows (the server's default)
};
absl::StatusOr<nlohmann::json> RunSeq2seq(const Seq2seqOptions& options);

// One timed pass of an engine over `rows` (B sequences x `steps` tokens, from an empty state):
// mean step time, argmax of row 0 after every step, row 0's last logits.
struct ReferencePass {
  double step_ms = 0;
  std::vector<int> argmax;
  std::vector<float> last_logits;
  int64_t state_bytes = 0;  // per sequence after the last step (softmax grows with every step)
};
using EnginePassFunction = std::function<absl::StatusOr<ReferencePass>(
    const Model& model, const std::vector<std::vector<int32_t>>& rows, int steps)>;

struct ReferenceOptions {
  std::vector<std::string> models;
  std::vector<int64_t> batches;
  int steps = 64;  // decode steps per pass (from an empty state)
  int repeats = 3;
  int threads = 1;
  Bandwidth bandwidth;  // for the floor column
  std::string python = "/usr/bin/python3";
  std::string script;              // loadtest/bench_reference.py
  std::string script_args;         // extra arguments, e.g. "--device cuda --dtype bfloat16"
  EnginePassFunction engine_pass;  // default: the CPU engine (Model::Decode)
};
absl::StatusOr<nlohmann::json> RunReference(const ReferenceOptions& options);

struct PrefillChunkOptions {
  std::vector<std::string> models;
  std::vector<int64_t> contexts;  // P: cached prompt tokens before the timed chunk
  int64_t chunk = 256;            // rows of the timed chunk
  int rounds = 5;                 // timings per point (median and minimum)
  int threads = 2;                // the engine's CpuContext threads (the server's default)
  KvFormat kv_cache_format = KvFormat::kBf16;
  // As DecodeOptions::weight_formats (f32, bf16, bf16-dot, f16, int8); empty: the checkpoint's.
  std::vector<std::string> weight_formats;
  std::string cpu_compute = "auto";  // as DecodeOptions::cpu_compute
};
absl::StatusOr<nlohmann::json> RunPrefillChunk(const PrefillChunkOptions& options);

struct OverheadOptions {
  std::string model;
  std::string server;   // abcd-server binary
  std::string prompts;  // JSONL prompts file
  int requests = 48;
  int concurrency = 8;
  int max_tokens = 32;
  int warmup = 4;
  int rounds = 3;  // the paths take turns; each reports its median round
};
absl::StatusOr<nlohmann::json> RunOverhead(const OverheadOptions& options);

struct StateOptions {
  std::vector<std::string> models;
  int threads = 1;
  int rounds = 3;  // each figure is the median of its rounds
  int turns = 16;  // multi-turn
  int turn_prompt_tokens = 32;
  int turn_tokens = 64;
  std::string session_store;  // "", "memory" or "redis://HOST:PORT[/DB]" (multi-turn sessions)
  int prefix_tokens = 1000;   // shared prefix
  int suffixes = 32;
  int suffix_tokens = 16;
  int in_flight = 8;
  int choices = 8;  // n
  int choice_prompt_tokens = 512;
  int choice_tokens = 32;
};
absl::StatusOr<nlohmann::json> RunState(const StateOptions& options);

}  // namespace abcd::bench
