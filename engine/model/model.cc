#include "engine/model/model.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/attention/softmax_state.h"
#include "engine/core/status_macros.h"
#include "engine/model/attention_loader.h"
#include "engine/model/checkpoint.h"
#include "engine/model/decoder_forward.h"
#include "engine/model/safetensors.h"
#include "engine/model/weights.h"
#include "engine/ops/elementwise.h"
#include "engine/ops/matmul.h"

namespace abcd {

Model::Model() = default;
Model::~Model() = default;

namespace {

// The checkpoint's own matrix format: its embedding's dtype (abcd or Hugging Face names).
WeightFormat NativeFormat(const Checkpoint& file) {
  absl::StatusOr<const TensorView*> embed = file.Get("embed.weight");
  for (const char* name : {"model.embed_tokens.weight", "model.embeddings.weight"}) {
    if (!embed.ok()) embed = file.Get(name);
  }
  if (!embed.ok()) return WeightFormat::kF32;
  switch ((*embed)->dtype) {
    case DType::kBF16:
      return WeightFormat::kBF16;
    case DType::kF16:
      return WeightFormat::kF16;
    default:
      return WeightFormat::kF32;
  }
}

absl::StatusOr<PackedMatrix> LoadMatrix(WeightLoader& weights, const std::string& name, int64_t out,
                                        int64_t in, WeightFormat format) {
  ABCD_ASSIGN_OR_RETURN(std::vector<float> w, weights.Load(name, {out, in}));
  return PackedMatrix::Pack(w, out, in, format);
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> Model::Load(const std::string& dir,
                                                   const ModelLoadOptions& options) {
  std::unique_ptr<Model> model(new Model());
  model->directory_ = dir;
  ABCD_ASSIGN_OR_RETURN(model->config_, LoadModelDirectoryConfig(dir));
  // txl rings (K/V written once, never accumulated) take the KV cache's storage format.
  for (LayerSpec& layer : model->config_.decoder_layers) {
    if (layer.attention.type == AttentionType::kTxl) {
      layer.attention.ring_format = options.kv_cache_format;
    }
  }
  ABCD_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> file, Checkpoint::Open(dir));
  model->weight_format_ = options.weight_format.value_or(NativeFormat(*file));
  WeightLoader weights(*file);
  const ModelConfig& c = model->config_;
  if (c.is_hf()) {
    ABCD_RETURN_IF_ERROR(model->LoadHf(weights));
    model->non_finite_tensors_ = weights.non_finite();
    model->BuildLayout();
    model->layout_.kv_format = options.kv_cache_format;
    model->weight_bytes_ = model->CountWeightBytes();
    return model;
  }
  const int64_t vocab = c.vocab_size, d = c.d_model;
  const WeightFormat format = model->weight_format_;
  ABCD_ASSIGN_OR_RETURN(model->embedding_, LoadMatrix(weights, "embed.weight", vocab, d, format));
  if (!c.tie_embeddings) {
    ABCD_ASSIGN_OR_RETURN(model->lm_head_, LoadMatrix(weights, "lm_head.weight", vocab, d, format));
  }
  model->decoder_ = std::make_unique<Stack>();
  ABCD_RETURN_IF_ERROR(model->LoadStack("decoder", c.decoder_layers, weights, *model->decoder_));
  if (c.is_encoder_decoder()) {
    model->encoder_ = std::make_unique<Stack>();
    ABCD_RETURN_IF_ERROR(model->LoadStack("encoder", c.encoder_layers, weights, *model->encoder_));
  }
  if (c.gmat) {
    ABCD_ASSIGN_OR_RETURN(model->memory_embed_,
                          weights.Load("encoder.memory_embed", {int64_t{c.gmat->memory}, d}));
  }
  ABCD_RETURN_IF_ERROR(weights.CheckAllUsed());
  // After the tensors matched the config: a config naming a huge width fails on the first
  // tensor's shape above, before this allocates d_model / 2 doubles.
  if (c.positional == Positional::kSinusoidal) {
    model->position_denominators_ = cpu::SinusoidalDenominators(c.d_model);
  }
  model->non_finite_tensors_ = weights.non_finite();
  model->BuildLayout();
  model->layout_.kv_format = options.kv_cache_format;
  model->weight_bytes_ = model->CountWeightBytes();
  return model;
}

int64_t Model::projection_macs_per_token() const {
  int64_t macs = head().out() * head().in();
  for (const Block& b : decoder_->blocks) {
    macs += b.fc1.out() * b.fc1.in() + b.fc2.out() * b.fc2.in();
    macs += b.self_attention->projection_macs_per_token();
    if (b.cross_attention) macs += b.cross_attention->projection_macs_per_token();
  }
  return macs;
}

int64_t Model::CountWeightBytes() const {
  int64_t bytes = embedding_.bytes() + lm_head_.bytes();
  auto floats = [](const std::vector<float>& v) { return static_cast<int64_t>(4 * v.size()); };
  bytes += floats(memory_embed_);
  for (const Stack* stack : {decoder_.get(), encoder_.get()}) {
    if (stack == nullptr) continue;
    bytes += floats(stack->ln_f_weight) + floats(stack->ln_f_bias);
    for (const Block& b : stack->blocks) {
      bytes += floats(b.ln1_weight) + floats(b.ln1_bias) + floats(b.ln2_weight) +
               floats(b.ln2_bias) + floats(b.ln_cross_weight) + floats(b.ln_cross_bias);
      bytes += b.fc1.bytes() + b.fc2.bytes() + floats(b.fc1_bias) + floats(b.fc2_bias);
      bytes += b.self_attention->weight_bytes();
      if (b.cross_attention) bytes += b.cross_attention->weight_bytes();
    }
  }
  return bytes;
}

absl::Status Model::LoadStack(const std::string& name, const std::vector<LayerSpec>& layers,
                              WeightLoader& weights, Stack& stack) {
  const int64_t d = config_.d_model, ff = config_.d_ff;
  const std::string shared = name + ".shared_control";
  for (size_t i = 0; i < layers.size(); ++i) {
    const std::string p = absl::StrCat(name, ".layers.", i);
    Block block;
    ABCD_ASSIGN_OR_RETURN(block.ln1_weight, weights.Load(p + ".ln1.weight", {d}));
    ABCD_ASSIGN_OR_RETURN(block.ln1_bias, weights.Load(p + ".ln1.bias", {d}));
    ABCD_ASSIGN_OR_RETURN(block.ln2_weight, weights.Load(p + ".ln2.weight", {d}));
    ABCD_ASSIGN_OR_RETURN(block.ln2_bias, weights.Load(p + ".ln2.bias", {d}));
    ABCD_ASSIGN_OR_RETURN(block.self_attention,
                          LoadAttentionLayer(config_, layers[i].attention, p + ".attn", shared,
                                             /*cross=*/false, weight_format_, weights));
    if (layers[i].cross_attention) {
      ABCD_ASSIGN_OR_RETURN(block.ln_cross_weight, weights.Load(p + ".ln_cross.weight", {d}));
      ABCD_ASSIGN_OR_RETURN(block.ln_cross_bias, weights.Load(p + ".ln_cross.bias", {d}));
      ABCD_ASSIGN_OR_RETURN(block.cross_attention,
                            LoadAttentionLayer(config_, *layers[i].cross_attention, p + ".cross",
                                               "", /*cross=*/true, weight_format_, weights));
    }
    ABCD_ASSIGN_OR_RETURN(block.fc1,
                          LoadMatrix(weights, p + ".ffn.fc1.weight", ff, d, weight_format_));
    ABCD_ASSIGN_OR_RETURN(block.fc1_bias, weights.Load(p + ".ffn.fc1.bias", {ff}));
    ABCD_ASSIGN_OR_RETURN(block.fc2,
                          LoadMatrix(weights, p + ".ffn.fc2.weight", d, ff, weight_format_));
    ABCD_ASSIGN_OR_RETURN(block.fc2_bias, weights.Load(p + ".ffn.fc2.bias", {d}));
    stack.blocks.push_back(std::move(block));
  }
  if (config_.norm == Norm::kPost) return absl::OkStatus();  // post-LN blocks: no final ln_f
  ABCD_ASSIGN_OR_RETURN(stack.ln_f_weight, weights.Load(name + ".ln_f.weight", {d}));
  ABCD_ASSIGN_OR_RETURN(stack.ln_f_bias, weights.Load(name + ".ln_f.bias", {d}));
  return absl::OkStatus();
}

void Model::BuildLayout() {
  std::string description = absl::StrCat("d=", config_.d_model, ";h=", config_.n_heads);
  auto place = [&](const AttentionLayer& layer, bool cross) {
    StateLayout::Slot slot;
    const AttentionState& state = layer.state();
    if (state.UsesKvCache()) {
      slot.kv_index = static_cast<int>(layout_.kv_is_cross.size());
      layout_.kv_is_cross.push_back(cross);
    } else {
      slot.fixed_offset = static_cast<int64_t>(layout_.initial_fixed.size());
      slot.fixed_floats = state.FixedFloats();
      layout_.initial_fixed.resize(slot.fixed_offset + slot.fixed_floats);
      state.Init(layout_.initial_fixed.data() + slot.fixed_offset);
    }
    absl::StrAppend(&description, ";", DescribeAttention(layer.spec()));
    return slot;
  };
  for (const Block& block : decoder_->blocks) {
    layout_.self.push_back(place(*block.self_attention, /*cross=*/false));
    if (block.cross_attention)
      layout_.cross.push_back(place(*block.cross_attention, /*cross=*/true));
  }
  layout_.kv_width = config_.d_model;
  // GQA softmax (Hugging Face Llama): the cache rows hold the key/value heads only.
  for (const Block& block : decoder_->blocks) {
    if (const auto* softmax = dynamic_cast<const SoftmaxState*>(&block.self_attention->state());
        softmax != nullptr && config_.is_hf()) {
      layout_.kv_width = softmax->KvWidth();
    }
  }
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : description) hash = (hash ^ ch) * 1099511628211ull;
  layout_.fingerprint = hash;
}

void Model::Embed(int32_t token, int64_t position, float* row) const {
  const int64_t d = config_.d_model;
  const float scale = config_.scale_embeddings ? std::sqrt(static_cast<float>(d)) : 1.0f;
  embedding_.Row(token, row);
  if (scale != 1.0f) {
    for (int64_t i = 0; i < d; ++i) row[i] *= scale;
  }
  if (config_.positional == Positional::kSinusoidal) {
    cpu::AddSinusoidalPosition(position, position_denominators_, row);
  }
}

void Model::FeedForward(CpuContext& ctx, const Block& block, const float* x_norm, int64_t rows,
                        float* out) const {
  const int64_t ff = config_.d_ff;
  const float* fc1_bias = block.fc1_bias.empty() ? nullptr : block.fc1_bias.data();
  const float* fc2_bias = block.fc2_bias.empty() ? nullptr : block.fc2_bias.data();
  if (config_.activation == Activation::kSwiGlu) {
    float* gate_up = ctx.Buffer(Scratch::kHidden, rows * 2 * ff);
    float* hidden = ctx.Buffer(Scratch::kGated, rows * ff);
    cpu::Linear(x_norm, rows, block.fc1, fc1_bias, gate_up, ctx);
    cpu::SwiGlu(gate_up, rows, ff, hidden, &ctx.pool());
    cpu::Linear(hidden, rows, block.fc2, fc2_bias, out, ctx);
    return;
  }
  float* hidden = ctx.Buffer(Scratch::kHidden, rows * ff);
  cpu::Linear(x_norm, rows, block.fc1, fc1_bias, hidden, ctx);
  cpu::Activate(config_.activation, hidden, rows * ff, &ctx.pool());
  cpu::Linear(hidden, rows, block.fc2, fc2_bias, out, ctx);
}

void Model::Normalize(const float* x, int64_t rows, const std::vector<float>& weight,
                      const std::vector<float>& bias, float* y, ThreadPool* pool) const {
  const int64_t d = config_.d_model;
  if (config_.norm_kind == NormKind::kRmsNorm) {
    cpu::RmsNorm(x, rows, d, weight.data(), config_.layer_norm_eps, y, pool);
  } else {
    cpu::LayerNorm(x, rows, d, weight.data(), bias.data(), config_.layer_norm_eps, y, pool);
  }
}

namespace {

absl::Status CheckToken(int32_t token, int vocab_size, absl::string_view what, size_t index) {
  if (token < 0 || token >= vocab_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "[", index, "] = ", token, " is outside the vocabulary [0, ", vocab_size, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Model::Encode(std::span<const int32_t> source, SequenceId sequence,
                           StatePool& pool) const {
  CpuContext ctx(1);
  return Encode(ctx, source, sequence, pool);
}

absl::Status Model::Decode(std::span<const DecodeRow> rows, StatePool& pool,
                           std::vector<float>* logits) const {
  CpuContext ctx(1);
  return Decode(ctx, rows, pool, logits);
}

const float* Model::RunEncoder(CpuContext& ctx, std::span<const int32_t> source) const {
  const int64_t rows = static_cast<int64_t>(source.size()), d = config_.d_model;
  float* x = ctx.Buffer(Scratch::kResidual, rows * d);
  float* normed = ctx.Buffer(Scratch::kNormed, rows * d);
  float* delta = ctx.Buffer(Scratch::kDelta, rows * d);
  for (int64_t r = 0; r < rows; ++r) Embed(source[r], r, x + r * d);
  const float eps = config_.layer_norm_eps;
  for (const Block& block : encoder_->blocks) {
    cpu::LayerNorm(x, rows, d, block.ln1_weight.data(), block.ln1_bias.data(), eps, normed);
    block.self_attention->ForwardBidirectional(ctx, normed, rows, delta);
    cpu::AddInPlace(x, delta, rows * d);
    cpu::LayerNorm(x, rows, d, block.ln2_weight.data(), block.ln2_bias.data(), eps, normed);
    FeedForward(ctx, block, normed, rows, delta);
    cpu::AddInPlace(x, delta, rows * d);
  }
  cpu::LayerNorm(x, rows, d, encoder_->ln_f_weight.data(), encoder_->ln_f_bias.data(), eps, normed);
  return normed;
}

absl::Status Model::Encode(CpuContext& ctx, std::span<const int32_t> source, SequenceId sequence,
                           StatePool& pool) const {
  if (!config_.is_encoder_decoder()) {
    return absl::FailedPreconditionError("Encode needs an encoder-decoder model");
  }
  if (source.empty()) return absl::InvalidArgumentError("source is empty");
  // abc position (Linformer) encoder / cross tables have no column past their max_positions.
  if (const int limit = config_.max_source_positions();
      limit > 0 && static_cast<int64_t>(source.size()) > limit) {
    return absl::InvalidArgumentError(absl::StrCat("source is ", source.size(),
                                                   " tokens, more than the model's "
                                                   "max_source_positions (",
                                                   limit, ")"));
  }
  for (size_t i = 0; i < source.size(); ++i) {
    ABCD_RETURN_IF_ERROR(CheckToken(source[i], config_.vocab_size, "source", i));
  }
  SequenceState* state = pool.Get(sequence);
  if (state == nullptr) return absl::NotFoundError(absl::StrCat("no sequence ", sequence));
  if (state->encoded) return absl::FailedPreconditionError("sequence is already encoded");
  // What cross attention reads: the source rows, or GMAT's memory rows (fixed in the source
  // length) or [source; memory].
  const int64_t rows = config_.EncoderOutputRows(static_cast<int64_t>(source.size()));
  ABCD_RETURN_IF_ERROR(pool.ReserveSource(sequence, rows));
  const float* normed = config_.gmat ? RunGmatEncoder(ctx, source) : RunEncoder(ctx, source);
  for (size_t l = 0; l < decoder_->blocks.size(); ++l) {
    const StateLayout::Slot& slot = layout_.cross[l];
    StateRef ref{state->fixed.data() + slot.fixed_offset,
                 slot.kv_index >= 0 ? &state->kv[slot.kv_index] : nullptr, 0};
    decoder_->blocks[l].cross_attention->BuildMemory(ctx, normed, rows, ref);
  }
  state->source_length = rows;
  state->encoded = true;
  return absl::OkStatus();
}

// The CPU's DecoderOps for one Decode(): kResidual and kNormed are the context's scratch rows,
// each sublayer's output lands in kDelta and is added to its target; the final norm and the head
// run over the rows that asked for logits only.
class Model::CpuPass final : public DecoderOps {
 public:
  CpuPass(const Model& model, CpuContext& ctx, std::span<const DecodeRow> rows,
          std::span<SequenceState* const> states, std::span<const int64_t> positions,
          std::span<const int64_t> checkpoint_slot,
          const absl::flat_hash_map<SequenceId, int64_t>& checkpoints, std::vector<float>* logits)
      : model_(model),
        config_(model.config_),
        ctx_(ctx),
        rows_(rows),
        states_(states),
        positions_(positions),
        checkpoint_slot_(checkpoint_slot),
        checkpoints_(checkpoints),
        logits_(logits),
        n_(static_cast<int64_t>(rows.size())),
        d_(config_.d_model),
        refs_(rows.size()) {
    x_ = ctx.Buffer(Scratch::kResidual, n_ * d_);
    normed_ = ctx.Buffer(Scratch::kNormed, n_ * d_);
    delta_ = ctx.Buffer(Scratch::kDelta, n_ * d_);
  }

  absl::Status Embed() override {
    for (int64_t r = 0; r < n_; ++r) model_.Embed(rows_[r].token, positions_[r], x_ + r * d_);
    return absl::OkStatus();
  }

  absl::Status Norm(int layer, BlockNorm which, DecoderBuffer from, DecoderBuffer to) override {
    const Block& block = model_.decoder_->blocks[static_cast<size_t>(layer)];
    const float eps = config_.layer_norm_eps;
    if (config_.norm == abcd::Norm::kPost) {  // post-LN blocks: LayerNorm
      const auto& [weight, bias] = which == BlockNorm::kAttention
                                       ? std::tie(block.ln1_weight, block.ln1_bias)
                                       : std::tie(block.ln2_weight, block.ln2_bias);
      cpu::LayerNorm(Buffer(from), n_, d_, weight.data(), bias.data(), eps, Buffer(to),
                     &ctx_.pool());
      return absl::OkStatus();
    }
    switch (which) {
      case BlockNorm::kAttention:
        model_.Normalize(Buffer(from), n_, block.ln1_weight, block.ln1_bias, Buffer(to),
                         &ctx_.pool());
        break;
      case BlockNorm::kCross:  // abcd's encoder-decoder models: LayerNorm
        cpu::LayerNorm(Buffer(from), n_, d_, block.ln_cross_weight.data(),
                       block.ln_cross_bias.data(), eps, Buffer(to), &ctx_.pool());
        break;
      case BlockNorm::kFeedForward:
        model_.Normalize(Buffer(from), n_, block.ln2_weight, block.ln2_bias, Buffer(to),
                         &ctx_.pool());
        break;
    }
    return absl::OkStatus();
  }

  absl::Status SelfAttention(int layer, DecoderBuffer from, DecoderBuffer into) override {
    const size_t l = static_cast<size_t>(layer);
    model_.decoder_->blocks[l].self_attention->ForwardCausal(
        ctx_, Buffer(from), n_, Bind(model_.layout_.self[l], /*self=*/true), delta_);
    cpu::AddInPlace(Buffer(into), delta_, n_ * d_, &ctx_.pool());
    return absl::OkStatus();
  }

  absl::Status CrossAttention(int layer, DecoderBuffer from, DecoderBuffer into) override {
    const size_t l = static_cast<size_t>(layer);
    model_.decoder_->blocks[l].cross_attention->ForwardCross(
        ctx_, Buffer(from), n_, Bind(model_.layout_.cross[l], /*self=*/false), delta_);
    cpu::AddInPlace(Buffer(into), delta_, n_ * d_, &ctx_.pool());
    return absl::OkStatus();
  }

  absl::Status FeedForward(int layer, DecoderBuffer from, DecoderBuffer into) override {
    model_.FeedForward(ctx_, model_.decoder_->blocks[static_cast<size_t>(layer)], Buffer(from), n_,
                       delta_);
    cpu::AddInPlace(Buffer(into), delta_, n_ * d_, &ctx_.pool());
    return absl::OkStatus();
  }

  absl::Status Output(DecoderBuffer output, bool final_norm) override {
    output_ = Buffer(output);
    final_norm_ = final_norm;
    return absl::OkStatus();
  }

  // Logits only for the rows that asked (the vocabulary product dominates small models),
  // appended to `logits`; after RunDecoder.
  absl::Status ComputeLogits() {
    int64_t wanted = 0;
    for (int64_t r = 0; r < n_; ++r) wanted += rows_[r].want_logits ? 1 : 0;
    if (wanted == 0) return absl::OkStatus();
    float* selected = ctx_.Buffer(Scratch::kSelected, wanted * d_);
    for (int64_t r = 0, i = 0; r < n_; ++r) {
      if (rows_[r].want_logits) {
        std::copy(output_ + r * d_, output_ + (r + 1) * d_, selected + (i++) * d_);
      }
    }
    const float* final_rows = selected;  // post-LN: the last block's ln2 is the output
    if (final_norm_) {
      model_.Normalize(selected, wanted, model_.decoder_->ln_f_weight, model_.decoder_->ln_f_bias,
                       normed_, &ctx_.pool());
      final_rows = normed_;
    }
    const size_t offset = logits_->size();
    logits_->resize(offset + static_cast<size_t>(wanted) * config_.vocab_size);
    cpu::Linear(final_rows, wanted, model_.head(), nullptr, logits_->data() + offset, ctx_);
    return absl::OkStatus();
  }

 private:
  float* Buffer(DecoderBuffer buffer) const {
    return buffer == DecoderBuffer::kResidual ? x_ : normed_;
  }

  // Every row's state of one attention sublayer (self: with its speculative checkpoint).
  std::span<const StateRef> Bind(const StateLayout::Slot& slot, bool self) {
    const int64_t fixed_floats = static_cast<int64_t>(model_.layout_.initial_fixed.size());
    for (int64_t r = 0; r < n_; ++r) {
      SequenceState& s = *states_[r];
      float* checkpoint =
          self && checkpoint_slot_[r] >= 0 && slot.fixed_floats > 0
              ? s.checkpoints.data() + checkpoint_slot_[r] * fixed_floats + slot.fixed_offset
              : nullptr;
      refs_[r] = {s.fixed.data() + slot.fixed_offset,
                  slot.kv_index >= 0 ? &s.kv[slot.kv_index] : nullptr, positions_[r], checkpoint,
                  checkpoints_.contains(rows_[r].sequence)};
    }
    return refs_;
  }

  const Model& model_;
  const ModelConfig& config_;
  CpuContext& ctx_;
  std::span<const DecodeRow> rows_;
  std::span<SequenceState* const> states_;
  std::span<const int64_t> positions_;
  std::span<const int64_t> checkpoint_slot_;
  const absl::flat_hash_map<SequenceId, int64_t>& checkpoints_;
  std::vector<float>* logits_;
  const int64_t n_, d_;
  std::vector<StateRef> refs_;
  float *x_ = nullptr, *normed_ = nullptr, *delta_ = nullptr;
  const float* output_ = nullptr;
  bool final_norm_ = false;
};

absl::Status Model::Decode(CpuContext& ctx, std::span<const DecodeRow> rows, StatePool& pool,
                           std::vector<float>* logits) const {
  const int64_t n = static_cast<int64_t>(rows.size());
  if (n == 0) return absl::OkStatus();
  // Validate everything and reserve KV pages before touching any state.
  std::vector<SequenceState*> states(n);
  std::vector<int64_t> positions(n);
  std::vector<int64_t> checkpoint_slot(n, -1);  // the row's checkpoint slot, -1: none
  absl::flat_hash_map<SequenceId, int64_t> next_position;
  absl::flat_hash_map<SequenceId, int64_t> checkpoints;  // per sequence with checkpoint rows
  for (int64_t r = 0; r < n; ++r) {
    ABCD_RETURN_IF_ERROR(CheckToken(rows[r].token, config_.vocab_size, "token", r));
    states[r] = pool.Get(rows[r].sequence);
    if (states[r] == nullptr) {
      return absl::NotFoundError(absl::StrCat("no sequence ", rows[r].sequence));
    }
    if (config_.is_encoder_decoder() && !states[r]->encoded) {
      return absl::FailedPreconditionError(
          absl::StrCat("sequence ", rows[r].sequence, " must be encoded before decoding"));
    }
    auto [it, inserted] = next_position.try_emplace(rows[r].sequence, states[r]->position);
    positions[r] = it->second++;
    if (rows[r].checkpoint) checkpoint_slot[r] = checkpoints[rows[r].sequence]++;
  }
  for (const auto& [sequence, end] : next_position) {
    ABCD_RETURN_IF_ERROR(pool.ReserveTokens(sequence, end));
  }
  for (const auto& [sequence, slots] : checkpoints) {
    ABCD_RETURN_IF_ERROR(pool.ReserveCheckpoints(sequence, slots));
  }
  for (int64_t r = 0; r < n; ++r) states[r]->checkpoint_positions.clear();
  for (int64_t r = 0; r < n; ++r) {
    if (checkpoint_slot[r] >= 0) states[r]->checkpoint_positions.push_back(positions[r] + 1);
  }

  CpuPass pass(*this, ctx, rows, states, positions, checkpoint_slot, checkpoints, logits);
  ABCD_RETURN_IF_ERROR(RunDecoder(config_, pass));
  for (const auto& [sequence, end] : next_position) pool.Get(sequence)->position = end;
  return pass.ComputeLogits();
}

}  // namespace abcd
