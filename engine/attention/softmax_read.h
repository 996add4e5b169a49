// CPU kernels of softmax attention reads over cached key/value rows (a KvCache, a window ring,
// abc's slots): one query over a range of rows, a split read merged afterwards
// (flash-decoding), and a whole run of causal queries read in blocks (prefill).
//
// Rows are fp32, bf16 (uint16_t bit patterns) or f16 (F16), `stride` values apart (a cache row
// holds every head; a head's part starts at the pointer given); arithmetic is fp32 throughout.
// Each function below has one overload per row type. Queries are
// already scaled by 1/sqrt(head_dim). Pure functions: safe to call from any thread on disjoint
// outputs.
#pragma once

#include <cstdint>
#include <limits>

namespace abcd {

// An IEEE binary16 value's bit pattern (f16 KV rows), a type apart from bf16's uint16_t. The
// caller views its uint16_t storage as F16 (reinterpret_cast); the kernels only copy the bits
// out (memcpy), never access an F16 object.
struct F16 {
  uint16_t bits;
};

// out[dh] = sum_i softmax_i(q . keys[i]) values[i] over `count` rows `stride` floats apart.
void SoftmaxReadHead(const float* q, const float* keys, const float* values, int64_t count,
                     int64_t stride, int head_dim, float* out);
// The same over bf16 rows (a bf16 KvCache), computed in fp32.
void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values, int64_t count,
                     int64_t stride, int head_dim, float* out);
void SoftmaxReadHead(const float* q, const F16* keys, const F16* values, int64_t count,
                     int64_t stride, int head_dim, float* out);
// Both with a per-row additive score term: softmax_i(q . keys[i] + bias[i]) (txl's relative
// positions); `bias` holds `count` floats.
void SoftmaxReadHead(const float* q, const float* keys, const float* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out);
void SoftmaxReadHead(const float* q, const uint16_t* keys, const uint16_t* values,
                     const float* bias, int64_t count, int64_t stride, int head_dim, float* out);
void SoftmaxReadHead(const float* q, const F16* keys, const F16* values, const float* bias,
                     int64_t count, int64_t stride, int head_dim, float* out);
// The `group` query heads that share one key/value head (GQA), held head_dim apart in q and
// out: equal to SoftmaxReadHead on each, with the rows read from memory once for the group.
void SoftmaxReadGroup(const float* q, int group, const float* keys, const float* values,
                      int64_t count, int64_t stride, int head_dim, float* out);
void SoftmaxReadGroup(const float* q, int group, const uint16_t* keys, const uint16_t* values,
                      int64_t count, int64_t stride, int head_dim, float* out);
void SoftmaxReadGroup(const float* q, int group, const F16* keys, const F16* values, int64_t count,
                      int64_t stride, int head_dim, float* out);

// A read of part of the rows, not yet normalised: the largest score seen and the sum of
// exp(score - max); the output beside it holds sum_i exp(score_i - max) values[i].
struct SoftmaxPartial {
  float max = -std::numeric_limits<float>::infinity();
  float sum = 0.0f;
};

// Rows [begin, end) (begin < end) of `kv_heads` consecutive key/value heads (head h's columns
// at keys + h * head_dim of each row) read by the `group` query heads of each: query head
// j = h * group + i at q + j * head_dim, its partial[j] and out[j * head_dim ..]. The rows are
// walked once in order for all heads (whole rows prefetched). Splitting a read into ranges and
// merging them with SoftmaxMerge equals the whole read within float rounding.
void SoftmaxReadPartial(const float* q, int kv_heads, int group, const float* keys,
                        const float* values, int64_t begin, int64_t end, int64_t stride,
                        int head_dim, SoftmaxPartial* partial, float* out);
void SoftmaxReadPartial(const float* q, int kv_heads, int group, const uint16_t* keys,
                        const uint16_t* values, int64_t begin, int64_t end, int64_t stride,
                        int head_dim, SoftmaxPartial* partial, float* out);
void SoftmaxReadPartial(const float* q, int kv_heads, int group, const F16* keys, const F16* values,
                        int64_t begin, int64_t end, int64_t stride, int head_dim,
                        SoftmaxPartial* partial, float* out);

// out[dh] = the normalised read of one query head from `pieces` partial reads of disjoint
// ranges: piece i's is partials[i * partial_stride] and outs + i * out_stride.
void SoftmaxMerge(const SoftmaxPartial* partials, int64_t partial_stride, const float* outs,
                  int64_t out_stride, int pieces, int head_dim, float* out);

// A causal run: query row i (q + i * q_stride, `group` heads head_dim apart) sits at position
// first_position + i and reads rows [0, first_position + i] of the cache; its normalised output
// goes to out + i * out_stride (group heads head_dim apart). Equal to SoftmaxReadGroup per row,
// with each block of cached rows widened once and read from cache by every query of the run.
void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const float* keys,
                          const float* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride);
void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const uint16_t* keys,
                          const uint16_t* values, int64_t first_position, int64_t rows,
                          int64_t stride, int head_dim, float* out, int64_t out_stride);
void SoftmaxReadCausalRun(const float* q, int64_t q_stride, int group, const F16* keys,
                          const F16* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, float* out, int64_t out_stride);

// A causal run through a sliding window (window >= 1): query row i reads only rows
// [max(0, first_position + i + 1 - window), first_position + i]. Equal to SoftmaxReadGroup over
// each row's window.
void SoftmaxReadWindowRun(const float* q, int64_t q_stride, int group, const float* keys,
                          const float* values, int64_t first_position, int64_t rows, int64_t stride,
                          int head_dim, int64_t window, float* out, int64_t out_stride);

// SoftmaxReadCausalRun over bf16 rows with bf16 products (opt-in, cpu::LinearProducts::kBf16;
// only where cpu::Bf16ProductsSupported(), head_dim % 16 == 0): the queries and each block's
// softmax weights are rounded to bf16 (nearest even) and multiplied by the rows with
// vdpbf16ps, summed in fp32; the softmax itself stays fp32. Equal to SoftmaxReadCausalRun
// within that rounding (a weight's relative error 2^-9), about twice as fast.
void SoftmaxReadCausalRunBf16Products(const float* q, int64_t q_stride, int group,
                                      const uint16_t* keys, const uint16_t* values,
                                      int64_t first_position, int64_t rows, int64_t stride,
                                      int head_dim, float* out, int64_t out_stride);

// f16 rows are widened by F16C's vcvtph2ps where the CPU has AVX2, FMA and F16C (x86-64 GCC
// builds), and by portable vector arithmetic elsewhere: both exact, so the reads give the same
// bits either way. Whether this CPU and build take the F16C kernels:
bool SoftmaxReadsF16WithF16c();
// SoftmaxReadHead over f16 rows, widened portably whatever the CPU has (for tests of that path).
void SoftmaxReadHeadWidenedPortably(const float* q, const F16* keys, const F16* values,
                                    int64_t count, int64_t stride, int head_dim, float* out);

}  // namespace abcd
