// abcd-bench-cuda: GPU decode benchmarks of the CUDA backend (issue "CUDA backend"):
//   bandwidth  device copy bandwidth (cudaMemcpy device to device), the floor's denominator
//   kernels    the fused state kernels alone: achieved state bandwidth vs copy bandwidth
//   decode     whole decode steps (device sampling, CUDA graphs, and the same steps eagerly
//              beside them) vs batch,
//              softmax at several contexts, each next to the floor
//              (weight_bytes + 2 * batch * state_bytes) / copy_bandwidth, and memory per sequence
//   prefill    one forward pass over N prompt tokens (batch 1, or N / S tokens of each of S
//              sequences): tokens/s and the projections' achieved TFLOP/s against a given
//              bf16 tensor peak (--peak_tflops)
//   reference  CudaModel against the PyTorch reference (bench_reference.py --device cuda, eager
//              and with CUDA graphs) on the same checkpoint, tokens and GPU, as `abcd-bench
//              reference` does on the CPU
// Absolute times only mean something on the GPU they were taken on: the output names it.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <ctime>
#include <iostream>
#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/attention/attention_state_cuda.h"
#include "engine/core/status_macros.h"
#include "engine/device/cuda_context.h"
#include "engine/model/model.h"
#include "engine/model/model_cuda.h"
#include "loadtest/bench/bench_common.h"
#include "loadtest/bench/benchmarks.h"
#include "loadtest/lib/report.h"
#include "server/core/arguments.h"

namespace abcd::bench {
namespace {

using cuda::CudaContext;
using cuda::CudaModel;
using cuda::DeviceArray;

constexpr char kUsage[] = R"(usage: abcd-bench-cuda COMMAND [options]
  bandwidth  [--bandwidth_mb 1024]
  kernels    [--kernel_batches 256,1024] [--heads 16] [--head_dim 64] [--slots 32]
             [--features 32] [--contexts 512,4096,32768] [--iterations 50]
  decode     --models DIR[,DIR..] [--batches 1,2,4,...,1024] [--contexts 512,4096,32768]
             [--steps 50] [--weights bf16|fp16|fp32] [--no_graphs] [--memory_gb 60]
             [--gemv_max_rows N] (16-bit projections of <= N rows: GEMV kernel; 0: cuBLASLt)
  prefill    --models DIR[,DIR..] [--prefill_tokens 2048] [--prefill_sequences 1,4,16]
             [--repeats 3] [--weights bf16|fp16|fp32] [--peak_tflops 989]
             (peak: the GPU's dense 16-bit tensor TFLOP/s; 989 for an H100 / H200 SXM)
  reference  --models DIR[,DIR..] [--reference_batches 1,256] [--reference_steps 64]
             [--repeats 3] [--weights bf16|fp32] [--python python3]
             [--script loadtest/bench_reference.py]
  all        bandwidth + kernels + decode (+ reference with --models)
Common: --device N  --json FILE
Models: loadtest/make_bench_models.py --size gpu writes same-size abc/rfa/t2r/softmax models.
)";

// Times `body` (enqueued on the context's stream) with CUDA events: best of `repeats` runs of
// `iterations` calls, in seconds per call.
template <typename Body>
absl::StatusOr<double> TimeOnDevice(CudaContext& context, int iterations, int repeats,
                                    const Body& body) {
  cudaEvent_t start, stop;
  ABCD_RETURN_IF_ERROR(cuda::Check(cudaEventCreate(&start), "cudaEventCreate"));
  ABCD_RETURN_IF_ERROR(cuda::Check(cudaEventCreate(&stop), "cudaEventCreate"));
  double best = 1e30;
  absl::Status status = body();  // warm-up
  for (int r = 0; r < repeats && status.ok(); ++r) {
    cudaEventRecord(start, context.stream());
    for (int i = 0; i < iterations && status.ok(); ++i) status = body();
    cudaEventRecord(stop, context.stream());
    if (status.ok()) status = cuda::Check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, ms / 1e3 / iterations);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  ABCD_RETURN_IF_ERROR(status);
  return best;
}

absl::StatusOr<Bandwidth> DeviceCopyBandwidth(CudaContext& context, int64_t megabytes) {
  const int64_t floats = megabytes * (1 << 20) / 4;
  ABCD_ASSIGN_OR_RETURN(DeviceArray<float> from, DeviceArray<float>::Allocate(floats));
  ABCD_ASSIGN_OR_RETURN(DeviceArray<float> to, DeviceArray<float>::Allocate(floats));
  ABCD_ASSIGN_OR_RETURN(const double seconds, TimeOnDevice(context, 10, 5, [&] {
                          return cuda::Check(
                              cudaMemcpyAsync(to.data(), from.data(), floats * 4,
                                              cudaMemcpyDeviceToDevice, context.stream()),
                              "cudaMemcpyAsync");
                        }));
  Bandwidth bandwidth;
  bandwidth.buffer_bytes = floats * 4;
  bandwidth.bytes_per_second = 2.0 * static_cast<double>(floats) * 4 / seconds;
  bandwidth.repeats = 5;
  return bandwidth;
}

// Random contiguous states and fused rows for `batch` sequences of one layer.
struct KernelInputs {
  DeviceArray<float> states, rows, out, weights, bias;
  DeviceArray<float*> pointers;
};

absl::StatusOr<KernelInputs> MakeKernelInputs(CudaContext& context, int64_t batch,
                                              int64_t state_floats, int64_t row_width, int64_t d,
                                              int64_t weight_floats) {
  KernelInputs inputs;
  ABCD_ASSIGN_OR_RETURN(
      inputs.states,
      DeviceArray<float>::FromHost(context, std::vector<float>(batch * state_floats, 0.01f)));
  ABCD_ASSIGN_OR_RETURN(inputs.rows, DeviceArray<float>::FromHost(
                                         context, std::vector<float>(batch * row_width, 0.1f)));
  ABCD_ASSIGN_OR_RETURN(inputs.out, DeviceArray<float>::Allocate(batch * d));
  ABCD_ASSIGN_OR_RETURN(inputs.weights, DeviceArray<float>::FromHost(
                                            context, std::vector<float>(weight_floats, 0.05f)));
  ABCD_ASSIGN_OR_RETURN(
      inputs.bias, DeviceArray<float>::FromHost(context, std::vector<float>(weight_floats, 0.0f)));
  std::vector<float*> pointers;
  for (int64_t b = 0; b < batch; ++b) pointers.push_back(inputs.states.data() + b * state_floats);
  ABCD_ASSIGN_OR_RETURN(inputs.pointers, DeviceArray<float*>::FromHost(context, pointers));
  ABCD_RETURN_IF_ERROR(context.Synchronize());
  return inputs;
}

absl::StatusOr<nlohmann::json> RunKernels(CudaContext& context, const Arguments& args,
                                          const Bandwidth& bandwidth) {
  ABCD_ASSIGN_OR_RETURN(const std::vector<int64_t> batches,
                        ParseInts("kernel_batches", args.String("kernel_batches", "256,1024")));
  ABCD_ASSIGN_OR_RETURN(const std::vector<int64_t> contexts,
                        ParseInts("contexts", args.String("contexts", "512,4096,32768")));
  ABCD_ASSIGN_OR_RETURN(const int64_t heads, args.Int("heads", 16));
  ABCD_ASSIGN_OR_RETURN(const int64_t dh, args.Int("head_dim", 64));
  ABCD_ASSIGN_OR_RETURN(const int64_t slots, args.Int("slots", 32));
  ABCD_ASSIGN_OR_RETURN(const int64_t features, args.Int("features", 32));
  ABCD_ASSIGN_OR_RETURN(const int64_t iterations, args.Int("iterations", 50));
  const int64_t d = heads * dh;
  std::cout << absl::StrFormat(
      "== fused state kernels, one layer: %d heads x %d dims; bytes = 2 x batch x state "
      "(bounded), batch x context x 2d x 4 (softmax read) ==\n",
      heads, dh);
  std::cout << absl::StrFormat("%-22s %6s %12s %10s %10s %8s\n", "kernel", "batch", "state/seq",
                               "us", "GB/s", "% copy");
  nlohmann::json results = nlohmann::json::array();
  auto report = [&](const std::string& name, int64_t batch, int64_t bytes_per_sequence,
                    double bytes, double seconds) {
    const double rate = bytes / seconds;
    std::cout << absl::StrFormat("%-22s %6d %12s %10.1f %10.1f %7.0f%%\n", name, batch,
                                 HumanBytes(bytes_per_sequence), seconds * 1e6, rate / 1e9,
                                 100 * rate / bandwidth.bytes_per_second);
    results.push_back({{"kernel", name},
                       {"batch", batch},
                       {"state_bytes_per_sequence", bytes_per_sequence},
                       {"seconds", seconds},
                       {"bytes_per_second", rate},
                       {"fraction_of_copy_bandwidth", rate / bandwidth.bytes_per_second}});
  };
  for (int64_t batch : batches) {
    // abc: extra columns = heads * slots control logits.
    {
      const int64_t floats = heads * slots * (2 * dh + 1);
      const int64_t width = 3 * d + heads * slots;
      ABCD_ASSIGN_OR_RETURN(KernelInputs in, MakeKernelInputs(context, batch, floats, width, d, 1));
      const cuda::StepRows rows{batch, in.rows.data(),     width,         in.rows.data() + d,
                                width, in.pointers.data(), in.out.data(), d};
      const cuda::AbcShape shape{static_cast<int>(heads), static_cast<int>(dh),
                                 static_cast<int>(slots)};
      ABCD_ASSIGN_OR_RETURN(const double seconds,
                            TimeOnDevice(context, static_cast<int>(iterations), 3, [&] {
                              return cuda::AbcStep(context, shape, rows, true);
                            }));
      report(absl::StrCat("abc n=", slots), batch, floats * 4, 2.0 * batch * floats * 4, seconds);
    }
    for (const auto& [name, kind] : {std::pair<std::string, cuda::FeatureMapKind>{
                                         "rfa gaussian gated", cuda::FeatureMapKind::kRfaGaussian},
                                     {"t2r", cuda::FeatureMapKind::kT2r}}) {
      cuda::LinearAttentionParams params;
      params.n_heads = static_cast<int>(heads);
      params.head_dim = static_cast<int>(dh);
      params.kind = kind;
      params.gated = kind == cuda::FeatureMapKind::kRfaGaussian;
      params.random_features = static_cast<int>(features);
      params.learned_features = static_cast<int>(features);
      params.eps = 1e-6f;
      const int64_t f = params.Features();
      const int64_t floats = heads * f * (dh + 1);
      const int64_t width = 3 * d + heads;
      ABCD_ASSIGN_OR_RETURN(KernelInputs in, MakeKernelInputs(context, batch, floats, width, d,
                                                              heads * features * dh));
      params.projection = in.weights.data();
      params.bias = in.bias.data();
      const cuda::StepRows rows{batch, in.rows.data(),     width,         in.rows.data() + d,
                                width, in.pointers.data(), in.out.data(), d};
      ABCD_ASSIGN_OR_RETURN(const double seconds,
                            TimeOnDevice(context, static_cast<int>(iterations), 3, [&] {
                              return cuda::LinearAttentionStep(context, params, rows);
                            }));
      report(name, batch, floats * 4, 2.0 * batch * floats * 4, seconds);
    }
    for (int64_t length : contexts) {
      const int64_t cache_floats = (length + 1) * d;
      if (2.0 * batch * cache_floats * 4 > 40e9) continue;  // keep within device memory
      ABCD_ASSIGN_OR_RETURN(KernelInputs in,
                            MakeKernelInputs(context, batch, 2 * cache_floats, 3 * d, d, 1));
      std::vector<float*> keys, values;
      for (int64_t b = 0; b < batch; ++b) {
        keys.push_back(in.states.data() + b * 2 * cache_floats);
        values.push_back(in.states.data() + b * 2 * cache_floats + cache_floats);
      }
      ABCD_ASSIGN_OR_RETURN(DeviceArray<float*> key_pointers,
                            DeviceArray<float*>::FromHost(context, keys));
      ABCD_ASSIGN_OR_RETURN(DeviceArray<float*> value_pointers,
                            DeviceArray<float*>::FromHost(context, values));
      ABCD_ASSIGN_OR_RETURN(
          DeviceArray<int32_t> lengths,
          DeviceArray<int32_t>::FromHost(
              context, std::vector<int32_t>(batch, static_cast<int32_t>(length))));
      const cuda::StepRows rows{batch, in.rows.data(), 3 * d,         in.rows.data() + d,
                                3 * d, nullptr,        in.out.data(), d};
      const cuda::KvCacheRows cache{key_pointers.data(), value_pointers.data(), lengths.data(),
                                    static_cast<int32_t>(length)};
      ABCD_ASSIGN_OR_RETURN(
          const double seconds, TimeOnDevice(context, static_cast<int>(iterations), 3, [&] {
            return cuda::SoftmaxStep(context, static_cast<int>(heads), static_cast<int>(heads),
                                     static_cast<int>(dh), rows, cache);
          }));
      report(absl::StrCat("softmax split-K ctx ", length), batch, length * 2 * d * 4,
             static_cast<double>(batch) * length * 2 * d * 4, seconds);
    }
  }
  std::cout << "\n";
  return results;
}

absl::StatusOr<cuda::WeightType> WeightTypeFlag(const Arguments& args) {
  const std::string weights = args.String("weights", "bf16");
  if (weights == "bf16") return cuda::WeightType::kBF16;
  if (weights == "fp16") return cuda::WeightType::kF16;
  if (weights == "fp32") return cuda::WeightType::kF32;
  return absl::InvalidArgumentError(
      absl::StrCat("--weights must be bf16, fp16 or fp32, got \"", weights, "\""));
}

absl::StatusOr<nlohmann::json> RunCudaDecode(CudaContext& context, const Arguments& args,
                                             const Bandwidth& bandwidth) {
  const std::vector<std::string> models = SplitList(args.String("models", ""));
  if (models.empty()) return absl::InvalidArgumentError("decode needs --models");
  ABCD_ASSIGN_OR_RETURN(
      const std::vector<int64_t> batches,
      ParseInts("batches", args.String("batches", "1,2,4,8,16,32,64,128,256,512,1024")));
  ABCD_ASSIGN_OR_RETURN(const std::vector<int64_t> contexts,
                        ParseInts("contexts", args.String("contexts", "512,4096,32768")));
  ABCD_ASSIGN_OR_RETURN(const int64_t steps, args.Int("steps", 50));
  ABCD_ASSIGN_OR_RETURN(const double memory_gb, args.Double("memory_gb", 60));
  ABCD_ASSIGN_OR_RETURN(const int64_t gemv_max_rows,
                        args.Int("gemv_max_rows", context.gemv_max_rows()));
  context.set_gemv_max_rows(static_cast<int>(gemv_max_rows));
  cuda::CudaModelOptions options;
  ABCD_ASSIGN_OR_RETURN(options.weights, WeightTypeFlag(args));
  options.cuda_graphs = !args.Has("no_graphs");
  std::cout << "== decode steps (greedy, sampling on the device; time per step incl. the host "
               "round trip) ==\n";
  std::cout << absl::StrFormat("%-10s %7s %6s %12s %10s %10s %7s %12s %9s\n", "model", "context",
                               "batch", "state/seq", "step ms", "floor ms", "x floor", "tokens/s",
                               "eager ms");
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& dir : models) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> cpu_model, Model::Load(dir));
    // Softmax layers make the state grow with the context; bounded models run at any context.
    const int64_t softmax_layers =
        static_cast<int64_t>(cpu_model->state_layout().kv_is_cross.size());
    const bool bounded = softmax_layers == 0;
    const std::vector<int64_t> model_contexts = bounded ? std::vector<int64_t>{0} : contexts;
    for (int64_t length : model_contexts) {
      // The largest batch that fits the memory budget at this context.
      int64_t max_batch = 0;
      for (int64_t batch : batches) max_batch = std::max(max_batch, batch);
      const int64_t kv_per_token = softmax_layers * 2 * cpu_model->config().d_model * 4;
      while (max_batch > 1 &&
             static_cast<double>(max_batch) * (length + 1) * kv_per_token > memory_gb * 1e9) {
        max_batch /= 2;
      }
      options.max_sequences = static_cast<int>(max_batch);
      options.max_context = bounded ? 0 : length + steps + 8;
      ABCD_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model,
                            CudaModel::Create(*cpu_model, context, options));
      for (int64_t batch : batches) {
        if (batch > max_batch) continue;
        std::vector<int> slots;
        for (int64_t b = 0; b < batch; ++b) {
          ABCD_ASSIGN_OR_RETURN(const int slot, model->Acquire());
          if (!bounded) ABCD_RETURN_IF_ERROR(model->SetPositionForBenchmark(slot, length));
          slots.push_back(slot);
        }
        const std::vector<cuda::DeviceSamplingParams> greedy(
            batch, cuda::DeviceSamplingParams{0, 0, 1, 0, 0});
        // Seconds per step, with the model's CUDA graphs or eagerly. Softmax positions are
        // declared, not computed, so a pass may move them: each pass starts at `length`.
        auto time_steps = [&](bool graphs) -> absl::StatusOr<double> {
          model->set_graphs_enabled(graphs);
          for (int slot : slots) {
            if (!bounded) ABCD_RETURN_IF_ERROR(model->SetPositionForBenchmark(slot, length));
          }
          std::vector<int32_t> tokens = Tokens(7, batch, model->config().vocab_size), next;
          for (int i = 0; i < 3; ++i) {  // warm-up
            ABCD_RETURN_IF_ERROR(model->StepSample(slots, tokens, greedy, &next));
          }
          const auto start = BenchClock::now();
          for (int64_t i = 0; i < steps; ++i) {
            ABCD_RETURN_IF_ERROR(model->StepSample(slots, tokens, greedy, &next));
            tokens = next;
          }
          return Seconds(BenchClock::now() - start) / steps;
        };
        const bool has_graphs = model->uses_graphs();
        ABCD_ASSIGN_OR_RETURN(const double step_seconds, time_steps(has_graphs));
        // The eager step too, side by side: what the graphs save at each batch.
        double eager_seconds = step_seconds;
        if (has_graphs) {
          ABCD_ASSIGN_OR_RETURN(eager_seconds, time_steps(false));
        }
        model->set_graphs_enabled(true);
        const int64_t state_bytes = model->state_bytes_per_sequence() + (length + 1) * kv_per_token;
        const double floor =
            FloorSeconds(model->weight_bytes(), batch,
                         StepStateBytes(state_bytes, model->state_bytes_per_sequence()), bandwidth);
        const std::string label = ModelLabel(dir);
        std::cout << absl::StrFormat("%-10s %7s %6d %12s %10.3f %10.3f %7.2f %12.0f %9.3f\n", label,
                                     bounded ? "any" : absl::StrCat(length), batch,
                                     HumanBytes(state_bytes), step_seconds * 1e3, floor * 1e3,
                                     step_seconds / floor, batch / step_seconds,
                                     eager_seconds * 1e3);
        results.push_back({{"model", label},
                           {"context", length},
                           {"batch", batch},
                           {"state_bytes_per_sequence", state_bytes},
                           {"weight_bytes", model->weight_bytes()},
                           {"step_seconds", step_seconds},
                           {"floor_seconds", floor},
                           {"graphs", has_graphs},
                           {"eager_step_seconds", eager_seconds},
                           {"tokens_per_second", batch / step_seconds}});
        for (int slot : slots) model->Release(slot);
      }
    }
  }
  std::cout << "\n";
  return results;
}

// Multiply-adds per token of the decoder's projections (fused q|k|v|extra, output, FFN): what
// a prefill's GEMMs compute per row. The LM head is left out (a prefill wants one row's logits).
int64_t ProjectionMacsPerToken(const Model& model) {
  int64_t macs = 0;
  for (const Model::Block& block : model.decoder().blocks) {
    const AttentionLayer& attention = *block.self_attention;
    for (const PackedMatrix* matrix :
         {&attention.fused_matrix(), &attention.out_matrix(), &block.fc1, &block.fc2}) {
      macs += matrix->out() * matrix->in();
    }
  }
  return macs;
}

// Prefill: one Forward() of `tokens` rows, the logits of each sequence's last row only (what a
// server's prompt pass asks for), on fresh slots each time; best of `repeats` after a warm-up.
absl::StatusOr<nlohmann::json> RunCudaPrefill(CudaContext& context, const Arguments& args) {
  const std::vector<std::string> models = SplitList(args.String("models", ""));
  if (models.empty()) return absl::InvalidArgumentError("prefill needs --models");
  ABCD_ASSIGN_OR_RETURN(const int64_t tokens, args.Int("prefill_tokens", 2048));
  ABCD_ASSIGN_OR_RETURN(const std::vector<int64_t> sequence_counts,
                        ParseInts("prefill_sequences", args.String("prefill_sequences", "1,4,16")));
  ABCD_ASSIGN_OR_RETURN(const int64_t repeats, args.Int("repeats", 3));
  ABCD_ASSIGN_OR_RETURN(const double peak_tflops, args.Double("peak_tflops", 989));
  if (tokens < 1 || repeats < 1 || !(peak_tflops > 0)) {
    return absl::InvalidArgumentError(
        "--prefill_tokens and --repeats must be >= 1, --peak_tflops > 0");
  }
  int64_t max_sequences = 1;
  for (int64_t count : sequence_counts) {
    if (count < 1 || count > tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--prefill_sequences: ", count, " is outside [1, ", tokens, "] (--prefill_tokens)"));
    }
    max_sequences = std::max(max_sequences, count);
  }
  cuda::CudaModelOptions options;
  ABCD_ASSIGN_OR_RETURN(options.weights, WeightTypeFlag(args));
  options.cuda_graphs = false;  // a prefill pass runs eagerly
  options.max_sequences = static_cast<int>(max_sequences);
  options.max_prefill_tokens = static_cast<int>(tokens);
  options.max_context = tokens + 8;
  std::cout << absl::StrFormat(
      "== prefill: one forward pass of %d tokens (S sequences of %d / S), logits of each "
      "sequence's last row; projections' TFLOP/s against a %.0f TFLOP/s peak ==\n",
      tokens, tokens, peak_tflops);
  std::cout << absl::StrFormat("%-10s %5s %10s %12s %10s %8s\n", "model", "S", "pass ms",
                               "tokens/s", "TFLOP/s", "% peak");
  nlohmann::json results = nlohmann::json::array();
  for (const std::string& dir : models) {
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Model> cpu_model, Model::Load(dir));
    const double flops_per_token = 2.0 * static_cast<double>(ProjectionMacsPerToken(*cpu_model));
    ABCD_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> model,
                          CudaModel::Create(*cpu_model, context, options));
    const std::vector<int32_t> prompt = Tokens(11, tokens, cpu_model->config().vocab_size);
    for (int64_t count : sequence_counts) {
      // S runs of tokens / S rows (the first ones one longer when S does not divide N).
      auto pass = [&]() -> absl::StatusOr<double> {
        std::vector<int> slots;
        std::vector<CudaModel::SequenceTokens> entries;
        std::vector<int64_t> logit_rows;
        int64_t begin = 0;
        absl::Status status;
        for (int64_t s = 0; s < count && status.ok(); ++s) {
          absl::StatusOr<int> slot = model->Acquire();
          if (!slot.ok()) {
            status = slot.status();
            break;
          }
          slots.push_back(*slot);
          const int64_t length = tokens / count + (s < tokens % count ? 1 : 0);
          entries.emplace_back(*slot, std::span<const int32_t>(prompt).subspan(
                                          static_cast<size_t>(begin), static_cast<size_t>(length)));
          begin += length;
          logit_rows.push_back(begin - 1);
        }
        std::vector<float> logits;
        double seconds = 0;
        if (status.ok()) status = context.Synchronize();  // the slots' resets
        if (status.ok()) {
          const auto start = BenchClock::now();
          status = model->Forward(entries, logit_rows, &logits);  // waits for the logits
          seconds = Seconds(BenchClock::now() - start);
        }
        for (int slot : slots) model->Release(slot);
        ABCD_RETURN_IF_ERROR(status);
        return seconds;
      };
      ABCD_RETURN_IF_ERROR(pass().status());  // warm-up
      double best = 1e30;
      for (int64_t r = 0; r < repeats; ++r) {
        ABCD_ASSIGN_OR_RETURN(const double seconds, pass());
        best = std::min(best, seconds);
      }
      const double tflops = flops_per_token * static_cast<double>(tokens) / best / 1e12;
      const std::string label = ModelLabel(dir);
      std::cout << absl::StrFormat("%-10s %5d %10.3f %12.0f %10.1f %7.1f%%\n", label, count,
                                   best * 1e3, static_cast<double>(tokens) / best, tflops,
                                   100 * tflops / peak_tflops);
      results.push_back({{"model", label},
                         {"tokens", tokens},
                         {"sequences", count},
                         {"pass_seconds", best},
                         {"tokens_per_second", static_cast<double>(tokens) / best},
                         {"projection_flops_per_token", flops_per_token},
                         {"projection_tflops", tflops},
                         {"peak_tflops", peak_tflops},
                         {"fraction_of_peak", tflops / peak_tflops}});
    }
  }
  std::cout << "\n";
  return results;
}

// One pass of CudaModel over the reference's tokens: greedy device sampling every step (the
// serving path: only ids come back), logits copied back at the last step for the comparison.
absl::StatusOr<ReferencePass> CudaEnginePass(CudaContext& context, cuda::WeightType weights,
                                             const Model& model,
                                             const std::vector<std::vector<int32_t>>& rows,
                                             int steps) {
  cuda::CudaModelOptions options;
  options.max_sequences = static_cast<int>(rows.size());
  options.max_context = steps + 8;
  options.weights = weights;
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<CudaModel> cuda_model,
                        CudaModel::Create(model, context, options));
  std::vector<int> slots;
  for (size_t b = 0; b < rows.size(); ++b) {
    ABCD_ASSIGN_OR_RETURN(const int slot, cuda_model->Acquire());
    slots.push_back(slot);
  }
  const std::vector<cuda::DeviceSamplingParams> greedy(rows.size(),
                                                       cuda::DeviceSamplingParams{0, 0, 1, 0, 0});
  const int64_t vocab = model.config().vocab_size;
  ReferencePass pass;
  std::vector<int32_t> column(rows.size()), next;
  std::vector<float> logits;
  const auto start = BenchClock::now();
  for (int t = 0; t < steps; ++t) {
    for (size_t b = 0; b < rows.size(); ++b) column[b] = rows[b][static_cast<size_t>(t)];
    if (t + 1 < steps) {
      ABCD_RETURN_IF_ERROR(cuda_model->StepSample(slots, column, greedy, &next));
      pass.argmax.push_back(next[0]);
    } else {
      ABCD_RETURN_IF_ERROR(cuda_model->StepLogits(slots, column, &logits));
      pass.argmax.push_back(static_cast<int>(
          std::max_element(logits.begin(), logits.begin() + vocab) - logits.begin()));
    }
  }
  pass.step_ms = Seconds(BenchClock::now() - start) / steps * 1000;
  pass.last_logits.assign(logits.begin(), logits.begin() + vocab);
  pass.state_bytes =
      cuda_model->state_bytes_per_sequence() + steps * cuda_model->kv_bytes_per_token();
  return pass;
}

absl::StatusOr<nlohmann::json> RunCudaReference(CudaContext& context, const Arguments& args,
                                                const Bandwidth& bandwidth) {
  ReferenceOptions o;
  o.models = SplitList(args.String("models", ""));
  if (o.models.empty()) return absl::InvalidArgumentError("reference needs --models");
  ABCD_ASSIGN_OR_RETURN(o.batches,
                        ParseInts("reference_batches", args.String("reference_batches", "1,256")));
  ABCD_ASSIGN_OR_RETURN(const int64_t steps, args.Int("reference_steps", 64));
  ABCD_ASSIGN_OR_RETURN(const int64_t repeats, args.Int("repeats", 3));
  o.steps = static_cast<int>(steps);
  o.repeats = static_cast<int>(repeats);
  o.bandwidth = bandwidth;
  o.python = args.String("python", "python3");
  o.script = args.String("script", absl::StrCat(ABCD_SOURCE_DIR, "/loadtest/bench_reference.py"));
  ABCD_ASSIGN_OR_RETURN(const cuda::WeightType weights, WeightTypeFlag(args));
  // PyTorch eager and, where the state keeps its shape, replaying a captured CUDA graph.
  o.script_args = absl::StrCat("--device cuda --cuda-graphs --dtype ",
                               weights == cuda::WeightType::kBF16 ? "bfloat16" : "float32");
  o.engine_pass = [&context, weights](const Model& model,
                                      const std::vector<std::vector<int32_t>>& rows, int n) {
    return CudaEnginePass(context, weights, model, rows, n);
  };
  return RunReference(o);
}

absl::StatusOr<int> Run(const std::string& command, const Arguments& args) {
  ABCD_ASSIGN_OR_RETURN(const int64_t device, args.Int("device", 0));
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<CudaContext> context,
                        CudaContext::Create(static_cast<int>(device)));
  nlohmann::json out;
  char date[32];
  const std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
  out["device"] = {{"name", context->device_name()}, {"sms", context->sm_count()}, {"date", date}};
  std::cout << absl::StrFormat("device %d: %s, %d SMs, %s\n\n", device, context->device_name(),
                               context->sm_count(), date);
  const bool all = command == "all";
  if (!all && command != "bandwidth" && command != "kernels" && command != "decode" &&
      command != "prefill" && command != "reference") {
    return absl::InvalidArgumentError(absl::StrCat("unknown command \"", command, "\""));
  }
  ABCD_ASSIGN_OR_RETURN(const int64_t megabytes, args.Int("bandwidth_mb", 1024));
  ABCD_ASSIGN_OR_RETURN(const Bandwidth bandwidth, DeviceCopyBandwidth(*context, megabytes));
  std::cout << absl::StrFormat(
      "== copy bandwidth: cudaMemcpy device to device of %d MiB, best of 5: %.1f GB/s (read + "
      "write) ==\n\n",
      megabytes, bandwidth.bytes_per_second / 1e9);
  out["bandwidth"] = {{"bytes_per_second", bandwidth.bytes_per_second},
                      {"buffer_bytes", bandwidth.buffer_bytes}};
  if (all || command == "kernels") {
    ABCD_ASSIGN_OR_RETURN(out["kernels"], RunKernels(*context, args, bandwidth));
  }
  if (all || command == "decode") {
    ABCD_ASSIGN_OR_RETURN(out["decode"], RunCudaDecode(*context, args, bandwidth));
  }
  if (command == "prefill") {
    ABCD_ASSIGN_OR_RETURN(out["prefill"], RunCudaPrefill(*context, args));
  }
  if ((all && args.Has("models")) || command == "reference") {
    ABCD_ASSIGN_OR_RETURN(out["reference"], RunCudaReference(*context, args, bandwidth));
  }
  if (args.Has("json")) {
    ABCD_RETURN_IF_ERROR(loadtest::WriteJsonFile(args.String("json", ""), out));
    std::cout << "wrote " << args.String("json", "") << "\n";
  }
  return 0;
}

}  // namespace
}  // namespace abcd::bench

int main(int argc, char** argv) {
  if (argc < 2 || std::string(argv[1]) == "--help" || std::string(argv[1]) == "-h") {
    std::cout << abcd::bench::kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::set<std::string> valued = {"models",          "batches",        "contexts",
                                        "steps",           "gemv_max_rows",  "weights",
                                        "memory_gb",       "device",         "json",
                                        "heads",           "head_dim",       "slots",
                                        "features",        "iterations",     "kernel_batches",
                                        "bandwidth_mb",    "prefill_tokens", "prefill_sequences",
                                        "repeats",         "peak_tflops",    "reference_batches",
                                        "reference_steps", "python",         "script"};
  absl::StatusOr<abcd::Arguments> args = abcd::Arguments::Parse(
      std::vector<std::string>(argv + 2, argv + argc), valued, {"no_graphs"});
  if (!args.ok()) {
    std::cerr << "abcd-bench-cuda: " << args.status().message() << "\n" << abcd::bench::kUsage;
    return 2;
  }
  absl::StatusOr<int> code = abcd::bench::Run(argv[1], *args);
  if (!code.ok()) {
    std::cerr << "abcd-bench-cuda: " << code.status() << "\n";
    return 1;
  }
  return *code;
}
