// Decode tokens/s against batch size at several context lengths, next to two floors.
//
// For each model (in each requested weight format) and context C: one sequence is prefilled
// with C tokens, then forked into B identical sequences (a memcpy of the state; exact), and
// `steps` batched decode steps of all B are timed (after one untimed step). Logits are computed
// for every row, as serving needs them for sampling. Floors (issue 18):
//   read floor  the best time this machine takes to read exactly the step's bytes (weights +
//               batch x (2 x fixed state + KV cache)) once, with the engine's threads: a model that
//               fits the last-level cache is held to the cache's speed, as llama.cpp is;
//   DRAM floor  the same bytes at the 256 MiB memcpy bandwidth.
// Batches of 16 and more also print the GFLOP/s of the step's matrix products. A prefill table
// times one prompt of --prefill_tokens tokens next to the batch-1 decode rate.
#include <iostream>
#include <limits>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/matmul.h"
#include "engine/runtime/engine_flags.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

absl::Status Prefill(const Model& model, CpuContext& ctx, StatePool& pool, SequenceId id,
                     int64_t length) {
  const std::vector<int32_t> tokens = Tokens(11, length, model.config().vocab_size);
  std::vector<float> logits;
  for (int64_t start = 0; start < length; start += kPrefillChunkRows) {
    std::vector<DecodeRow> rows;
    for (int64_t t = start; t < std::min(length, start + kPrefillChunkRows); ++t) {
      rows.push_back({id, tokens[static_cast<size_t>(t)], t + 1 == length});
    }
    ABCD_RETURN_IF_ERROR(model.Decode(ctx, rows, pool, &logits));
  }
  return absl::OkStatus();
}

struct Point {
  double step_ms = 0;
  int64_t state_bytes = 0;
};

absl::StatusOr<Point> Measure(const Model& model, CpuContext& ctx, StatePool& pool, SequenceId base,
                              int64_t batch, int steps) {
  std::vector<SequenceId> ids;
  for (int64_t i = 0; i < batch; ++i) {
    ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Fork(base));
    ids.push_back(id);
  }
  Point p;
  ABCD_ASSIGN_OR_RETURN(p.state_bytes, pool.SequenceBytes(ids[0]));
  const std::vector<int32_t> tokens =
      Tokens(static_cast<uint64_t>(batch) * 977, batch * (steps + 1), model.config().vocab_size);
  std::vector<double> times;
  std::vector<float> logits;
  std::vector<DecodeRow> rows(static_cast<size_t>(batch));
  for (int s = 0; s <= steps; ++s) {
    for (int64_t i = 0; i < batch; ++i) {
      rows[static_cast<size_t>(i)] = {ids[static_cast<size_t>(i)],
                                      tokens[static_cast<size_t>(s * batch + i)], true};
    }
    logits.clear();
    const auto start = BenchClock::now();
    ABCD_RETURN_IF_ERROR(model.Decode(ctx, rows, pool, &logits));
    if (s > 0) times.push_back(Seconds(BenchClock::now() - start));  // step 0 warms up
  }
  for (SequenceId id : ids) pool.Release(id);
  p.step_ms = Median(times) * 1000;
  return p;
}

// Median time of prefilling `tokens` prompt tokens into a fresh sequence, in one Decode call.
absl::StatusOr<double> PrefillSeconds(const Model& model, CpuContext& ctx, int64_t tokens,
                                      int rounds) {
  std::vector<double> times;
  for (int r = 0; r < rounds + 1; ++r) {
    StatePool pool(model.state_layout(), kUnlimitedStateBytes);
    ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Acquire());
    const auto start = BenchClock::now();
    ABCD_RETURN_IF_ERROR(Prefill(model, ctx, pool, id, tokens));
    if (r > 0) times.push_back(Seconds(BenchClock::now() - start));
  }
  return Median(times);
}

struct Entry {
  std::unique_ptr<Model> model;
  std::string label;
  std::string base_label;  // the model without the format
  nlohmann::json json;
  std::unique_ptr<StatePool> pool;
  SequenceId base = 0;
  CpuContext* ctx = nullptr;  // the run's context, or its bf16-products twin ("bf16-dot")
};

}  // namespace

absl::StatusOr<nlohmann::json> RunDecode(const DecodeOptions& options) {
  CpuContext ctx(options.threads);
  // "bf16-dot": bf16 weights multiplied with bf16 products (cpu::LinearProducts::kBf16).
  CpuContext bf16_ctx(options.threads, cpu::LinearProducts::kBf16);
  // "int8-dot": int8 weights times 8-bit activations (W8A8, cpu::LinearProducts::kInt8).
  CpuContext int8_ctx(options.threads, cpu::LinearProducts::kInt8);
  nlohmann::json out;
  out["batches"] = options.batches;
  out["contexts"] = options.contexts;
  out["steps"] = options.steps;
  out["rounds"] = options.rounds;
  out["threads"] = options.threads;
  out["kv_cache"] = KvFormatName(options.kv_cache_format);
  out["kernel"] = cpu::LinearKernelName();
  out["cpu_compute"] = options.cpu_compute;
  out["bandwidth_gb_s"] = options.bandwidth.bytes_per_second / 1e9;
  // tokens/s by [context][batch][label], for the ratio tables.
  std::map<int64_t, std::map<int64_t, std::map<std::string, double>>> speed;
  std::vector<std::string> order;
  std::string softmax;  // label of the softmax model, the baseline
  std::vector<Entry> entries;
  std::vector<std::string> formats = options.weight_formats;
  if (formats.empty()) formats.push_back("");
  for (const std::string& dir : options.models) {
    for (const std::string& format_name : formats) {
      Entry e;
      ModelLoadOptions load;
      load.kv_cache_format = options.kv_cache_format;
      const bool bf16_dot = format_name == "bf16-dot";
      const bool int8_dot = format_name == "int8-dot";
      if (bf16_dot && !cpu::Bf16ProductsSupported()) {
        return absl::FailedPreconditionError(
            "--weight_formats bf16-dot: this CPU has no AVX512_BF16 dot products");
      }
      if (int8_dot && !cpu::W8A8Supported()) {
        return absl::FailedPreconditionError(
            "--weight_formats int8-dot: this CPU has no AVX-512 VNNI");
      }
      if (!format_name.empty()) {
        ABCD_ASSIGN_OR_RETURN(load.weight_format, ParseWeightFormat(bf16_dot   ? "bf16"
                                                                    : int8_dot ? "int8"
                                                                               : format_name));
      }
      ABCD_ASSIGN_OR_RETURN(e.model, Model::Load(dir, load));
      cpu::LinearProducts products = bf16_dot   ? cpu::LinearProducts::kBf16
                                     : int8_dot ? cpu::LinearProducts::kInt8
                                                : cpu::LinearProducts::kFloat32;
      if (!bf16_dot && !int8_dot) {
        ABCD_ASSIGN_OR_RETURN(products,
                              ResolveCpuCompute(options.cpu_compute, e.model->weight_format(),
                                                "--cpu_compute", dir, "--weight_formats"));
      }
      e.ctx = products == cpu::LinearProducts::kBf16   ? &bf16_ctx
              : products == cpu::LinearProducts::kInt8 ? &int8_ctx
                                                       : &ctx;
      e.base_label = ModelLabel(dir);
      const std::string format_label =
          bf16_dot || int8_dot ? format_name
                               : std::string(WeightFormatName(e.model->weight_format()));
      e.label = formats.size() > 1 ? absl::StrCat(e.base_label, "/", format_label) : e.base_label;
      order.push_back(e.label);
      if (AttentionName(*e.model) == "softmax" && softmax.empty()) softmax = e.label;
      e.json["model"] = dir;
      e.json["label"] = e.label;
      e.json["weight_format"] = format_label;
      e.json["products"] = products == cpu::LinearProducts::kBf16   ? "bf16"
                           : products == cpu::LinearProducts::kInt8 ? "int8"
                                                                    : "fp32";
      e.json["attention"] = AttentionName(*e.model);
      e.json["description"] = DescribeAttention(e.model->config().decoder_layers.front().attention);
      e.json["weight_bytes"] = e.model->weight_bytes();
      e.json["points"] = nlohmann::json::array();
      entries.push_back(std::move(e));
    }
  }
  std::cout << "== decode step time vs batch size (" << options.threads << " thread(s), "
            << (KvFormatName(options.kv_cache_format)) << " KV cache, " << cpu::LinearKernelName()
            << " kernels, --cpu_compute " << options.cpu_compute
            << "; read floor = (weights + batch * (2 * fixed state + KV cache)) "
            << "read once at this machine's speed for that size; DRAM floor = the same at "
            << absl::StrFormat("%.1f GB/s memcpy", options.bandwidth.bytes_per_second / 1e9)
            << "; median of " << options.rounds << " rounds of " << options.steps
            << " steps, models interleaved) ==\n";
  std::cout << absl::StrFormat("%7s %6s %-13s %10s %9s %9s %10s %9s %7s %9s %7s %8s\n", "context",
                               "batch", "model", "weights", "state/seq", "step ms", "tokens/s",
                               "read ms", "x read", "DRAM ms", "x DRAM", "GFLOP/s");
  std::map<int64_t, double> read_seconds;  // by bytes: measured once per size
  for (int64_t context : options.contexts) {
    for (Entry& e : entries) {
      e.pool = std::make_unique<StatePool>(e.model->state_layout(), kUnlimitedStateBytes);
      ABCD_ASSIGN_OR_RETURN(e.base, e.pool->Acquire());
      ABCD_RETURN_IF_ERROR(Prefill(*e.model, *e.ctx, *e.pool, e.base, context));
    }
    for (int64_t batch : options.batches) {
      // Round-robin over the models, so load from elsewhere on the machine hits all of them.
      std::vector<std::vector<double>> rounds(entries.size());
      std::vector<Point> points(entries.size());
      for (int r = 0; r < options.rounds; ++r) {
        for (size_t i = 0; i < entries.size(); ++i) {
          Entry& e = entries[i];
          ABCD_ASSIGN_OR_RETURN(points[i],
                                Measure(*e.model, *e.ctx, *e.pool, e.base, batch, options.steps));
          rounds[i].push_back(points[i].step_ms);
        }
      }
      for (size_t i = 0; i < entries.size(); ++i) {
        Entry& e = entries[i];
        const Point& p = points[i];
        const double step_ms = Median(rounds[i]);
        const double tokens_per_s = static_cast<double>(batch) / (step_ms / 1000);
        const int64_t step_state =
            StepStateBytes(p.state_bytes, e.model->state_layout().FixedBytes());
        const int64_t bytes = e.model->weight_bytes() + batch * step_state;
        if (!read_seconds.contains(bytes)) read_seconds[bytes] = ReadSeconds(bytes, ctx.pool());
        const double read_ms = read_seconds[bytes] * 1000;
        const double dram_ms =
            FloorSeconds(e.model->weight_bytes(), batch, step_state, options.bandwidth) * 1000;
        const double gflops = 2.0 * static_cast<double>(e.model->projection_macs_per_token()) *
                              static_cast<double>(batch) / (step_ms / 1000) / 1e9;
        speed[context][batch][e.label] = tokens_per_s;
        std::cout << absl::StrFormat(
                         "%7d %6d %-13s %10s %9s %9.3f %10.1f %9.3f %7.2f %9.3f %7.2f %8s\n",
                         context, batch, e.label, HumanBytes(e.model->weight_bytes()),
                         HumanBytes(p.state_bytes), step_ms, tokens_per_s, read_ms,
                         step_ms / read_ms, dram_ms, step_ms / dram_ms,
                         batch >= 16 ? absl::StrFormat("%.1f", gflops) : "-")
                  << std::flush;
        e.json["points"].push_back({{"context", context},
                                    {"batch", batch},
                                    {"state_bytes", p.state_bytes},
                                    {"step_ms", step_ms},
                                    {"step_ms_rounds", rounds[i]},
                                    {"tokens_per_s", tokens_per_s},
                                    {"read_floor_ms", read_ms},
                                    {"floor_ms", dram_ms},
                                    {"gflop_s", gflops}});
      }
    }
    for (Entry& e : entries) e.pool.reset();
  }

  auto ratio_table = [&](const std::string& title, auto baseline_of) {
    nlohmann::json table = nlohmann::json::array();
    std::cout << "\n== " << title << " ==\n" << absl::StrFormat("%-8s %6s", "context", "batch");
    for (const std::string& n : order) std::cout << absl::StrFormat(" %13s", n);
    std::cout << "\n";
    for (const auto& [context, by_batch] : speed) {
      for (const auto& [batch, by_name] : by_batch) {
        std::cout << absl::StrFormat("%-8d %6d", context, batch);
        nlohmann::json row = {{"context", context}, {"batch", batch}};
        for (const std::string& n : order) {
          const double ratio = by_name.at(n) / by_name.at(baseline_of(n));
          row[n] = ratio;
          std::cout << absl::StrFormat(" %12.2fx", ratio);
        }
        table.push_back(std::move(row));
        std::cout << "\n";
      }
    }
    return table;
  };
  if (!softmax.empty()) {
    out["speedup_vs_softmax"] =
        ratio_table("decode tokens/s relative to softmax (same size, context, batch)",
                    [&](const std::string&) { return softmax; });
  }
  if (formats.size() > 1) {
    std::map<std::string, std::string> first_format;  // base label -> label of its first format
    for (const Entry& e : entries) first_format.try_emplace(e.base_label, e.label);
    std::map<std::string, std::string> baseline;
    for (const Entry& e : entries) baseline[e.label] = first_format[e.base_label];
    out["speedup_vs_first_format"] =
        ratio_table(absl::StrCat("decode tokens/s relative to the same model in ", formats.front()),
                    [&](const std::string& n) { return baseline[n]; });
  }

  // The matrix products alone, per op kind, at the largest batch of 16 or more, against the
  // machine's sgemm peak with the same threads (issue 18 goal 3).
  int64_t gemm_batch = 0;
  for (int64_t b : options.batches) gemm_batch = std::max(gemm_batch, b);
  if (gemm_batch >= 16) {
    const double peak = SgemmPeakGflops(1024, options.threads);
    out["sgemm_peak_gflop_s"] = peak;
    nlohmann::json ops = nlohmann::json::array();
    std::cout << "\n== matrix products per op kind at batch " << gemm_batch << ", "
              << options.threads
              << " thread(s); fp32 peak = OpenBLAS sgemm 1024^3: " << absl::StrFormat("%.1f", peak)
              << " GFLOP/s ==\n"
              << absl::StrFormat("%-13s %-10s %12s %10s %10s %8s\n", "model", "op", "[out x in]",
                                 "ms", "GFLOP/s", "of peak");
    for (const Entry& e : entries) {
      const Model::Block& block = e.model->decoder().blocks.front();
      const std::vector<std::pair<std::string, const PackedMatrix*>> kinds = {
          {"qkv+extra", &block.self_attention->fused_matrix()},
          {"attn out", &block.self_attention->out_matrix()},
          {"ffn fc1", &block.fc1},
          {"ffn fc2", &block.fc2},
          {"vocab head", &e.model->head_matrix()}};
      for (const auto& [name, w] : kinds) {
        const std::vector<int32_t> seeds = Tokens(5, gemm_batch * w->in(), 1000);
        std::vector<float> x(seeds.size()), y(static_cast<size_t>(gemm_batch * w->out()));
        for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(seeds[i]) / 1000.0f - 0.5f;
        std::vector<double> times;
        for (int r = 0; r < 21; ++r) {
          const auto start = BenchClock::now();
          cpu::Linear(x.data(), gemm_batch, *w, nullptr, y.data(), *e.ctx);
          if (r > 0) times.push_back(Seconds(BenchClock::now() - start));
        }
        const double seconds = Median(times);
        const double gflops =
            2.0 * static_cast<double>(gemm_batch * w->out() * w->in()) / seconds / 1e9;
        std::cout << absl::StrFormat("%-13s %-10s %12s %10.3f %10.1f %7.0f%%\n", e.label, name,
                                     absl::StrCat(w->out(), " x ", w->in()), seconds * 1000, gflops,
                                     100 * gflops / peak);
        ops.push_back({{"label", e.label},
                       {"op", name},
                       {"out", w->out()},
                       {"in", w->in()},
                       {"batch", gemm_batch},
                       {"ms", seconds * 1000},
                       {"gflop_s", gflops}});
      }
    }
    out["ops"] = std::move(ops);
  }

  if (options.prefill_tokens > 0) {
    nlohmann::json prefill = nlohmann::json::array();
    const int64_t decode_context = options.contexts.front();
    std::cout << "\n== prefill: one prompt of " << options.prefill_tokens
              << " tokens in one pass, next to batch-1 decode at context " << decode_context
              << " (the first of --contexts) ==\n"
              << absl::StrFormat("%-13s %12s %16s %16s %8s\n", "model", "prefill ms",
                                 "prompt tokens/s", "decode tokens/s", "ratio");
    for (const Entry& e : entries) {
      ABCD_ASSIGN_OR_RETURN(
          const double seconds,
          PrefillSeconds(*e.model, *e.ctx, options.prefill_tokens, options.rounds));
      const double prompt_rate = static_cast<double>(options.prefill_tokens) / seconds;
      const auto& by_batch = speed[decode_context];
      const double decode_rate = by_batch.contains(1) ? by_batch.at(1).at(e.label) : 0.0;
      std::cout << absl::StrFormat("%-13s %12.2f %16.0f %16.0f %7.1fx\n", e.label, seconds * 1000,
                                   prompt_rate, decode_rate,
                                   decode_rate > 0 ? prompt_rate / decode_rate : 0.0);
      prefill.push_back({{"label", e.label},
                         {"prompt_tokens", options.prefill_tokens},
                         {"seconds", seconds},
                         {"prompt_tokens_per_s", prompt_rate},
                         {"decode_tokens_per_s_batch1", decode_rate}});
    }
    out["prefill"] = std::move(prefill);
  }
  nlohmann::json models = nlohmann::json::array();
  for (Entry& e : entries) models.push_back(std::move(e.json));
  out["models"] = std::move(models);
  std::cout << "\n";
  return out;
}

}  // namespace abcd::bench
