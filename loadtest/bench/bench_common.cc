#include "loadtest/bench/bench_common.h"

#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "engine/model/model_config.h"
#include "engine/ops/vector_clones.h"

namespace abcd::bench {

Bandwidth MeasureCopyBandwidth(int megabytes, int repeats) {
  Bandwidth result;
  result.buffer_bytes = int64_t{megabytes} << 20;
  result.repeats = repeats;
  const size_t n = static_cast<size_t>(result.buffer_bytes);
  std::vector<char> source(n), destination(n);
  std::memset(source.data(), 1, n);
  std::memset(destination.data(), 2, n);
  double best = 1e30;
  for (int i = 0; i < repeats; ++i) {
    const auto start = BenchClock::now();
    std::memcpy(destination.data(), source.data(), n);
    const double s = Seconds(BenchClock::now() - start);
    best = std::min(best, s);
    source[static_cast<size_t>(i) % n] = destination[n - 1];  // keep the copies observable
  }
  result.bytes_per_second = 2.0 * static_cast<double>(n) / best;
  return result;
}

namespace {

// Sum of n floats with 8 independent accumulators (vectorised per instruction set).
ABCD_VECTOR_CLONES float SumFloats(const float* p, int64_t n) {
  float acc[64] = {};
  int64_t i = 0;
  for (; i + 64 <= n; i += 64) {
    for (int j = 0; j < 64; ++j) acc[j] += p[i + j];
  }
  for (; i < n; ++i) acc[0] += p[i];
  float total = 0;
  for (float a : acc) total += a;
  return total;
}

}  // namespace

double ReadSeconds(int64_t bytes, ThreadPool& pool, int repeats) {
  const int64_t floats = std::max<int64_t>(16, bytes / 4);
  std::vector<float> buffer(static_cast<size_t>(floats), 1.0f);
  const int64_t tasks = pool.size();
  const int64_t per_task = (floats + tasks - 1) / tasks;
  std::vector<float> sums(static_cast<size_t>(tasks));
  double best = 1e30;
  for (int i = 0; i < repeats + 1; ++i) {
    const auto start = BenchClock::now();
    pool.ParallelFor(tasks, [&](int64_t t) {
      const int64_t first = t * per_task;
      sums[static_cast<size_t>(t)] = SumFloats(
          buffer.data() + first, std::max<int64_t>(0, std::min(per_task, floats - first)));
    });
    const double s = Seconds(BenchClock::now() - start);
    if (i > 0) best = std::min(best, s);  // the first pass brings the buffer in
    buffer[static_cast<size_t>(i) % buffer.size()] += sums[0] > 0 ? 0.0f : 1.0f;
  }
  return best;
}

double SgemmPeakGflops(int size, int threads) {
  const int previous = openblas_get_num_threads();
  openblas_set_num_threads(threads);
  const size_t n = static_cast<size_t>(size) * static_cast<size_t>(size);
  std::vector<float> a(n, 0.5f), b(n, 0.25f), c(n, 0.0f);
  double best = 1e30;
  for (int i = 0; i < 4; ++i) {
    const auto start = BenchClock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, size, size, size, 1.0f, a.data(), size,
                b.data(), size, 0.0f, c.data(), size);
    if (i > 0) best = std::min(best, Seconds(BenchClock::now() - start));
  }
  openblas_set_num_threads(previous);
  return 2.0 * size * static_cast<double>(size) * size / best / 1e9;
}

int64_t StepStateBytes(int64_t state_bytes, int64_t fixed_bytes) {
  return state_bytes + fixed_bytes;
}

double FloorSeconds(int64_t weight_bytes, int64_t batch, int64_t step_state_bytes,
                    const Bandwidth& bandwidth) {
  return static_cast<double>(weight_bytes + batch * step_state_bytes) / bandwidth.bytes_per_second;
}

std::vector<int32_t> Tokens(uint64_t seed, int64_t count, int vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> pick(4, std::max(4, vocab - 1));
  std::vector<int32_t> out(static_cast<size_t>(count));
  for (int32_t& t : out) t = pick(rng);
  return out;
}

double Seconds(BenchClock::duration d) { return std::chrono::duration<double>(d).count(); }

double Median(std::vector<double> values) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

std::string AttentionName(const Model& model) {
  const auto& layers = model.config().decoder_layers;
  if (layers.empty()) return "none";
  return std::string(AttentionTypeName(layers.front().attention.type));
}

std::string ModelLabel(const std::string& dir) {
  std::filesystem::path path = std::filesystem::path(dir).lexically_normal();
  if (path.filename().empty()) path = path.parent_path();
  return path.filename().string();
}

std::string HumanBytes(double b) {
  if (b >= 1 << 30) return absl::StrFormat("%.2f GiB", b / (1 << 30));
  if (b >= 1 << 20) return absl::StrFormat("%.2f MiB", b / (1 << 20));
  if (b >= 1 << 10) return absl::StrFormat("%.1f KiB", b / (1 << 10));
  return absl::StrFormat("%.0f B", b);
}

std::vector<std::string> SplitList(const std::string& text) {
  return absl::StrSplit(text, ',', absl::SkipEmpty());
}

absl::StatusOr<std::vector<int64_t>> ParseInts(const std::string& flag, const std::string& text) {
  std::vector<int64_t> out;
  for (const std::string& part : SplitList(text)) {
    int64_t v = 0;
    if (!absl::SimpleAtoi(part, &v) || v < 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, " must be a comma-separated list of positive integers"));
    }
    out.push_back(v);
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat("--", flag, " is empty"));
  return out;
}

void SetBlasThreads(int threads) {
  if (threads <= 0) return;
  openblas_set_num_threads(threads);
  // Servers this process starts (abcd-bench overhead) use the same count.
  setenv("OPENBLAS_NUM_THREADS", std::to_string(threads).c_str(), 1);
}

int BlasThreads() { return openblas_get_num_threads(); }

nlohmann::json MachineInfo() {
  nlohmann::json j;
  std::ifstream cpuinfo("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpuinfo, line)) {
    if (absl::StartsWith(line, "model name")) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) {
        j["cpu"] = std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
      }
      break;
    }
  }
  j["cpus"] = static_cast<int64_t>(sysconf(_SC_NPROCESSORS_ONLN));
  j["blas_threads"] = BlasThreads();
  return j;
}

}  // namespace abcd::bench
