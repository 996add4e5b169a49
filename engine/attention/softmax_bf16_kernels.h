// Internal to the causal run (softmax_causal_run.cc): the leaf kernels of its bf16-products
// mode, compiled for AVX512BW + AVX512_BF16 alone (softmax_causal_run_avx512_bf16.cc) and called
// only where cpu::Bf16ProductsSupported(). Declarations only: that file's code must not be
// inlined into code built for other CPUs.
//
// A block of n <= 128 cached bf16 rows of one head is packed twice: its keys as groups of 16
// rows whose column pairs are 16 contiguous dwords (vdpbf16ps then takes 16 keys' pairs at
// once, with the query's pair broadcast), its values as pairs of rows interleaved column by
// column (16 columns' pairs at once, with the softmax weights' pair broadcast). A dword holds a
// pair of bf16 values, the first in its low half. head_dim % 16 == 0 throughout. Pure functions
// on disjoint outputs: safe from any thread.
#pragma once

#include <cstdint>

namespace abcd::softmax_bf16 {

// Dwords of a packed block's keys and of its values: n rounded up to 16 keys, and to a pair.
inline int64_t PackedKeyDwords(int64_t n, int head_dim) {
  return (n + 15) / 16 * 16 * head_dim / 2;
}
inline int64_t PackedValueDwords(int64_t n, int head_dim) { return (n + 1) / 2 * head_dim; }

// packed[(g * head_dim / 2 + p) * 16 + j] = row 16 g + j's column pair p (0 for rows >= n);
// row i at keys + i * stride.
void PackKeys(const uint16_t* keys, int64_t n, int64_t stride, int head_dim, uint32_t* packed);

// packed[r * head_dim + c] = (row 2r's column c, row 2r + 1's column c) (0 for rows >= n).
void PackValues(const uint16_t* values, int64_t n, int64_t stride, int head_dim, uint32_t* packed);

// scores[t * ld + j] = q_t . k_j in fp32 for the `count` queries of a tile (q_t: head_dim bf16
// values at q + t * head_dim) and the packed block's keys j < limit[t] (limit non-decreasing in
// t); entries up to the end of each query's register tile's last group of 16 keys are written
// too (ld >= that).
void ScoreTile(const uint16_t* q, int64_t count, const uint32_t* packed_keys, int head_dim,
               const int64_t* limit, float* scores, int64_t ld);

// out[t * out_ld + j / 2] = the pair (p_t[j], p_t[j + 1]) rounded to bf16 (nearest even) for
// p_t = p + t * ld, j < n; 0 from n up to a multiple of 32 columns (2 * out_ld >= that).
void RoundWeights(const float* p, int64_t ld, int64_t count, int64_t n, uint32_t* out,
                  int64_t out_ld);

// out_t = out_t * rescale[t] + sum_{j < limit[t]} p_t[j] v_j for the `count` queries of a tile
// (p_t: RoundWeights' pairs at p + t * p_ld, 0 from the query's limit on; out_t at
// out + t * head_dim) and the packed block's values.
void AccumulateTile(const uint32_t* p, int64_t p_ld, int64_t count, const uint32_t* packed_values,
                    int head_dim, const int64_t* limit, const float* rescale, float* out);

}  // namespace abcd::softmax_bf16
