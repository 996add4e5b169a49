// abcd-cli: inspect a model directory and generate text with the in-process CPU engine.
//
//   abcd-cli info [--model DIR]
//   abcd-cli generate [--model DIR] --prompt TEXT [--max-tokens N] [--temperature T]
//                     [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S]
//                     [--stop STR] [--ignore-eos] [--json]
//   abcd-cli eval [--model DIR] --text FILE [--chunk N] [--json]
//   abcd-cli translate [--model DIR] --text TEXT [--beam-size N] [--max-tokens N] [--json]
//   abcd-cli tokenize [--model DIR] (--text TEXT | --text-file FILE [--lines | --jsonl])
//                     [--no-special] [--json]
//
// translate: an encoder-decoder model through the same Executor (beam search over forked
// states) that serves Translate in abcd-server, so the CLI output is the server's output.
//
// eval: perplexity of a decoder-only model on FILE, chunked exactly like
// `models/evaluate.py lm` (see its docstring): every line (without its newline) is encoded and
// prefixed with bos where the model's tokenizer adds one (PrefilledIds, the server's rule: the
// ids /tokenize gives for the line; abcd's own models always do, a Hugging Face model as its
// add_bos_token or tokenizer.json says; an empty line of a model without bos adds nothing), the
// lines are concatenated, the stream is cut into non-overlapping chunks of N tokens (default 128;
// a last chunk of one token is dropped), each chunk is scored from an empty state, and every
// token of a chunk but the first is predicted. ppl = exp(mean NLL), in double.
//
// tokenize: the ids abcd-server's /tokenize gives (the same LoadModelTokenizer and
// PrefilledIds; only config.json and the tokenizer are read, no weights). With special tokens
// (the default) a decoder's text gets the model's bos first where its tokenizer adds one (or
// where the text is empty), an encoder-decoder's source its eos last; --no-special: the text's
// ids alone. Added tokens written in the text (<|eot_id|>) are matched, as Hugging Face's encode
// does. --text-file FILE ("-": stdin) is one text, tokenised whole (the ids of the file in one
// piece; it is read into memory); with --lines every line (without its "\n") and with --jsonl
// every non-empty line's record ({"text": ...} or a JSON string) is a text of its own, read,
// tokenised and printed one at a time (the finetune's documents, models/hf_train.py). Output: a
// line per text, its ids separated by spaces, or with --json a JSON array.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "engine/core/json_nesting.h"
#include "engine/core/status_macros.h"
#include "engine/core/thread_pool.h"
#include "engine/model/model.h"
#include "engine/model/model_config.h"
#include "engine/ops/matmul.h"
#include "engine/runtime/engine_flags.h"
#include "engine/runtime/generator.h"
#include "engine/scheduler/executor.h"
#include "engine/state/state_pool.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "server/core/arguments.h"
#include "server/core/model_tokenizer.h"

namespace abcd {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  abcd-cli info [--model DIR] [--kv-cache-format f32|bf16]\n"
    "  abcd-cli generate [--model DIR] --prompt TEXT [--max-tokens N] [--temperature T]\n"
    "                    [--top-k K] [--top-p P] [--repetition-penalty R] [--seed S]\n"
    "                    [--stop STR] [--ignore-eos] [--json]\n"
    "  abcd-cli eval [--model DIR] --text FILE [--chunk N] [--json]\n"
    "  abcd-cli translate [--model DIR] --text TEXT [--beam-size N] [--max-tokens N] [--json]\n"
    "  abcd-cli translate [--model DIR] --text-file FILE [--beam-size N] [--max-tokens N]\n"
    "  abcd-cli tokenize [--model DIR] --text TEXT [--no-special] [--json]\n"
    "  abcd-cli tokenize [--model DIR] --text-file FILE|- [--lines|--jsonl] [--no-special]\n"
    "                    [--json]   (the ids /tokenize gives: bos where the tokenizer adds one)\n"
    "Without --model, $ABCD_MODEL or the bundled default model (translate: the bundled\n"
    "translation model) is used. generate, eval and translate also take --threads N (default: the\n"
    "cores this process may use), --weight-format f32|bf16|f16|int8 (default: the\n"
    "checkpoint's own), --cpu-compute auto|fp32|bf16|int8 (default auto: bf16 products for bf16\n"
    "weights where the CPU has AVX512_BF16, exact fp32 products otherwise; fp32: exact for\n"
    "every format; bf16: bf16 weights x bf16-rounded activations, AVX512_BF16; int8: int8\n"
    "weights x 8-bit activations, AVX-512 VNNI) and\n"
    "--kv-cache-format bf16|f16|f32 (softmax caches, txl rings; default bf16).\n";

constexpr int64_t kCliStateBudget = int64_t{1} << 32;

// --weight-format (default: the checkpoint's own).
absl::StatusOr<std::unique_ptr<Model>> LoadModel(const Arguments& args, const std::string& dir) {
  ModelLoadOptions load;
  ABCD_ASSIGN_OR_RETURN(load.kv_cache_format,
                        ParseKvFormat(args.String("kv-cache-format", "bf16"), "--kv-cache-format"));
  if (args.Has("weight-format")) {
    absl::StatusOr<WeightFormat> format = ParseWeightFormat(args.String("weight-format", ""));
    if (!format.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--weight-format: ", format.status().message()));
    }
    load.weight_format = *format;
  }
  return Model::Load(dir, load);
}

// The model and its tokenizer (checked against the config before the weights are read).
struct LoadedModel {
  std::unique_ptr<Model> model;
  std::unique_ptr<Tokenizer> tokenizer;
};

absl::StatusOr<LoadedModel> LoadModelAndTokenizer(const Arguments& args, const std::string& dir) {
  LoadedModel loaded;
  ABCD_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelDirectoryConfig(dir));
  ABCD_ASSIGN_OR_RETURN(loaded.tokenizer, LoadModelTokenizer(dir, config));
  ABCD_ASSIGN_OR_RETURN(loaded.model, LoadModel(args, dir));
  return loaded;
}

// --threads (default: the cores this process may use).
absl::StatusOr<int> Threads(const Arguments& args) {
  ABCD_ASSIGN_OR_RETURN(const int64_t threads, args.Int("threads", ThreadPool::AvailableCores()));
  if (threads < 1 || threads > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("--threads must be in [1, 1024], got ", threads));
  }
  return static_cast<int>(threads);
}

// --cpu-compute auto|fp32|bf16|int8 (default auto: bf16 products for bf16 weights where the CPU
// has AVX512_BF16, else exact; ResolveCpuCompute, engine/runtime/engine_flags.h).
absl::StatusOr<cpu::LinearProducts> CpuCompute(const Arguments& args, const Model& model) {
  return ResolveCpuCompute(args.String("cpu-compute", std::string(kDefaultCpuCompute)),
                           model.weight_format(), "--cpu-compute", "", "--weight-format");
}

// --model, else $ABCD_MODEL, else the bundled default (the LM; translate: the EN->DE model).
std::string ModelDir(const Arguments& args, const char* bundled = ABCD_DEFAULT_MODEL_DIR) {
  if (args.Has("model")) return args.String("model", "");
  if (const char* env = std::getenv("ABCD_MODEL"); env != nullptr && *env != '\0') return env;
  return bundled;
}

std::string LayerStateDescription(const StateLayout::Slot& slot, int64_t kv_bytes_per_token) {
  if (slot.kv_index >= 0) return absl::StrCat(kv_bytes_per_token, " bytes per token (grows)");
  return absl::StrCat(slot.fixed_floats * 4, " bytes (fixed)");
}

// info's tokenizer line. The tokenizer is optional there (the golden fixtures have none), but
// one that generate and abcd-server would refuse is an error.
absl::StatusOr<std::string> DescribeTokenizer(const std::string& dir, const ModelConfig& c) {
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadModelTokenizer(dir, c);
  if (absl::IsNotFound(tokenizer.status())) {
    return std::string("none (generate and abcd-server need tokenizer.json or tokenizer.model)");
  }
  if (!tokenizer.ok()) return tokenizer.status();
  const int pieces = (*tokenizer)->vocab_size();
  std::string line = absl::StrCat(
      (*tokenizer)->hf() != nullptr ? "tokenizer.json, " : "tokenizer.model, ", pieces, " pieces");
  if (pieces < c.vocab_size) {
    absl::StrAppend(&line, " (vocab_size ", c.vocab_size, ": ", c.vocab_size - pieces,
                    " padding ids)");
  }
  return line;
}

absl::Status Info(const Arguments& args) {
  const std::string dir = ModelDir(args);
  // info reports the fp32 state unless asked (--kv-cache-format bf16: softmax caches and txl
  // rings as the other commands keep them by default).
  ModelLoadOptions load;
  ABCD_ASSIGN_OR_RETURN(load.kv_cache_format,
                        ParseKvFormat(args.String("kv-cache-format", "f32"), "--kv-cache-format"));
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, load));
  const ModelConfig& c = model->config();
  const StateLayout& layout = model->state_layout();
  ABCD_ASSIGN_OR_RETURN(const std::string tokenizer_line, DescribeTokenizer(dir, c));
  std::cout << "model: " << dir << "\n";
  if (c.is_hf()) std::cout << "model_type: " << c.hf_model_type << " (Hugging Face checkpoint)\n";
  std::cout << "architecture: " << (c.is_encoder_decoder() ? "encoder-decoder" : "decoder")
            << "\n"
            // Hugging Face layers carry their own head shapes (GQA, head_dim != d / heads):
            // the layer lines show them.
            << (c.is_hf()
                    ? absl::StrFormat("vocab %d, d_model %d, d_ff %d\n", c.vocab_size, c.d_model,
                                      c.d_ff)
                    : absl::StrFormat("vocab %d, d_model %d, heads %d, head_dim %d, d_ff %d\n",
                                      c.vocab_size, c.d_model, c.n_heads, c.head_dim(), c.d_ff))
            << "weights: " << model->weight_bytes() << " bytes\n"
            << "tokenizer: " << tokenizer_line << "\n";
  for (size_t i = 0; i < c.encoder_layers.size(); ++i) {
    std::cout << absl::StrFormat("encoder.layers.%d  self %-34s (no per-sequence state)\n", i,
                                 DescribeAttention(c.encoder_layers[i].attention));
  }
  // GMAT (issue 16): cross attention reads M memory rows (output "memory": fixed in the source
  // length) or source + M rows (output "all").
  const int64_t memory_rows = c.gmat ? c.gmat->memory : 0;
  const bool fixed_cross = c.gmat && !c.gmat->output_all;
  int64_t cross_memory_bytes = 0;
  if (c.gmat) {
    std::cout << absl::StrFormat("gmat: %d memory tokens, output %s\n", c.gmat->memory,
                                 c.gmat->output_all ? "all (source + memory rows)" : "memory");
  }
  int64_t kv_layers = 0;
  for (size_t i = 0; i < c.decoder_layers.size(); ++i) {
    std::cout << absl::StrFormat("decoder.layers.%d  self  %-34s %s\n", i,
                                 DescribeAttention(c.decoder_layers[i].attention),
                                 LayerStateDescription(layout.self[i], layout.KvBytesPerToken()));
    kv_layers += layout.self[i].kv_index >= 0;
    if (c.decoder_layers[i].cross_attention) {
      const int64_t memory_bytes = memory_rows * layout.KvBytesPerToken();
      std::string cross_kv =
          fixed_cross ? absl::StrCat(memory_bytes, " bytes (", memory_rows,
                                     " GMAT memory rows, any source length)")
                      : absl::StrCat(layout.KvBytesPerToken(), " bytes per source token");
      if (c.gmat && !fixed_cross) absl::StrAppend(&cross_kv, " + ", memory_bytes, " bytes");
      if (fixed_cross && layout.cross[i].kv_index >= 0) cross_memory_bytes += memory_bytes;
      std::cout << absl::StrFormat(
          "decoder.layers.%d  cross %-34s %s\n", i,
          DescribeAttention(*c.decoder_layers[i].cross_attention),
          layout.cross[i].kv_index >= 0 ? cross_kv : LayerStateDescription(layout.cross[i], 0));
    }
  }
  std::cout << "state per sequence: " << layout.FixedBytes() << " bytes fixed";
  if (cross_memory_bytes > 0) {
    std::cout << " + " << cross_memory_bytes << " bytes GMAT cross memory";
  }
  if (kv_layers > 0) {
    std::cout << " + " << kv_layers * layout.KvBytesPerToken() << " bytes per decoded token";
  }
  std::cout << "\n";
  // abc position (Linformer) tables have no column past their max_positions: requests beyond
  // these limits are refused.
  if (c.max_positions() > 0) {
    std::cout << "decoder positions: at most " << c.max_positions() << " (abc position table)\n";
  }
  if (c.max_source_positions() > 0) {
    std::cout << "source: at most " << c.max_source_positions()
              << " tokens with eos (abc position tables)\n";
  }
  return absl::OkStatus();
}

absl::Status RunGenerate(const Arguments& args) {
  if (!args.Has("prompt")) return absl::InvalidArgumentError("--prompt is required");
  GenerateOptions options;
  ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max-tokens", 64));
  if (max_tokens < 0 || max_tokens > 1'000'000) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-tokens must be in [0, 1000000], got ", max_tokens));
  }
  options.max_tokens = static_cast<int>(max_tokens);
  ABCD_ASSIGN_OR_RETURN(const double temperature, args.Double("temperature", 1.0));
  ABCD_ASSIGN_OR_RETURN(const int64_t top_k, args.Int("top-k", 0));
  ABCD_ASSIGN_OR_RETURN(const double top_p, args.Double("top-p", 1.0));
  ABCD_ASSIGN_OR_RETURN(const double penalty, args.Double("repetition-penalty", 1.0));
  ABCD_ASSIGN_OR_RETURN(const int64_t seed, args.Int("seed", 0));
  options.sampling.temperature = static_cast<float>(temperature);
  options.sampling.top_k = static_cast<int>(top_k);
  options.sampling.top_p = static_cast<float>(top_p);
  options.sampling.repetition_penalty = static_cast<float>(penalty);
  options.sampling.seed = static_cast<uint64_t>(seed);
  if (top_k < 0 || top_k > (1 << 30)) return absl::InvalidArgumentError("--top-k must be >= 0");
  options.ignore_eos = args.Has("ignore-eos");
  if (args.Has("stop")) options.stop.push_back(args.String("stop", ""));
  const bool json = args.Has("json");

  const std::string dir = ModelDir(args);
  ABCD_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(args, dir));
  const std::unique_ptr<Model>& model = loaded.model;
  const std::unique_ptr<Tokenizer>& tokenizer = loaded.tokenizer;
  ABCD_ASSIGN_OR_RETURN(const int threads, Threads(args));
  ABCD_ASSIGN_OR_RETURN(const cpu::LinearProducts products, CpuCompute(args, *model));
  CpuContext context(threads, products);
  options.context = &context;
  StatePool pool(model->state_layout(), kCliStateBudget);
  auto on_token = [json](int32_t id, absl::string_view text) {
    if (json) {
      std::cout << nlohmann::json{{"token_id", id}, {"text", text}}.dump(
                       -1, ' ', false, nlohmann::json::error_handler_t::replace)
                << "\n";
    } else {
      std::cout << text << std::flush;
    }
  };
  ABCD_ASSIGN_OR_RETURN(
      GenerateResult result,
      Generate(*model, *tokenizer, pool, args.String("prompt", ""), options, on_token));
  if (json) {
    nlohmann::json last{{"text", result.text},
                        {"token_ids", result.token_ids},
                        {"prompt_tokens", result.prompt_ids.size()},
                        {"completion_tokens", result.token_ids.size()},
                        {"finish_reason", FinishReasonName(result.finish_reason)},
                        {"state_bytes", result.state_bytes}};
    std::cout << last.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    std::cout << "\n";
  }
  return absl::OkStatus();
}

// Perplexity of `--text` (see the header comment for the chunking).
absl::Status RunEval(const Arguments& args) {
  if (!args.Has("text")) return absl::InvalidArgumentError("--text is required");
  ABCD_ASSIGN_OR_RETURN(const int64_t chunk, args.Int("chunk", 128));
  if (chunk < 2 || chunk > 1'000'000) {
    return absl::InvalidArgumentError(absl::StrCat("--chunk must be in [2, 1000000], got ", chunk));
  }
  const std::string text_path = args.String("text", "");
  const bool json = args.Has("json");
  const std::string dir = ModelDir(args);
  ABCD_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(args, dir));
  const std::unique_ptr<Model>& model = loaded.model;
  const std::unique_ptr<Tokenizer>& tokenizer = loaded.tokenizer;
  ABCD_ASSIGN_OR_RETURN(const int threads, Threads(args));
  ABCD_ASSIGN_OR_RETURN(const cpu::LinearProducts products, CpuCompute(args, *model));
  CpuContext context(threads, products);
  const ModelConfig& config = model->config();
  if (config.is_encoder_decoder()) {
    return absl::FailedPreconditionError("eval needs a decoder-only model");
  }
  std::ifstream file(text_path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read --text ", text_path));
  std::stringstream contents;
  contents << file.rdbuf();
  std::vector<std::string> lines = absl::StrSplit(contents.str(), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();  // the final newline
  std::vector<int32_t> stream;
  for (const std::string& line : lines) {
    ABCD_ASSIGN_OR_RETURN(std::vector<int32_t> ids, tokenizer->Encode(line));
    // (PrefilledIds gives an empty prompt a bos to decode from; the stream needs none.)
    if (!ids.empty() || config.add_bos) ids = PrefilledIds(config, std::move(ids));
    stream.insert(stream.end(), ids.begin(), ids.end());
  }
  const int64_t total = static_cast<int64_t>(stream.size());
  StatePool pool(model->state_layout(), kCliStateBudget);
  double nll = 0.0;
  int64_t predicted = 0;
  int64_t chunks = 0;
  std::vector<float> logits;
  std::vector<DecodeRow> rows;
  for (int64_t start = 0; start < total; start += chunk) {
    const int64_t length = std::min<int64_t>(chunk, total - start);
    if (length < 2) continue;
    ++chunks;
    ABCD_ASSIGN_OR_RETURN(const SequenceId sequence, pool.Acquire());
    absl::Cleanup release = [&] { pool.Release(sequence); };
    rows.clear();
    for (int64_t i = 0; i < length; ++i) {
      rows.push_back({sequence, stream[start + i], i + 1 < length});
    }
    logits.clear();
    ABCD_RETURN_IF_ERROR(model->Decode(context, rows, pool, &logits));
    const int64_t vocab = config.vocab_size;
    for (int64_t i = 0; i + 1 < length; ++i) {
      const float* row = logits.data() + i * vocab;
      double max_logit = row[0];
      for (int64_t v = 1; v < vocab; ++v) max_logit = std::max<double>(max_logit, row[v]);
      double sum = 0.0;
      for (int64_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - max_logit);
      const int32_t target = stream[start + i + 1];
      nll += max_logit + std::log(sum) - static_cast<double>(row[target]);
      ++predicted;
    }
  }
  if (predicted == 0) return absl::InvalidArgumentError("--text has fewer than 2 tokens");
  const double perplexity = std::exp(nll / static_cast<double>(predicted));
  if (json) {
    std::cout << nlohmann::json{{"perplexity", perplexity},
                                {"nll_sum", nll},
                                {"predicted_tokens", predicted},
                                {"chunks", chunks},
                                {"chunk", chunk},
                                {"lines", lines.size()},
                                {"model", dir},
                                {"text", text_path}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << absl::StrFormat(
        "%s: perplexity %.4f over %d predicted tokens (%d chunks of <= %d) of %s\n", dir,
        perplexity, predicted, chunks, chunk, text_path);
  }
  return absl::OkStatus();
}

// One translation through an in-process Executor (greedy with --beam-size 1).
// --text-file: every line translated through the Executor, up to 64 at once (batched like the
// server), printed in input order, one line each.
absl::Status TranslateFile(Executor& executor, const std::string& path, int beam_size,
                           int max_tokens) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return absl::NotFoundError(absl::StrCat("cannot read --text-file ", path));
  std::vector<std::string> lines;
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  constexpr size_t kWindow = 64;
  for (size_t first = 0; first < lines.size(); first += kWindow) {
    const size_t count = std::min(kWindow, lines.size() - first);
    std::vector<std::string> out(count);
    std::vector<absl::Status> status(count);
    std::vector<absl::Notification> done(count);
    for (size_t i = 0; i < count; ++i) {
      GenerationRequest request;
      request.source = lines[first + i].empty() ? " " : lines[first + i];
      request.beam_size = beam_size;
      request.max_tokens = max_tokens;
      request.sampling.temperature = 0.0f;
      absl::StatusOr<RequestId> id =
          executor.Enqueue(std::move(request), [&, i](GenerationEvent event) {
            out[i] += event.text;
            if (!event.finished) return;
            status[i] = event.status;
            done[i].Notify();
          });
      if (!id.ok()) {
        status[i] = id.status();
        done[i].Notify();
      }
    }
    for (size_t i = 0; i < count; ++i) {
      done[i].WaitForNotification();
      if (!status[i].ok()) {
        return absl::Status(status[i].code(), absl::StrCat("--text-file line ", first + i + 1, ": ",
                                                           status[i].message()));
      }
      std::cout << out[i] << "\n";
    }
  }
  return absl::OkStatus();
}

absl::Status RunTranslate(const Arguments& args) {
  if (!args.Has("text") && !args.Has("text-file")) {
    return absl::InvalidArgumentError("--text or --text-file is required");
  }
  ABCD_ASSIGN_OR_RETURN(const int64_t beam_size, args.Int("beam-size", 4));
  if (beam_size < 1 || beam_size > 64) {
    return absl::InvalidArgumentError(
        absl::StrCat("--beam-size must be in [1, 64], got ", beam_size));
  }
  ExecutorOptions options;
  options.state_budget_bytes = kCliStateBudget;
  ABCD_ASSIGN_OR_RETURN(const int64_t max_tokens, args.Int("max-tokens", 128));
  if (max_tokens < 1 || max_tokens > options.max_new_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("--max-tokens must be in [1, ",
                                                   options.max_new_tokens, "], got ", max_tokens));
  }
  const std::string dir = ModelDir(args, ABCD_DEFAULT_TRANSLATION_MODEL_DIR);
  ABCD_ASSIGN_OR_RETURN(LoadedModel loaded, LoadModelAndTokenizer(args, dir));
  const std::unique_ptr<Model>& model = loaded.model;
  const std::unique_ptr<Tokenizer>& tokenizer = loaded.tokenizer;
  ABCD_ASSIGN_OR_RETURN(options.cpu_threads, Threads(args));
  ABCD_ASSIGN_OR_RETURN(options.cpu_products, CpuCompute(args, *model));
  if (!model->config().is_encoder_decoder()) {
    return absl::FailedPreconditionError("translate needs an encoder-decoder model");
  }
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Executor> executor,
                        Executor::Create(*model, *tokenizer, options));
  absl::Cleanup shutdown = [&] { executor->Shutdown(); };
  if (args.Has("text-file")) {
    return TranslateFile(*executor, args.String("text-file", ""), static_cast<int>(beam_size),
                         static_cast<int>(max_tokens));
  }

  GenerationRequest request;
  request.source = args.String("text", "");
  request.beam_size = static_cast<int>(beam_size);
  request.max_tokens = static_cast<int>(max_tokens);
  request.sampling.temperature = 0.0f;
  std::string translation;
  GenerationEvent last;
  absl::Notification done;
  ABCD_RETURN_IF_ERROR(executor
                           ->Enqueue(std::move(request),
                                     [&](GenerationEvent event) {
                                       translation += event.text;
                                       if (!event.finished) return;
                                       last = std::move(event);
                                       done.Notify();
                                     })
                           .status());
  done.WaitForNotification();
  ABCD_RETURN_IF_ERROR(last.status);
  if (args.Has("json")) {
    std::cout << nlohmann::json{{"translation", translation},
                                {"finish_reason", FinishReasonName(last.finish_reason)},
                                {"prompt_tokens", last.prompt_tokens},
                                {"completion_tokens", last.completion_tokens},
                                {"beam_size", beam_size}}
                     .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace)
              << "\n";
  } else {
    std::cout << translation << "\n";
  }
  return absl::OkStatus();
}

// tokenize's ids of one text: the tokenizer's, then what /tokenize adds with special tokens
// (server/http/tokenize_route.cc): a decoder's PrefilledIds, an encoder-decoder source's eos.
// An error (text that is not UTF-8) is prefixed with `where`, the flag or line it came from.
absl::StatusOr<std::vector<int32_t>> TokenizeText(const Tokenizer& tokenizer,
                                                  const ModelConfig& config, bool special,
                                                  absl::string_view text, absl::string_view where) {
  absl::StatusOr<std::vector<int32_t>> encoded = tokenizer.Encode(text);
  if (!encoded.ok()) {
    return absl::Status(encoded.status().code(),
                        absl::StrCat(where, ": ", encoded.status().message()));
  }
  std::vector<int32_t> ids = *std::move(encoded);
  if (!special) return ids;
  if (config.is_encoder_decoder()) {
    ids.push_back(config.eos_id);
    return ids;
  }
  return PrefilledIds(config, std::move(ids));
}

// One output line of tokenize: the ids separated by spaces, or a JSON array.
void AppendTokenizeLine(const std::vector<int32_t>& ids, bool json, std::string* out) {
  if (json) out->push_back('[');
  for (size_t i = 0; i < ids.size(); ++i) {
    if (i > 0) out->push_back(json ? ',' : ' ');
    absl::StrAppend(out, ids[i]);
  }
  if (json) out->push_back(']');
  out->push_back('\n');
}

// --jsonl: the text of one record (a JSON string, or an object's string "text").
absl::StatusOr<std::string> TokenizeJsonlText(const std::string& line, int64_t number) {
  const std::string where = absl::StrCat("--text-file line ", number);
  ABCD_RETURN_IF_ERROR(CheckJsonNesting(line, where));
  const nlohmann::json record = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (record.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(where, ": not JSON"));
  if (record.is_string()) return record.get<std::string>();
  if (record.is_object() && record.contains("text") && record["text"].is_string()) {
    return record["text"].get<std::string>();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      where, ": a --jsonl record is a JSON string or an object with a string \"text\" field"));
}

absl::Status RunTokenize(const Arguments& args) {
  const bool text_file = args.Has("text-file");
  if (args.Has("text") == text_file) {
    return absl::InvalidArgumentError("give exactly one of --text and --text-file");
  }
  const bool lines = args.Has("lines"), jsonl = args.Has("jsonl");
  if (lines && jsonl) return absl::InvalidArgumentError("--lines and --jsonl are exclusive");
  if ((lines || jsonl) && !text_file) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", lines ? "lines" : "jsonl", " needs --text-file"));
  }
  const bool json = args.Has("json"), special = !args.Has("no-special");
  const std::string dir = ModelDir(args);
  ABCD_ASSIGN_OR_RETURN(const ModelConfig config, LoadModelDirectoryConfig(dir));
  ABCD_ASSIGN_OR_RETURN(const std::unique_ptr<Tokenizer> tokenizer,
                        LoadModelTokenizer(dir, config));
  std::string out;
  if (!text_file) {
    ABCD_ASSIGN_OR_RETURN(
        const std::vector<int32_t> ids,
        TokenizeText(*tokenizer, config, special, args.String("text", ""), "--text"));
    AppendTokenizeLine(ids, json, &out);
    std::cout << out << std::flush;
    return absl::OkStatus();
  }
  const std::string path = args.String("text-file", "");
  std::ifstream file;
  if (path != "-") {
    file.open(path, std::ios::binary);
    if (!file) return absl::NotFoundError(absl::StrCat("cannot read --text-file ", path));
  }
  std::istream& in = path == "-" ? std::cin : file;
  if (!lines && !jsonl) {  // the whole file, one text
    std::stringstream contents;
    contents << in.rdbuf();
    ABCD_ASSIGN_OR_RETURN(const std::vector<int32_t> ids,
                          TokenizeText(*tokenizer, config, special, contents.str(),
                                       absl::StrCat("--text-file ", path)));
    AppendTokenizeLine(ids, json, &out);
    std::cout << out << std::flush;
    return absl::OkStatus();
  }
  int64_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    std::string text;
    if (jsonl) {
      if (line.find_first_not_of(" \t\r\n") == std::string::npos) continue;
      ABCD_ASSIGN_OR_RETURN(text, TokenizeJsonlText(line, number));
    } else {
      text = std::move(line);
    }
    ABCD_ASSIGN_OR_RETURN(
        const std::vector<int32_t> ids,
        TokenizeText(*tokenizer, config, special, text, absl::StrCat("--text-file line ", number)));
    AppendTokenizeLine(ids, json, &out);
    if (out.size() >= (size_t{1} << 16)) {
      std::cout << out;
      out.clear();
    }
  }
  if (in.bad()) return absl::DataLossError(absl::StrCat("reading --text-file ", path, " failed"));
  std::cout << out << std::flush;
  return absl::OkStatus();
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = argv[1];
  const std::vector<std::string> rest(argv + 2, argv + argc);
  absl::Status status;
  if (command == "info") {
    absl::StatusOr<Arguments> args = Arguments::Parse(rest, {"model", "kv-cache-format"}, {});
    status = args.ok() ? Info(*args) : args.status();
  } else if (command == "generate") {
    absl::StatusOr<Arguments> args = Arguments::Parse(
        rest,
        {"model", "prompt", "max-tokens", "temperature", "top-k", "top-p", "repetition-penalty",
         "seed", "stop", "threads", "weight-format", "cpu-compute", "kv-cache-format"},
        {"ignore-eos", "json"});
    status = args.ok() ? RunGenerate(*args) : args.status();
  } else if (command == "eval") {
    absl::StatusOr<Arguments> args = Arguments::Parse(
        rest,
        {"model", "text", "chunk", "threads", "weight-format", "cpu-compute", "kv-cache-format"},
        {"json"});
    status = args.ok() ? RunEval(*args) : args.status();
  } else if (command == "translate") {
    absl::StatusOr<Arguments> args =
        Arguments::Parse(rest,
                         {"model", "text", "text-file", "beam-size", "max-tokens", "threads",
                          "weight-format", "cpu-compute", "kv-cache-format"},
                         {"json"});
    status = args.ok() ? RunTranslate(*args) : args.status();
  } else if (command == "tokenize") {
    absl::StatusOr<Arguments> args = Arguments::Parse(rest, {"model", "text", "text-file"},
                                                      {"lines", "jsonl", "no-special", "json"});
    status = args.ok() ? RunTokenize(*args) : args.status();
  } else if (command == "--help" || command == "help") {
    std::cout << kUsage;
    return 0;
  } else {
    std::cerr << "unknown command \"" << command << "\"\n" << kUsage;
    return 2;
  }
  if (!status.ok()) {
    std::cerr << "abcd-cli: " << status.message() << "\n";
    return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
  }
  return 0;
}

}  // namespace
}  // namespace abcd

int main(int argc, char** argv) { return abcd::Main(argc, argv); }
