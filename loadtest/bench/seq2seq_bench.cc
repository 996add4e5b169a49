// The seeds' decode-speed figure (ABC paper Fig. 1, thesis Fig. 4.2; issue 15) on this engine.
//
// For each encoder-decoder model and length L (source length = target length, as the seeds):
// one source of L tokens is encoded and one target prefilled with L tokens (untimed for the
// figure, reported), then forked into `batch` identical sequences (a copy of the state; exact)
// and `steps` greedy decode steps of all of them at position L are timed (after one untimed
// step; logits for every row, as greedy decoding needs them). Median of the steps, median of
// the rounds, the models taking turns round by round. The state bytes per sequence are the
// pool's, split into self attention and cross attention (the encoder memory).
// The step breakdown times each decoder sublayer on its own over the same forked batch, in
// step order (layer by layer, so states and weights pass through the caches as in a step):
// self attention (and, apart, the time its q|k|v|extra and output products take alone), cross
// attention, the feed-forward products and the vocabulary product; "other" is the step minus
// their sum (embedding, layer norms, residuals, activation, and what the parts lose or gain
// from being timed one by one).
#include <algorithm>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <span>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/ops/cpu_context.h"
#include "engine/ops/matmul.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

struct Bytes {
  int64_t self = 0, cross = 0;
};

Bytes StateBytes(const StateLayout& layout, const SequenceState& state) {
  Bytes b;
  for (const StateLayout::Slot& slot : layout.self) b.self += slot.fixed_floats * 4;
  for (const StateLayout::Slot& slot : layout.cross) b.cross += slot.fixed_floats * 4;
  for (size_t i = 0; i < state.kv.size(); ++i) {
    const int64_t kv = state.kv[i].capacity() * layout.KvBytesPerToken();
    (layout.kv_is_cross[i] ? b.cross : b.self) += kv;
  }
  return b;
}

struct Seq2SeqEntry {
  std::unique_ptr<Model> model;
  std::string label;
  std::string attention;
  nlohmann::json json;
  std::unique_ptr<StatePool> pool;
  SequenceId base = 0;
};

// Encodes one source of `length` tokens into a fresh sequence and prefills its target with
// `length` tokens (chunks of kPrefillChunkRows rows). Returns (encode seconds, prefill seconds).
absl::StatusOr<std::pair<double, double>> Prepare(Seq2SeqEntry& e, CpuContext& ctx,
                                                  int64_t length) {
  const int vocab = e.model->config().vocab_size;
  e.pool = std::make_unique<StatePool>(e.model->state_layout(), kUnlimitedStateBytes);
  ABCD_ASSIGN_OR_RETURN(e.base, e.pool->Acquire());
  const std::vector<int32_t> source = Tokens(7, length, vocab);
  auto start = BenchClock::now();
  ABCD_RETURN_IF_ERROR(e.model->Encode(ctx, source, e.base, *e.pool));
  const double encode = Seconds(BenchClock::now() - start);
  const std::vector<int32_t> target = Tokens(11, length, vocab);
  std::vector<float> logits;
  start = BenchClock::now();
  for (int64_t first = 0; first < length; first += kPrefillChunkRows) {
    std::vector<DecodeRow> rows;
    for (int64_t t = first; t < std::min(length, first + kPrefillChunkRows); ++t) {
      rows.push_back({e.base, target[static_cast<size_t>(t)], t + 1 == length});
    }
    ABCD_RETURN_IF_ERROR(e.model->Decode(ctx, rows, *e.pool, &logits));
  }
  return std::make_pair(encode, Seconds(BenchClock::now() - start));
}

absl::StatusOr<std::vector<SequenceId>> ForkBatch(Seq2SeqEntry& e, int64_t batch) {
  std::vector<SequenceId> ids;
  for (int64_t i = 0; i < batch; ++i) {
    ABCD_ASSIGN_OR_RETURN(const SequenceId id, e.pool->Fork(e.base));
    ids.push_back(id);
  }
  return ids;
}

// Median greedy step time (seconds) of `batch` forks of the prepared sequence.
absl::StatusOr<double> StepSeconds(Seq2SeqEntry& e, CpuContext& ctx, int64_t batch, int steps) {
  ABCD_ASSIGN_OR_RETURN(const std::vector<SequenceId> ids, ForkBatch(e, batch));
  const int vocab = e.model->config().vocab_size;
  std::vector<int32_t> next = Tokens(977, batch, vocab);
  std::vector<double> times;
  std::vector<float> logits;
  std::vector<DecodeRow> rows(static_cast<size_t>(batch));
  for (int s = 0; s <= steps; ++s) {
    for (size_t i = 0; i < rows.size(); ++i) rows[i] = {ids[i], next[i], true};
    logits.clear();
    const auto start = BenchClock::now();
    ABCD_RETURN_IF_ERROR(e.model->Decode(ctx, rows, *e.pool, &logits));
    if (s > 0) times.push_back(Seconds(BenchClock::now() - start));  // step 0 warms up
    for (size_t i = 0; i < rows.size(); ++i) {  // greedy: the argmax is the next token
      const float* row = logits.data() + i * static_cast<size_t>(vocab);
      next[i] = static_cast<int32_t>(std::max_element(row, row + vocab) - row);
    }
  }
  for (SequenceId id : ids) e.pool->Release(id);
  return Median(times);
}

// The step breakdown (milliseconds, summed over the decoder layers) on `batch` forks.
absl::StatusOr<nlohmann::json> Breakdown(Seq2SeqEntry& e, CpuContext& ctx, int64_t batch,
                                         int repeats) {
  ABCD_ASSIGN_OR_RETURN(const std::vector<SequenceId> ids, ForkBatch(e, batch));
  const Model& model = *e.model;
  const StateLayout& layout = model.state_layout();
  const int64_t d = model.config().d_model;
  std::vector<SequenceState*> states;
  for (SequenceId id : ids) {
    SequenceState* s = e.pool->Get(id);
    ABCD_RETURN_IF_ERROR(e.pool->ReserveTokens(id, s->position + 1));
    states.push_back(s);
  }
  // Inputs with the scale of a layer-normed row.
  const std::vector<int32_t> seeds = Tokens(5, batch * d, 1000);
  std::vector<float> x(seeds.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(seeds[i]) / 289.0f - 1.73f;
  std::vector<float> out(static_cast<size_t>(batch * d));
  std::vector<float> hidden(static_cast<size_t>(batch * model.config().d_ff));
  std::vector<float> logits(static_cast<size_t>(batch * model.config().vocab_size));
  std::vector<StateRef> refs(static_cast<size_t>(batch));
  auto bind = [&](const StateLayout::Slot& slot) {
    for (size_t r = 0; r < refs.size(); ++r) {
      SequenceState& s = *states[r];
      refs[r] = {s.fixed.data() + slot.fixed_offset,
                 slot.kv_index >= 0 ? &s.kv[static_cast<size_t>(slot.kv_index)] : nullptr,
                 s.position};
    }
    return std::span<const StateRef>(refs);
  };
  // Passes over the layers in step order (so the states and weights move through the caches
  // as in a real step), each part timed where it runs; median per part over the passes after
  // one untimed pass.
  const auto& blocks = model.decoder().blocks;
  std::vector<float> projected;
  enum Part { kSelf, kSelfProjections, kCross, kFfn, kVocab, kParts };
  std::vector<std::vector<double>> times(kParts);
  for (int pass = 0; pass <= repeats; ++pass) {
    std::vector<double> total(kParts, 0.0);
    auto timed = [&](Part part, auto&& fn) {
      const auto start = BenchClock::now();
      fn();
      total[part] += 1000 * Seconds(BenchClock::now() - start);
    };
    for (size_t l = 0; l < blocks.size(); ++l) {
      const Model::Block& block = blocks[l];
      timed(kSelf, [&] {
        block.self_attention->ForwardCausal(ctx, x.data(), batch, bind(layout.self[l]), out.data());
      });
      const PackedMatrix& fused = block.self_attention->fused_matrix();
      projected.resize(static_cast<size_t>(batch * fused.out()));
      timed(kSelfProjections, [&] {
        cpu::Linear(x.data(), batch, fused, nullptr, projected.data(), &ctx.pool());
        cpu::Linear(x.data(), batch, block.self_attention->out_matrix(), nullptr, out.data(),
                    &ctx.pool());
      });
      if (block.cross_attention) {
        timed(kCross, [&] {
          block.cross_attention->ForwardCross(ctx, x.data(), batch, bind(layout.cross[l]),
                                              out.data());
        });
      }
      timed(kFfn, [&] {
        cpu::Linear(x.data(), batch, block.fc1, nullptr, hidden.data(), &ctx.pool());
        cpu::Linear(hidden.data(), batch, block.fc2, nullptr, out.data(), &ctx.pool());
      });
    }
    timed(kVocab, [&] {
      cpu::Linear(x.data(), batch, model.head_matrix(), nullptr, logits.data(), &ctx.pool());
    });
    if (pass == 0) continue;  // warms up
    for (int part = 0; part < kParts; ++part) times[part].push_back(total[part]);
  }
  const double self_ms = Median(times[kSelf]), self_proj_ms = Median(times[kSelfProjections]),
               cross_ms = Median(times[kCross]), ffn_ms = Median(times[kFfn]),
               head_ms = Median(times[kVocab]);
  for (SequenceId id : ids) e.pool->Release(id);
  return nlohmann::json{{"self_attention_ms", self_ms},
                        {"self_projections_ms", self_proj_ms},
                        {"cross_attention_ms", cross_ms},
                        {"ffn_products_ms", ffn_ms},
                        {"vocab_product_ms", head_ms}};
}

}  // namespace

absl::StatusOr<nlohmann::json> RunSeq2seq(const Seq2seqOptions& options) {
  const auto began = BenchClock::now();
  CpuContext ctx(options.threads);
  nlohmann::json out;
  out["lengths"] = options.lengths;
  out["batch"] = options.batch;
  out["steps"] = options.steps;
  out["rounds"] = options.rounds;
  out["threads"] = options.threads;
  out["kv_cache"] = KvFormatName(options.kv_cache_format);
  out["kernel"] = cpu::LinearKernelName();
  std::vector<Seq2SeqEntry> entries;
  for (const std::string& dir : options.models) {
    Seq2SeqEntry e;
    ModelLoadOptions load;
    load.kv_cache_format = options.kv_cache_format;
    ABCD_ASSIGN_OR_RETURN(e.model, Model::Load(dir, load));
    if (!e.model->config().is_encoder_decoder()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--models: ", dir, " is not an encoder-decoder model"));
    }
    e.label = ModelLabel(dir);
    e.attention = AttentionName(*e.model);
    const LayerSpec& layer = e.model->config().decoder_layers.front();
    e.json["model"] = dir;
    e.json["label"] = e.label;
    e.json["attention"] = e.attention;
    e.json["causal"] = DescribeAttention(layer.attention);
    e.json["cross"] = layer.cross_attention ? DescribeAttention(*layer.cross_attention) : "none";
    e.json["weight_bytes"] = e.model->weight_bytes();
    e.json["points"] = nlohmann::json::array();
    entries.push_back(std::move(e));
  }
  std::cout << "== seq2seq greedy decode at position L after a source of L tokens (batch "
            << options.batch << ", " << options.threads << " thread(s), "
            << (KvFormatName(options.kv_cache_format)) << " KV cache, " << cpu::LinearKernelName()
            << " kernels; median of " << options.rounds << " rounds of " << options.steps
            << " steps, models interleaved) ==\n";
  std::cout << absl::StrFormat("%6s %-14s %-34s %9s %9s %9s %9s %10s %9s %9s\n", "L", "model",
                               "causal / cross", "self/seq", "cross/seq", "encode s", "prefill s",
                               "step ms", "tokens/s", "x softmax");
  // tokens/s by [length][attention].
  std::map<int64_t, std::map<std::string, double>> speed;
  for (int64_t length : options.lengths) {
    std::vector<std::pair<double, double>> prepared;
    for (Seq2SeqEntry& e : entries) {
      ABCD_ASSIGN_OR_RETURN(auto times, Prepare(e, ctx, length));
      prepared.push_back(times);
    }
    std::vector<std::vector<double>> rounds(entries.size());
    for (int r = 0; r < options.rounds; ++r) {
      for (size_t i = 0; i < entries.size(); ++i) {
        ABCD_ASSIGN_OR_RETURN(const double s,
                              StepSeconds(entries[i], ctx, options.batch, options.steps));
        rounds[i].push_back(s * 1000);
      }
    }
    std::map<std::string, double> rate;
    std::vector<nlohmann::json> points;
    for (size_t i = 0; i < entries.size(); ++i) {
      Seq2SeqEntry& e = entries[i];
      const double step_ms = Median(rounds[i]);
      const double tokens_per_s = static_cast<double>(options.batch) / (step_ms / 1000);
      ABCD_ASSIGN_OR_RETURN(const SequenceId probe, e.pool->Fork(e.base));
      const Bytes bytes = StateBytes(e.model->state_layout(), *e.pool->Get(probe));
      ABCD_ASSIGN_OR_RETURN(const int64_t total, e.pool->SequenceBytes(probe));
      e.pool->Release(probe);
      ABCD_ASSIGN_OR_RETURN(nlohmann::json breakdown,
                            Breakdown(e, ctx, options.batch, options.steps));
      double parts = 0;
      for (const auto& [name, ms] : breakdown.items()) {
        if (name != "self_projections_ms") parts += ms.get<double>();
      }
      breakdown["other_ms"] = step_ms - parts;
      rate[e.attention] = tokens_per_s;
      points.push_back({{"length", length},
                        {"self_state_bytes", bytes.self},
                        {"cross_state_bytes", bytes.cross},
                        {"state_bytes", total},
                        {"encode_s", prepared[i].first},
                        {"prefill_s", prepared[i].second},
                        {"step_ms", step_ms},
                        {"step_ms_rounds", rounds[i]},
                        {"tokens_per_s", tokens_per_s},
                        {"breakdown", std::move(breakdown)}});
      e.pool.reset();
    }
    for (size_t i = 0; i < entries.size(); ++i) {
      Seq2SeqEntry& e = entries[i];
      nlohmann::json& p = points[i];
      const double vs = rate.contains("softmax") ? rate[e.attention] / rate["softmax"] : 0.0;
      std::cout << absl::StrFormat(
          "%6d %-14s %-34s %9s %9s %9.2f %9.2f %10.2f %9.1f %9s\n", length, e.label,
          absl::StrCat(e.json["causal"].get<std::string>(), " / ",
                       e.json["cross"].get<std::string>())
              .substr(0, 34),
          HumanBytes(p["self_state_bytes"].get<double>()),
          HumanBytes(p["cross_state_bytes"].get<double>()), p["encode_s"].get<double>(),
          p["prefill_s"].get<double>(), p["step_ms"].get<double>(), p["tokens_per_s"].get<double>(),
          vs > 0 ? absl::StrFormat("%.2fx", vs) : "-");
      e.json["points"].push_back(std::move(p));
    }
    speed[length] = rate;
  }

  std::cout << "\n== step breakdown (ms per step, summed over the decoder layers; other = step "
               "- the parts) ==\n"
            << absl::StrFormat("%6s %-14s %9s %9s %9s %9s %9s %9s %9s\n", "L", "model", "step",
                               "self attn", "(proj)", "cross", "ffn", "vocab", "other");
  for (size_t li = 0; li < options.lengths.size(); ++li) {
    for (const Seq2SeqEntry& e : entries) {
      const nlohmann::json& p = e.json["points"][li];
      const nlohmann::json& b = p["breakdown"];
      std::cout << absl::StrFormat(
          "%6d %-14s %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f %9.3f\n", p["length"].get<int64_t>(),
          e.label, p["step_ms"].get<double>(), b["self_attention_ms"].get<double>(),
          b["self_projections_ms"].get<double>(), b["cross_attention_ms"].get<double>(),
          b["ffn_products_ms"].get<double>(), b["vocab_product_ms"].get<double>(),
          b["other_ms"].get<double>());
    }
  }

  // The papers' ratios (Peng 2022 thesis Fig. 4.2; ABC, Peng et al. 2022, Fig. 1): RFA ~12x softmax
  // at 2048, ABC ~1.25x RFA, T2R ~1.2x ABC; next to this engine's at each length (when the models
  // are there).
  const std::vector<std::tuple<std::string, std::string, double>> pairs = {
      {"rfa", "softmax", 12.0}, {"abc", "rfa", 1.25}, {"t2r", "abc", 1.2}};
  nlohmann::json ratios = nlohmann::json::array();
  std::cout << "\n== ratios of decode tokens/s next to the seeds' (TPU v2; RFA/softmax at 2048) "
               "==\n"
            << absl::StrFormat("%-14s %7s", "ratio", "seeds'");
  for (int64_t length : options.lengths)
    std::cout << absl::StrFormat(" %8s", absl::StrCat("L ", length));
  std::cout << "\n";
  for (const auto& [a, b, seeds] : pairs) {
    bool present = true;
    for (const auto& [length, rate] : speed)
      present = present && rate.contains(a) && rate.contains(b);
    if (!present) continue;
    nlohmann::json row = {{"ratio", absl::StrCat(a, "/", b)}, {"seeds", seeds}};
    std::cout << absl::StrFormat("%-14s %6.2fx", absl::StrCat(a, " / ", b), seeds);
    for (int64_t length : options.lengths) {
      const double r = speed[length][a] / speed[length][b];
      row[absl::StrCat(length)] = r;
      std::cout << absl::StrFormat(" %7.2fx", r);
    }
    std::cout << "\n";
    ratios.push_back(std::move(row));
  }
  out["ratios"] = std::move(ratios);
  nlohmann::json models = nlohmann::json::array();
  for (Seq2SeqEntry& e : entries) models.push_back(std::move(e.json));
  out["models"] = std::move(models);
  const double elapsed = Seconds(BenchClock::now() - began);
  out["elapsed_s"] = elapsed;
  std::cout << absl::StrFormat("\nseq2seq run took %.1f s\n\n", elapsed);
  return out;
}

}  // namespace abcd::bench
