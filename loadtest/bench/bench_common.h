// Shared pieces of abcd-bench: the memory-bandwidth probe behind every step-time floor
// (floor = (weight_bytes + batch * step_state_bytes) / bandwidth: a decode step reads the
// weights once, reads and writes each sequence's fixed state once, and reads its KV cache
// once, writing one row),
// deterministic token streams, model loading and small formatting helpers.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model.h"
#include "nlohmann/json.hpp"

namespace abcd::bench {

using BenchClock = std::chrono::steady_clock;

struct Bandwidth {
  double bytes_per_second = 0;  // (read + written bytes) / time of the best copy
  int64_t buffer_bytes = 0;
  int repeats = 0;
};
// Times memcpy of a `megabytes` MiB buffer (touched first) `repeats` times; keeps the best.
Bandwidth MeasureCopyBandwidth(int megabytes, int repeats);

// The read floor of issue 18: the best time to read a buffer of exactly `bytes` once (after
// it was read before, so a buffer that fits the last-level cache is read from there, as a
// model's weights are from one step to the next), split across `pool`'s threads, with the
// widest loads this CPU has. Best of `repeats`.
double ReadSeconds(int64_t bytes, ThreadPool& pool, int repeats = 15);

// This machine's fp32 matrix-product peak as a library reaches it: OpenBLAS sgemm of
// `size`^3 with `threads` threads, best of 3, in GFLOP/s.
double SgemmPeakGflops(int size, int threads);

// The bytes one sequence's decode step moves, of `state_bytes` held of which `fixed_bytes`
// are a bounded state (read and written: twice) and the rest a KV cache (read once).
int64_t StepStateBytes(int64_t state_bytes, int64_t fixed_bytes);

// Seconds the step needs at least if it only streams its bytes: the floor above.
double FloorSeconds(int64_t weight_bytes, int64_t batch, int64_t step_state_bytes,
                    const Bandwidth& bandwidth);

// `count` token ids in [4, vocab) from a fixed generator (ids 0..3 are the specials).
std::vector<int32_t> Tokens(uint64_t seed, int64_t count, int vocab);

double Seconds(BenchClock::duration d);
double Median(std::vector<double> values);

// Short name of a model directory's attention: "abc", "rfa", ... of its first decoder layer.
std::string AttentionName(const Model& model);
// A model directory's base name ("build/bench-models/abc/" -> "abc"), for table columns.
std::string ModelLabel(const std::string& dir);

std::string HumanBytes(double bytes);

// Comma-separated integers ("1,4,16"); INVALID_ARGUMENT naming `flag` otherwise.
absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& flag, const std::string& text);
std::vector<std::string> SplitList(const std::string& text);

// Sets the BLAS thread count of this process (OpenBLAS) and, through OPENBLAS_NUM_THREADS, of
// the servers it starts; `threads` <= 0 leaves both alone.
void SetBlasThreads(int threads);
int BlasThreads();

// lscpu's model name and the CPU count, for labelling results.
nlohmann::json MachineInfo();

}  // namespace abcd::bench
