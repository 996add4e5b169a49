// Decode tokens/s against batch size at several context lengths, next to the bandwidth floor.
//
// For each model and context C: one sequence is prefilled with C tokens, then forked into B
// identical sequences (a memcpy of the state; exact), and `steps` batched decode steps of all B
// are timed (after one untimed step). Logits are computed for every row, as serving needs them
// for sampling.
#include <iostream>
#include <limits>
#include <map>
#include <memory>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

constexpr int64_t kUnlimited = std::numeric_limits<int64_t>::max() / 4;
constexpr int64_t kChunk = 512;

absl::Status Prefill(const Model& model, StatePool& pool, SequenceId id, int64_t length) {
  const std::vector<int32_t> tokens = Tokens(11, length, model.config().vocab_size);
  std::vector<float> logits;
  for (int64_t start = 0; start < length; start += kChunk) {
    std::vector<DecodeRow> rows;
    for (int64_t t = start; t < std::min(length, start + kChunk); ++t) {
      rows.push_back({id, tokens[static_cast<size_t>(t)], false});
    }
    ABCD_RETURN_IF_ERROR(model.Decode(rows, pool, &logits));
  }
  return absl::OkStatus();
}

struct Point {
  double step_ms = 0;
  double tokens_per_s = 0;
  double floor_ms = 0;
  int64_t state_bytes = 0;
};

absl::StatusOr<Point> Measure(const Model& model, StatePool& pool, SequenceId base, int64_t batch,
                              int steps, const Bandwidth& bandwidth) {
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
    ABCD_RETURN_IF_ERROR(model.Decode(rows, pool, &logits));
    if (s > 0) times.push_back(Seconds(BenchClock::now() - start));  // step 0 warms up
  }
  for (SequenceId id : ids) pool.Release(id);
  p.step_ms = Median(times) * 1000;
  p.tokens_per_s = static_cast<double>(batch) / (p.step_ms / 1000);
  p.floor_ms = FloorSeconds(model.weight_bytes(), batch, p.state_bytes, bandwidth) * 1000;
  return p;
}

}  // namespace

absl::StatusOr<nlohmann::json> RunDecode(const DecodeOptions& options) {
  nlohmann::json out;
  out["batches"] = options.batches;
  out["contexts"] = options.contexts;
  out["steps"] = options.steps;
  out["rounds"] = options.rounds;
  out["bandwidth_gb_s"] = options.bandwidth.bytes_per_second / 1e9;
  // tokens/s by [context][batch][label], for the speed-up table.
  std::map<int64_t, std::map<int64_t, std::map<std::string, double>>> speed;
  std::vector<std::string> order;
  std::string softmax;  // label of the softmax model, the baseline
  struct Entry {
    std::unique_ptr<Model> model;
    std::string label;
    nlohmann::json json;
    std::unique_ptr<StatePool> pool;
    SequenceId base = 0;
  };
  std::vector<Entry> entries;
  for (const std::string& dir : options.models) {
    Entry e;
    ABCD_ASSIGN_OR_RETURN(e.model, Model::Load(dir));
    e.label = ModelLabel(dir);
    order.push_back(e.label);
    if (AttentionName(*e.model) == "softmax" && softmax.empty()) softmax = e.label;
    e.json["model"] = dir;
    e.json["label"] = e.label;
    e.json["attention"] = AttentionName(*e.model);
    e.json["description"] = DescribeAttention(e.model->config().decoder_layers.front().attention);
    e.json["weight_bytes"] = e.model->weight_bytes();
    e.json["points"] = nlohmann::json::array();
    entries.push_back(std::move(e));
  }
  std::cout << "== decode step time vs batch size (floor = (weights + 2 * batch * state) / "
            << absl::StrFormat("%.1f GB/s copy bandwidth", options.bandwidth.bytes_per_second / 1e9)
            << "; median of " << options.rounds << " rounds of " << options.steps
            << " steps, models interleaved) ==\n";
  std::cout << absl::StrFormat("%7s %6s %-8s %12s %10s %12s %10s %8s\n", "context", "batch",
                               "model", "state/seq", "step ms", "tokens/s", "floor ms", "x floor");
  for (int64_t context : options.contexts) {
    for (Entry& e : entries) {
      e.pool = std::make_unique<StatePool>(e.model->state_layout(), kUnlimited);
      ABCD_ASSIGN_OR_RETURN(e.base, e.pool->Acquire());
      ABCD_RETURN_IF_ERROR(Prefill(*e.model, *e.pool, e.base, context));
    }
    for (int64_t batch : options.batches) {
      // Round-robin over the models, so load from elsewhere on the machine hits all of them.
      std::vector<std::vector<double>> rounds(entries.size());
      std::vector<Point> points(entries.size());
      for (int r = 0; r < options.rounds; ++r) {
        for (size_t i = 0; i < entries.size(); ++i) {
          Entry& e = entries[i];
          ABCD_ASSIGN_OR_RETURN(points[i], Measure(*e.model, *e.pool, e.base, batch, options.steps,
                                                   options.bandwidth));
          rounds[i].push_back(points[i].step_ms);
        }
      }
      for (size_t i = 0; i < entries.size(); ++i) {
        Entry& e = entries[i];
        Point p = points[i];
        p.step_ms = Median(rounds[i]);
        p.tokens_per_s = static_cast<double>(batch) / (p.step_ms / 1000);
        speed[context][batch][e.label] = p.tokens_per_s;
        std::cout << absl::StrFormat("%7d %6d %-8s %12s %10.3f %12.1f %10.3f %8.2f\n", context,
                                     batch, e.label, HumanBytes(p.state_bytes), p.step_ms,
                                     p.tokens_per_s, p.floor_ms, p.step_ms / p.floor_ms)
                  << std::flush;
        e.json["points"].push_back({{"context", context},
                                    {"batch", batch},
                                    {"state_bytes", p.state_bytes},
                                    {"step_ms", p.step_ms},
                                    {"step_ms_rounds", rounds[i]},
                                    {"tokens_per_s", p.tokens_per_s},
                                    {"floor_ms", p.floor_ms}});
      }
    }
    for (Entry& e : entries) e.pool.reset();
  }
  nlohmann::json models = nlohmann::json::array();
  for (Entry& e : entries) models.push_back(std::move(e.json));
  out["models"] = std::move(models);

  // Speed-up of every type over softmax (same size, same context, same batch).
  if (!softmax.empty()) {
    nlohmann::json speedups = nlohmann::json::array();
    std::cout << "\n== decode tokens/s relative to softmax (same size, context, batch) ==\n";
    std::cout << absl::StrFormat("%-8s %6s", "context", "batch");
    for (const std::string& n : order) std::cout << absl::StrFormat(" %9s", n);
    std::cout << "\n";
    for (const auto& [context, by_batch] : speed) {
      for (const auto& [batch, by_name] : by_batch) {
        std::cout << absl::StrFormat("%-8d %6d", context, batch);
        const double base = by_name.at(softmax);
        nlohmann::json row = {{"context", context}, {"batch", batch}};
        for (const std::string& n : order) {
          const double ratio = by_name.at(n) / base;
          row[n] = ratio;
          std::cout << absl::StrFormat(" %8.2fx", ratio);
        }
        speedups.push_back(std::move(row));
        std::cout << "\n";
      }
    }
    out["speedup_vs_softmax"] = std::move(speedups);
  }
  std::cout << "\n";
  return out;
}

}  // namespace abcd::bench
