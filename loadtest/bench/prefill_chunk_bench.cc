// One prompt chunk deep in a long prompt: what continuous batching pays each time it serves the
// next chunk of a long softmax prompt.
//
// Model: each model is prefilled to P tokens (untimed, 512-token chunks), then a chunk of
// `chunk` more prompt tokens (positions P .. P + chunk - 1) is timed in one Decode call on a
// fork of that sequence (a fresh fork each round, its cache grown beforehand: the chunk always
// starts at P).
// Kernel: SoftmaxReadCausalRun alone for one key/value head of the same chunk, over random
// rows of the model's shape (head_dim 64 of a 4-head row, one thread), next to the same queries
// read row by row (SoftmaxReadHead each); with --weight_formats bf16-dot also
// SoftmaxReadCausalRunBf16Products.
// --weight_formats: one model run per format as in `decode` ("bf16-dot": bf16 weights and
// bf16 products, cpu::LinearProducts::kBf16); default, the checkpoint's own.
#include <algorithm>
#include <iostream>
#include <limits>
#include <random>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/attention/softmax_read.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/matmul.h"
#include "engine/ops/packed_matrix.h"
#include "engine/runtime/engine_flags.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

constexpr int64_t kSetupChunk = 512;

absl::Status Feed(const Model& model, CpuContext& ctx, StatePool& pool, SequenceId id,
                  const std::vector<int32_t>& tokens, int64_t begin, int64_t end) {
  std::vector<float> logits;
  std::vector<DecodeRow> rows;
  for (int64_t t = begin; t < end; ++t) {
    rows.push_back({id, tokens[static_cast<size_t>(t)], t + 1 == end});
  }
  return model.Decode(ctx, rows, pool, &logits);
}

// Median and minimum of `rounds` timings of `run`, after one untimed call.
template <typename Run>
absl::StatusOr<std::pair<double, double>> Time(int rounds, const Run& run) {
  std::vector<double> times;
  for (int r = 0; r <= rounds; ++r) {
    const auto start = BenchClock::now();
    ABCD_RETURN_IF_ERROR(run());
    if (r > 0) times.push_back(Seconds(BenchClock::now() - start));
  }
  return std::pair{Median(times), *std::min_element(times.begin(), times.end())};
}

// How a chunk's queries are read: "rows" one at a time over every row they may see (what the
// engine does for runs shorter than kSoftmaxBlockedRunRows), "fp32" as a causal run, "bf16" as a
// causal run with bf16 products.
enum class KernelPath { kRows, kFp32, kBf16 };

template <typename T>
void KernelRun(const std::vector<float>& q, const std::vector<T>& keys,
               const std::vector<T>& values, int64_t position, int64_t rows, int64_t stride,
               int head_dim, KernelPath path, std::vector<float>& out) {
  if (path == KernelPath::kRows) {
    for (int64_t i = 0; i < rows; ++i) {
      SoftmaxReadHead(q.data() + i * head_dim, keys.data(), values.data(), position + i + 1, stride,
                      head_dim, out.data() + i * head_dim);
    }
    return;
  }
  const bool bf16_products = path == KernelPath::kBf16;
  if constexpr (std::is_same_v<T, uint16_t>) {
    if (bf16_products) {
      SoftmaxReadCausalRunBf16Products(q.data(), head_dim, 1, keys.data(), values.data(), position,
                                       rows, stride, head_dim, out.data(), head_dim);
      return;
    }
  }
  SoftmaxReadCausalRun(q.data(), head_dim, 1, keys.data(), values.data(), position, rows, stride,
                       head_dim, out.data(), head_dim);
}

}  // namespace

absl::StatusOr<nlohmann::json> RunPrefillChunk(const PrefillChunkOptions& options) {
  nlohmann::json out;
  out["contexts"] = options.contexts;
  out["chunk"] = options.chunk;
  out["rounds"] = options.rounds;
  out["threads"] = options.threads;
  out["kv_cache"] = KvFormatName(options.kv_cache_format);
  out["kernel"] = nlohmann::json::array();
  out["model"] = nlohmann::json::array();
  const int64_t chunk = options.chunk;

  // "bf16-dot": bf16 weights and bf16 products (cpu::LinearProducts::kBf16): the model's
  // projections and its softmax prompt runs over a bf16 cache.
  const bool bf16_dot = std::find(options.weight_formats.begin(), options.weight_formats.end(),
                                  "bf16-dot") != options.weight_formats.end();
  if (bf16_dot && !cpu::Bf16ProductsSupported()) {
    return absl::FailedPreconditionError(
        "--weight_formats bf16-dot: this CPU has no AVX512_BF16 dot products");
  }
  if (bf16_dot && options.kv_cache_format != KvFormat::kBf16) {
    return absl::InvalidArgumentError("--weight_formats bf16-dot needs --kv_cache_format bf16");
  }

  // Kernel: one head of 64 in a 4-head row, one thread; with bf16-dot, the bf16-products kernel
  // on the same rows after the fp32 one.
  constexpr int kHeadDim = 64;
  constexpr int64_t kStride = 4 * kHeadDim;
  std::cout << absl::StrFormat(
      "== SoftmaxReadCausalRun alone: %d query rows from position P, head_dim %d, row stride %d, "
      "%s rows, one thread (median / min of %d) ==\n",
      chunk, kHeadDim, kStride, KvFormatName(options.kv_cache_format), options.rounds);
  std::cout << absl::StrFormat("%8s %9s %12s %12s %14s\n", "P", "products", "median ms", "min ms",
                               "ns/attended key");
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int64_t p : options.contexts) {
    const int64_t total = p + chunk;
    std::vector<float> q(static_cast<size_t>(chunk * kHeadDim)), o(q.size());
    for (float& x : q) x = normal(rng) * 0.125f;
    std::vector<float> k32(static_cast<size_t>(total * kStride)), v32(k32.size());
    for (float& x : k32) x = normal(rng);
    for (float& x : v32) x = normal(rng);
    const double attended = static_cast<double>(chunk) * static_cast<double>(p) +
                            static_cast<double>(chunk) * static_cast<double>(chunk + 1) / 2;
    for (const KernelPath path : {KernelPath::kRows, KernelPath::kFp32, KernelPath::kBf16}) {
      if (path == KernelPath::kBf16 && !bf16_dot) break;
      auto timed = [&](const auto& keys, const auto& values) {
        return Time(options.rounds, [&]() {
          KernelRun(q, keys, values, p, chunk, kStride, kHeadDim, path, o);
          return absl::OkStatus();
        });
      };
      std::pair<double, double> t;
      if (options.kv_cache_format == KvFormat::kF32) {
        ABCD_ASSIGN_OR_RETURN(t, timed(k32, v32));
      } else if (options.kv_cache_format == KvFormat::kBf16) {
        std::vector<uint16_t> k(k32.size()), v(v32.size());
        for (size_t i = 0; i < k.size(); ++i)
          k[i] = FloatToBf16(k32[i]), v[i] = FloatToBf16(v32[i]);
        ABCD_ASSIGN_OR_RETURN(t, timed(k, v));
      } else {
        std::vector<F16> k(k32.size()), v(v32.size());
        for (size_t i = 0; i < k.size(); ++i)
          k[i] = {FloatToHalf(k32[i])}, v[i] = {FloatToHalf(v32[i])};
        ABCD_ASSIGN_OR_RETURN(t, timed(k, v));
      }
      const char* products = path == KernelPath::kRows   ? "rows"
                             : path == KernelPath::kFp32 ? "fp32"
                                                         : "bf16";
      std::cout << absl::StrFormat("%8d %9s %12.3f %12.3f %14.3f\n", p, products, t.first * 1e3,
                                   t.second * 1e3, t.first / attended * 1e9)
                << std::flush;
      out["kernel"].push_back({{"context", p},
                               {"products", products},
                               {"median_ms", t.first * 1e3},
                               {"min_ms", t.second * 1e3}});
    }
  }

  CpuContext ctx(options.threads);
  CpuContext bf16_ctx(options.threads, cpu::LinearProducts::kBf16);
  CpuContext int8_ctx(options.threads, cpu::LinearProducts::kInt8);
  std::vector<std::string> formats = options.weight_formats;
  if (formats.empty()) formats.push_back("");
  for (const std::string& dir : options.models) {
    for (const std::string& format_name : formats) {
      ModelLoadOptions load;
      load.kv_cache_format = options.kv_cache_format;
      const bool products = format_name == "bf16-dot";
      if (!format_name.empty()) {
        ABCD_ASSIGN_OR_RETURN(load.weight_format,
                              ParseWeightFormat(products ? "bf16" : format_name));
      }
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, load));
      cpu::LinearProducts resolved = cpu::LinearProducts::kBf16;
      if (!products) {
        ABCD_ASSIGN_OR_RETURN(resolved,
                              ResolveCpuCompute(options.cpu_compute, model->weight_format(),
                                                "--cpu_compute", dir, "--weight_formats"));
      }
      CpuContext& model_ctx = resolved == cpu::LinearProducts::kBf16   ? bf16_ctx
                              : resolved == cpu::LinearProducts::kInt8 ? int8_ctx
                                                                       : ctx;
      const std::string format_label = absl::StrCat(
          products ? format_name : std::string(WeightFormatName(model->weight_format())),
          !products && resolved == cpu::LinearProducts::kBf16 ? " (bf16 products)" : "");
      std::cout << absl::StrFormat(
          "\n== %s, %s weights: a %d-token prompt chunk at position P, whole model, %d thread(s), "
          "%s KV cache (median / min of %d, each on a fresh fork) ==\n",
          ModelLabel(dir), format_label, chunk, options.threads,
          KvFormatName(options.kv_cache_format), options.rounds);
      std::cout << absl::StrFormat("%8s %12s %12s %14s\n", "P", "median ms", "min ms", "setup s");
      for (int64_t p : options.contexts) {
        const std::vector<int32_t> tokens = Tokens(11, p + chunk, model->config().vocab_size);
        StatePool pool(model->state_layout(), kUnlimitedStateBytes);
        ABCD_ASSIGN_OR_RETURN(const SequenceId base, pool.Acquire());
        const auto setup_start = BenchClock::now();
        for (int64_t begin = 0; begin < p; begin += kSetupChunk) {
          ABCD_RETURN_IF_ERROR(
              Feed(*model, model_ctx, pool, base, tokens, begin, std::min(p, begin + kSetupChunk)));
        }
        const double setup = Seconds(BenchClock::now() - setup_start);
        std::vector<double> times;
        for (int r = 0; r <= options.rounds; ++r) {
          ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Fork(base));
          // A fork's cache holds exactly its rows; growing it would copy them all inside the
          // timed call, which a sequence growing chunk by chunk does only at each doubling.
          ABCD_RETURN_IF_ERROR(pool.ReserveTokens(id, p + chunk));
          const auto start = BenchClock::now();
          ABCD_RETURN_IF_ERROR(Feed(*model, model_ctx, pool, id, tokens, p, p + chunk));
          if (r > 0) times.push_back(Seconds(BenchClock::now() - start));
          pool.Release(id);
        }
        const double median = Median(times);
        const double min = *std::min_element(times.begin(), times.end());
        std::cout << absl::StrFormat("%8d %12.3f %12.3f %14.2f\n", p, median * 1e3, min * 1e3,
                                     setup)
                  << std::flush;
        out["model"].push_back({{"model", dir},
                                {"weight_format", format_label},
                                {"context", p},
                                {"median_ms", median * 1e3},
                                {"min_ms", min * 1e3},
                                {"setup_s", setup}});
      }
    }
  }
  return out;
}

}  // namespace abcd::bench
