// Memory per sequence against generated length, for every layer type.
#include <iostream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

// Bytes the pool charges one sequence that holds `length` tokens.
absl::StatusOr<int64_t> PoolBytes(const StateLayout& layout, int64_t length) {
  StatePool pool(layout, kUnlimitedStateBytes);
  ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Acquire());
  ABCD_RETURN_IF_ERROR(pool.ReserveTokens(id, length));
  return pool.SequenceBytes(id);
}

// Decodes `length` real tokens into one sequence; returns the bytes charged afterwards.
absl::StatusOr<int64_t> DecodedBytes(const Model& model, int64_t length) {
  StatePool pool(model.state_layout(), kUnlimitedStateBytes);
  ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Acquire());
  const std::vector<int32_t> tokens = Tokens(7, length, model.config().vocab_size);
  std::vector<float> logits;
  for (int64_t start = 0; start < length; start += kPrefillChunkRows) {
    std::vector<DecodeRow> rows;
    for (int64_t t = start; t < std::min(length, start + kPrefillChunkRows); ++t) {
      rows.push_back({id, tokens[static_cast<size_t>(t)], t + 1 == length});
    }
    ABCD_RETURN_IF_ERROR(model.Decode(rows, pool, &logits));
  }
  return pool.SequenceBytes(id);
}

}  // namespace

absl::StatusOr<nlohmann::json> RunMemory(const MemoryOptions& options) {
  nlohmann::json out;
  out["lengths"] = options.lengths;
  out["confirm_length"] = options.confirm_length;
  nlohmann::json models = nlohmann::json::array();
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> table;
  for (const std::string& dir : options.models) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir));
    const StateLayout& layout = model->state_layout();
    nlohmann::json m;
    m["model"] = dir;
    m["label"] = ModelLabel(dir);
    m["attention"] = AttentionName(*model);
    m["description"] = DescribeAttention(model->config().decoder_layers.front().attention);
    m["fixed_bytes"] = layout.FixedBytes();
    m["kv_bytes_per_token"] = layout.kv_is_cross.empty() ? 0 : layout.KvBytesPerToken();
    m["kv_layers"] = static_cast<int64_t>(layout.kv_is_cross.size());
    m["weight_bytes"] = model->weight_bytes();
    std::vector<int64_t> bytes;
    for (int64_t length : options.lengths) {
      ABCD_ASSIGN_OR_RETURN(const int64_t b, PoolBytes(layout, length));
      bytes.push_back(b);
    }
    m["bytes"] = bytes;
    // Confirm the arithmetic with a real decode.
    const auto start = BenchClock::now();
    ABCD_ASSIGN_OR_RETURN(const int64_t decoded, DecodedBytes(*model, options.confirm_length));
    ABCD_ASSIGN_OR_RETURN(const int64_t predicted, PoolBytes(layout, options.confirm_length));
    m["confirm"] = {{"length", options.confirm_length},
                    {"decoded_bytes", decoded},
                    {"pool_bytes", predicted},
                    {"match", decoded == predicted},
                    {"seconds", Seconds(BenchClock::now() - start)}};
    names.push_back(m["label"].get<std::string>());
    table.push_back(bytes);
    models.push_back(std::move(m));
  }
  out["models"] = models;

  std::cout << "== memory per sequence (attention state bytes charged by the StatePool) ==\n";
  std::cout << absl::StrFormat("%-10s", "tokens");
  for (const std::string& n : names) std::cout << absl::StrFormat(" %12s", n);
  std::cout << "\n";
  for (size_t i = 0; i < options.lengths.size(); ++i) {
    std::cout << absl::StrFormat("%-10d", options.lengths[i]);
    for (const auto& column : table) std::cout << absl::StrFormat(" %12s", HumanBytes(column[i]));
    std::cout << "\n";
  }
  std::cout << absl::StrFormat("%-10s", "growth");
  for (const auto& column : table) {
    std::cout << absl::StrFormat(
        " %11.1fx", static_cast<double>(column.back()) / static_cast<double>(column[0]));
  }
  std::cout << "   (" << options.lengths.back() << " vs " << options.lengths.front()
            << " tokens)\n";
  for (const nlohmann::json& m : models) {
    std::cout << absl::StrFormat(
        "confirm %-8s decoded %6d tokens: %s, pool arithmetic %s -> %s (%.1f s)\n",
        m["label"].get<std::string>(), options.confirm_length,
        HumanBytes(m["confirm"]["decoded_bytes"].get<double>()),
        HumanBytes(m["confirm"]["pool_bytes"].get<double>()),
        m["confirm"]["match"].get<bool>() ? "match" : "MISMATCH",
        m["confirm"]["seconds"].get<double>());
  }
  std::cout << "\n";
  return out;
}

}  // namespace abcd::bench
