// abcd-bench linear: cpu::Linear alone, per weight format, matrix shape and row count. A decode
// step of B sequences (or a speculative verify of k + 1 rows, or a prompt chunk) is made of such
// products; timing them alone, in one process with the formats and shapes interleaved, sees
// kernel changes that whole steps hide in the machine's noise.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "engine/ops/matmul.h"
#include "engine/ops/packed_matrix.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {

absl::StatusOr<std::vector<LinearShape>> ParseLinearShapes(const std::string& list) {
  std::vector<LinearShape> shapes;
  for (absl::string_view item : absl::StrSplit(list, ',', absl::SkipEmpty())) {
    const std::vector<absl::string_view> sides = absl::StrSplit(item, 'x');
    LinearShape shape;
    if (sides.size() != 2 || !absl::SimpleAtoi(sides[0], &shape.in) ||
        !absl::SimpleAtoi(sides[1], &shape.out) || shape.in < 1 || shape.out < 1 ||
        shape.in > 65536 || shape.out > 262144) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--shapes must be a list of INxOUT (in <= 65536, out <= 262144), got \"", item, "\""));
    }
    shapes.push_back(shape);
  }
  if (shapes.empty()) return absl::InvalidArgumentError("--shapes is empty");
  return shapes;
}

absl::StatusOr<nlohmann::json> RunLinear(const LinearOptions& options) {
  // "bf16-dot": bf16 weights with bf16 products (cpu::LinearProducts::kBf16).
  struct Variant {
    WeightFormat format;
    cpu::LinearProducts products;
    std::string name;
  };
  std::vector<Variant> formats;
  for (const std::string& name : options.weight_formats) {
    if (name == "bf16-dot") {
      if (!cpu::Bf16ProductsSupported()) {
        return absl::FailedPreconditionError(
            "--weight_formats bf16-dot: this CPU has no AVX512_BF16 dot products");
      }
      formats.push_back({WeightFormat::kBF16, cpu::LinearProducts::kBf16, name});
      continue;
    }
    if (name == "int8-dot") {  // int8 weights times 8-bit activations (W8A8)
      if (!cpu::W8A8Supported()) {
        return absl::FailedPreconditionError(
            "--weight_formats int8-dot: this CPU has no AVX-512 VNNI");
      }
      formats.push_back({WeightFormat::kInt8, cpu::LinearProducts::kInt8, name});
      continue;
    }
    absl::StatusOr<WeightFormat> format = ParseWeightFormat(name);
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--weight_formats: ", format.status().message()));
    }
    formats.push_back(
        {*format, cpu::LinearProducts::kFloat32, std::string(WeightFormatName(*format))});
  }
  int64_t max_rows = 0;
  for (const int64_t rows : options.rows) {
    if (rows < 1 || rows > 4096) return absl::InvalidArgumentError("--rows must be in [1, 4096]");
    max_rows = std::max(max_rows, rows);
  }
  if (formats.empty() || options.shapes.empty() || options.rows.empty()) {
    return absl::InvalidArgumentError("linear needs --weight_formats, --shapes and --rows");
  }
  if (options.threads < 1 || options.threads > 1024) {
    return absl::InvalidArgumentError("--threads must be in [1, 1024]");
  }
  ThreadPool pool(options.threads);
  ThreadPool* pool_or_null = options.threads > 1 ? &pool : nullptr;

  // The weights of every (format, shape), packed once; the activations and outputs shared.
  struct Case {
    Variant format;
    LinearShape shape;
    std::unique_ptr<PackedMatrix> weights;
    std::vector<std::vector<double>> seconds;  // per row count, one per round
  };
  std::vector<Case> cases;
  int64_t max_in = 0, max_out = 0;
  uint32_t seed = 1;
  for (const Variant& format : formats) {
    for (const LinearShape& shape : options.shapes) {
      std::vector<float> w(static_cast<size_t>(shape.in * shape.out));
      for (float& v : w) {
        seed = seed * 1664525u + 1013904223u;
        v = static_cast<float>((seed >> 8) & 0xFFFF) / 65536.0f - 0.5f;
      }
      cases.push_back({format, shape,
                       std::make_unique<PackedMatrix>(
                           PackedMatrix::Pack(w, shape.out, shape.in, format.format)),
                       std::vector<std::vector<double>>(options.rows.size())});
      max_in = std::max(max_in, shape.in);
      max_out = std::max(max_out, shape.out);
    }
  }
  std::vector<float> x(static_cast<size_t>(max_rows * max_in));
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  std::vector<float> y(static_cast<size_t>(max_rows * max_out));

  // Each measurement: calls repeated for at least `min_seconds`, the mean per call. Rounds
  // interleave every case, so a slow spell of the machine touches all of them alike.
  const auto measure = [&](const Case& c, int64_t rows) {
    const auto call = [&] {
      cpu::Linear(x.data(), rows, *c.weights, nullptr, y.data(), pool_or_null, c.format.products);
    };
    call();  // warm: weights and code in cache
    int64_t calls = 0;
    const BenchClock::time_point start = BenchClock::now();
    double elapsed = 0;
    do {
      for (int i = 0; i < 8; ++i) call();
      calls += 8;
      elapsed = Seconds(BenchClock::now() - start);
    } while (elapsed < options.min_seconds);
    return elapsed / static_cast<double>(calls);
  };
  for (int round = 0; round < options.rounds; ++round) {
    for (Case& c : cases) {
      for (size_t r = 0; r < options.rows.size(); ++r) {
        c.seconds[r].push_back(measure(c, options.rows[r]));
      }
    }
  }

  std::cout << absl::StrFormat(
      "== cpu::Linear alone (%d thread(s), %s kernels): y = x W^T, W [out, in]; median of %d "
      "rounds (each call repeated for %.2f s, rounds interleaved) ==\n",
      options.threads, cpu::LinearKernelName(), options.rounds, options.min_seconds);
  std::cout << "format    in x out        rows      us/call    us/row   GFLOP/s   x us/row at "
               "the most rows\n";
  const size_t most = static_cast<size_t>(
      std::max_element(options.rows.begin(), options.rows.end()) - options.rows.begin());
  nlohmann::json out = nlohmann::json::array();
  for (const Case& c : cases) {
    const double best_per_row = Median(c.seconds[most]) / static_cast<double>(options.rows[most]);
    for (size_t r = 0; r < options.rows.size(); ++r) {
      const int64_t rows = options.rows[r];
      const double seconds = Median(c.seconds[r]);
      const double gflops =
          2.0 * static_cast<double>(rows * c.shape.in * c.shape.out) / seconds / 1e9;
      const double per_row = seconds / static_cast<double>(rows);
      std::cout << absl::StrFormat("%-8s  %5d x %-6d  %5d  %11.2f  %8.2f  %8.1f  %8.2f\n",
                                   c.format.name, c.shape.in, c.shape.out, rows, seconds * 1e6,
                                   per_row * 1e6, gflops, per_row / best_per_row);
      out.push_back({{"format", c.format.name},
                     {"in", c.shape.in},
                     {"out", c.shape.out},
                     {"rows", rows},
                     {"seconds", seconds},
                     {"rounds", c.seconds[r]},
                     {"gflops", gflops}});
    }
  }
  std::cout << "\n";
  return nlohmann::json{{"threads", options.threads},
                        {"kernels", cpu::LinearKernelName()},
                        {"results", std::move(out)}};
}

}  // namespace abcd::bench
