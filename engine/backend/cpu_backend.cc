#include "engine/backend/cpu_backend.h"

#include "absl/strings/str_cat.h"
#include "engine/ops/matmul.h"
#include "engine/state/request_state_bytes.h"

namespace abcd {

CpuBackend::CpuBackend(const Model& model, int64_t budget_bytes, int threads,
                       cpu::LinearProducts products)
    : model_(model), pool_(model.state_layout(), budget_bytes), context_(threads, products) {}

std::string CpuBackend::device_description() const {
  const bool bf16_products = context_.linear_products() == cpu::LinearProducts::kBf16 &&
                             model_.weight_format() == WeightFormat::kBF16;
  const bool w8a8 = context_.linear_products() == cpu::LinearProducts::kInt8 &&
                    model_.weight_format() == WeightFormat::kInt8;
  return absl::StrCat("cpu (", context_.threads(), " threads, ", cpu::LinearKernelName(), " ",
                      WeightFormatName(model_.weight_format()), " kernels",
                      bf16_products ? ", bf16 products" : "", w8a8 ? ", 8-bit activations" : "",
                      ")");
}

absl::StatusOr<int64_t> CpuBackend::RequestBytes(int64_t prompt_tokens, int64_t source_tokens,
                                                 int64_t max_new_tokens, int sequences) const {
  // Cross attention keeps the encoder's output rows (GMAT: M memory rows, not the source).
  const int64_t encoded_rows =
      source_tokens > 0 ? model_.config().EncoderOutputRows(source_tokens) : 0;
  const int64_t bytes = RequestStateBytes(model_.state_layout(), prompt_tokens, encoded_rows,
                                          max_new_tokens, sequences);
  if (bytes > pool_.budget_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat("request needs ", bytes,
                                                     " bytes of attention state, the budget is ",
                                                     pool_.budget_bytes()));
  }
  return bytes;
}

BackendMemory CpuBackend::memory() const {
  return {pool_.size(), pool_.bytes_in_use(), pool_.kv_bytes_in_use(), pool_.spare_kv_bytes()};
}

}  // namespace abcd
