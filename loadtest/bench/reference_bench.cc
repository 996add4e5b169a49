// The engine against the PyTorch reference on the same checkpoint and tokens.
//
// Both run the recurrent decode: B sequences from an empty state, one token each per step, T
// steps, logits for every row, argmax of row 0 taken every step. The engine is timed for
// `repeats` passes before and `repeats` passes after the reference (which runs in one Python
// process in between), so drift from other load on the machine hits both sides; each side
// reports the median pass. The engine's floor (bench_common.h) uses the state size after
// the last step. The argmax sequences and the last logits of row 0 are compared, so
// the two sides provably computed the same thing.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/core/status_macros.h"
#include "engine/state/state_pool.h"
#include "loadtest/bench/benchmarks.h"

namespace abcd::bench {
namespace {

using Pass = ReferencePass;

absl::StatusOr<Pass> CpuEnginePass(const Model& model,
                                   const std::vector<std::vector<int32_t>>& rows, int steps) {
  StatePool pool(model.state_layout(), kUnlimitedStateBytes);
  std::vector<SequenceId> ids;
  for (size_t i = 0; i < rows.size(); ++i) {
    ABCD_ASSIGN_OR_RETURN(const SequenceId id, pool.Acquire());
    ids.push_back(id);
  }
  const int vocab = model.config().vocab_size;
  Pass pass;
  std::vector<DecodeRow> batch(rows.size());
  std::vector<float> logits;
  const auto start = BenchClock::now();
  for (int t = 0; t < steps; ++t) {
    for (size_t i = 0; i < rows.size(); ++i) {
      batch[i] = {ids[i], rows[i][static_cast<size_t>(t)], true};
    }
    logits.clear();
    ABCD_RETURN_IF_ERROR(model.Decode(batch, pool, &logits));
    pass.argmax.push_back(static_cast<int>(
        std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin()));
  }
  pass.step_ms = Seconds(BenchClock::now() - start) / steps * 1000;
  pass.last_logits.assign(logits.begin(), logits.begin() + vocab);
  ABCD_ASSIGN_OR_RETURN(pass.state_bytes, pool.SequenceBytes(ids[0]));
  return pass;
}

absl::StatusOr<std::string> RunCommand(const std::string& command) {
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("cannot run: ", command));
  std::string output;
  char buffer[1 << 16];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  const int rc = pclose(pipe);
  if (rc != 0) {
    return absl::InternalError(absl::StrCat("exit status ", rc, " from: ", command));
  }
  return output;
}

std::string Quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

}  // namespace

absl::StatusOr<nlohmann::json> RunReference(const ReferenceOptions& options) {
  nlohmann::json out;
  out["steps"] = options.steps;
  out["repeats"] = options.repeats;
  out["threads"] = options.threads;
  nlohmann::json results = nlohmann::json::array();
  std::cout << "== engine vs PyTorch reference (recurrent decode from an empty state, "
            << options.steps << " steps, " << options.threads << " thread(s) each) ==\n";
  std::cout << absl::StrFormat("%-8s %6s %14s %9s %14s %12s %12s %8s %8s %10s %18s %9s\n", "model",
                               "batch", "engine ms/step", "floor ms", "torch ms/step",
                               "engine tok/s", "torch tok/s", "speedup", "argmax=", "max|dlog|",
                               "graph ms, =eager", "vs graph");
  for (const std::string& dir : options.models) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir));
    const std::string name = ModelLabel(dir);
    // The same tokens for both sides, through a file.
    std::map<int64_t, std::vector<std::vector<int32_t>>> tokens;
    nlohmann::json file;
    for (int64_t batch : options.batches) {
      auto& rows = tokens[batch];
      for (int64_t i = 0; i < batch; ++i) {
        rows.push_back(Tokens(static_cast<uint64_t>(batch * 1000 + i), options.steps,
                              model->config().vocab_size));
      }
      file["batches"][std::to_string(batch)] = rows;
    }
    const std::string tokens_path = (std::filesystem::temp_directory_path() /
                                     absl::StrCat("abcd-bench-tokens-", getpid(), ".json"))
                                        .string();
    std::ofstream(tokens_path) << file.dump();

    const EnginePassFunction engine_pass =
        options.engine_pass ? options.engine_pass : EnginePassFunction(CpuEnginePass);
    std::map<int64_t, std::vector<Pass>> engine;
    for (int64_t batch : options.batches) {
      for (int r = 0; r < options.repeats; ++r) {
        ABCD_ASSIGN_OR_RETURN(Pass p, engine_pass(*model, tokens[batch], options.steps));
        engine[batch].push_back(std::move(p));
      }
    }
    const std::string command =
        absl::StrCat(Quote(options.python), " ", Quote(options.script), " --model ", Quote(dir),
                     " --tokens ", Quote(tokens_path), " --threads ", options.threads,
                     " --repeats ", options.repeats, " ", options.script_args);
    absl::StatusOr<std::string> output = RunCommand(command);
    std::filesystem::remove(tokens_path);
    if (!output.ok()) return output.status();
    for (int64_t batch : options.batches) {
      for (int r = 0; r < options.repeats; ++r) {
        ABCD_ASSIGN_OR_RETURN(Pass p, engine_pass(*model, tokens[batch], options.steps));
        engine[batch].push_back(std::move(p));
      }
    }
    const nlohmann::json reference = nlohmann::json::parse(*output, nullptr, false);
    if (reference.is_discarded() || !reference.contains("results")) {
      return absl::InternalError(absl::StrCat("bench_reference.py printed no JSON: ", *output));
    }
    for (const nlohmann::json& ref : reference["results"]) {
      const int64_t batch = ref["batch"].get<int64_t>();
      std::vector<double> engine_ms;
      for (const Pass& p : engine[batch]) engine_ms.push_back(p.step_ms);
      const double e = Median(engine_ms);
      const double t = Median(ref["step_ms"].get<std::vector<double>>());
      const Pass& first = engine[batch].front();
      const std::vector<int> ref_argmax = ref["argmax"].get<std::vector<int>>();
      int agree = 0;
      for (size_t i = 0; i < ref_argmax.size() && i < first.argmax.size(); ++i) {
        agree += ref_argmax[i] == first.argmax[i];
      }
      const std::vector<float> ref_logits = ref["last_logits"].get<std::vector<float>>();
      double max_diff = 0;
      for (size_t i = 0; i < ref_logits.size() && i < first.last_logits.size(); ++i) {
        max_diff =
            std::max(max_diff, static_cast<double>(std::abs(ref_logits[i] - first.last_logits[i])));
      }
      const double floor_ms =
          FloorSeconds(model->weight_bytes(), batch,
                       StepStateBytes(first.state_bytes, model->state_layout().FixedBytes()),
                       options.bandwidth) *
          1000;
      // PyTorch replaying a captured CUDA graph of a step (--cuda-graphs), where it can.
      nlohmann::json graph = nullptr;
      std::string graph_ms = "-", graph_speedup = "-";
      if (ref.contains("graph_step_ms") && ref["graph_step_ms"].is_array()) {
        const double g = Median(ref["graph_step_ms"].get<std::vector<double>>());
        // A wrong capture would still time something: its tokens must be eager PyTorch's.
        const std::vector<int> graph_argmax = ref.value("graph_argmax", std::vector<int>{});
        int graph_agree = 0;
        for (size_t i = 0; i < graph_argmax.size() && i < ref_argmax.size(); ++i) {
          graph_agree += graph_argmax[i] == ref_argmax[i];
        }
        graph = {{"reference_step_ms", g},
                 {"reference_step_ms_passes", ref["graph_step_ms"]},
                 {"speedup", g / e},
                 {"argmax_agree_with_eager", graph_agree},
                 {"argmax_steps", graph_argmax.size()}};
        graph_ms =
            absl::StrFormat("%.3f %d/%d", g, graph_agree, static_cast<int>(graph_argmax.size()));
        graph_speedup = absl::StrFormat("%.2fx", g / e);
      } else if (ref.contains("graph_note")) {
        graph = {{"note", ref["graph_note"]}};
      }
      std::cout << absl::StrFormat(
          "%-8s %6d %14.3f %9.3f %14.3f %12.1f %12.1f %7.2fx %4d/%-3d %10.2e %18s %9s\n", name,
          batch, e, floor_ms, t, batch / (e / 1000), batch / (t / 1000), t / e, agree,
          static_cast<int>(ref_argmax.size()), max_diff, graph_ms, graph_speedup);
      results.push_back({{"model", dir},
                         {"label", name},
                         {"attention", AttentionName(*model)},
                         {"weight_bytes", model->weight_bytes()},
                         {"batch", batch},
                         {"engine_step_ms", e},
                         {"engine_step_ms_passes", engine_ms},
                         {"floor_ms", floor_ms},
                         {"state_bytes", first.state_bytes},
                         {"reference_step_ms", t},
                         {"reference_step_ms_passes", ref["step_ms"]},
                         {"speedup", t / e},
                         {"argmax_agree", agree},
                         {"argmax_steps", ref_argmax.size()},
                         {"max_abs_logit_diff", max_diff},
                         {"reference_cuda_graph", graph}});
    }
    out["torch"] = reference.value("torch", "");
    out["torch_threads"] = reference.value("threads", 0);
  }
  out["results"] = std::move(results);
  std::cout << "\n";
  return out;
}

}  // namespace abcd::bench
