// Internal to the softmax read kernels (softmax_read.cc, softmax_causal_run.cc): the vector
// helpers they compile into their kernels. Not an interface: include it from those files only.
#pragma once

#include <cstdint>
#include <cstring>

#include "engine/attention/softmax_read.h"
#include "engine/ops/matmul_kernels.h"
#include "engine/ops/packed_matrix.h"
#include "engine/ops/vector_clones.h"

namespace abcd::softmax_internal {

// Rows ahead of the one being read whose keys the kernels ask the memory system for (and the
// values of the row being read, for the values' pass). Without it every row waits for DRAM
// where the cache is larger than L3; 16 and 32 measured alike, 8 slower.
constexpr int64_t kPrefetchRows = 16;

// Every helper below is inlined into the kernels that use it, always: a helper left out of line
// is compiled for the baseline ISA, not the calling clone's (ABCD_VECTOR_CLONES), which made it
// slower and changed its rounding (no FMA), so the same values read from two formats, or by two
// paths, could give different bits.
#define ABCD_INLINE [[gnu::always_inline]] inline

ABCD_INLINE float Load(const float* p, int64_t i) { return p[i]; }
ABCD_INLINE float Load(const uint16_t* p, int64_t i) {
  const uint32_t bits = static_cast<uint32_t>(p[i]) << 16;
  float value;
  std::memcpy(&value, &bits, 4);
  return value;
}
ABCD_INLINE float Load(const F16* p, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, p + i, sizeof(bits));
  return HalfToFloatValue(bits);
}

// Eight floats as one value (GCC/Clang vector extension): compiled per clone of the functions
// that use it (one AVX register on x86-64-v3/v4, two SSE registers on the baseline).
using Float8 = float __attribute__((vector_size(32)));
using U16x8 = uint16_t __attribute__((vector_size(16)));
using U32x8 = uint32_t __attribute__((vector_size(32)));

// By reference: a vector passed by value changes the ABI between the clones (-Wpsabi).
ABCD_INLINE void Load8(const float* p, Float8& v) { std::memcpy(&v, p, sizeof(v)); }
// Eight bf16 values widened to fp32 (zero-extend and shift: exact).
ABCD_INLINE void Load8(const uint16_t* p, Float8& v) {
  U16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 w = __builtin_convertvector(h, U32x8) << 16;
  std::memcpy(&v, &w, sizeof(v));
}
// Eight f16 values widened to fp32, exactly, in plain vector arithmetic (the same code in every
// clone): the exponent and mantissa moved to fp32's positions and scaled by 2^112, exact for
// normal and subnormal halves alike; infinities and NaNs (exponent 31) get fp32's all-ones
// exponent; then the sign. GCC 12's _Float16 vector conversion was 2x slower in the AVX2 clone
// (it converted element by element), and clang 14 has no _Float16 on x86.
ABCD_INLINE void Load8(const F16* p, Float8& v) {
  U16x8 h;
  std::memcpy(&h, p, sizeof(h));
  const U32x8 w = __builtin_convertvector(h, U32x8);
  const U32x8 magnitude = (w & 0x7FFFu) << 13;
  Float8 scaled;
  std::memcpy(&scaled, &magnitude, sizeof(scaled));
  scaled *= 0x1p112f;
  U32x8 bits;
  std::memcpy(&bits, &scaled, sizeof(bits));
  const U32x8 special = reinterpret_cast<U32x8>((w & 0x7C00u) == 0x7C00u);
  bits |= (special & 0x7F800000u) | ((w & 0x8000u) << 16);
  std::memcpy(&v, &bits, sizeof(v));
}
ABCD_INLINE void Store8(const Float8& v, float* p) { std::memcpy(p, &v, sizeof(v)); }

#if ABCD_HAS_VECTOR_CLONES
// f16 rows on a CPU with F16C: the same bits as F16, widened eight at a time by one vcvtph2ps
// (exact, as the portable widening is), 2.3x faster where the rows are in cache. The kernels over
// F16c rows are compiled for AVX2 + FMA + F16C alone (their specialisations below) and run only
// where the CPU has them (UseF16c). The instruction is written as assembly because GCC will not
// inline its intrinsic into the shared helpers (Dot, AccumulateColumns), which have no target of
// their own.
struct F16c {
  uint16_t bits;
};
ABCD_INLINE float Load(const F16c* p, int64_t i) {
  uint16_t bits;
  std::memcpy(&bits, p + i, sizeof(bits));
  return HalfToFloatValue(bits);
}
ABCD_INLINE void Load8(const F16c* p, Float8& v) {
  asm("vcvtph2ps %1, %0" : "=x"(v) : "m"(*reinterpret_cast<const uint16_t(*)[8]>(p)));
}

// The CPU runs the F16c kernels: AVX2, FMA and F16C (what ABCD_F16C_TARGET compiles for).
inline bool UseF16c() {
  static const bool use = cpu::kernels::CpuRunsAvx2Kernels();
  return use;
}
#endif

// The lanes added in Sum4x8's order, so a sum of one vector and of four agree bitwise.
ABCD_INLINE float Sum8(const Float8& v) {
  return ((v[0] + v[2]) + (v[1] + v[3])) + ((v[4] + v[6]) + (v[5] + v[7]));
}

// sums[j] = the eight lanes of a_j added, for four vectors at once (two rounds of shuffles
// and adds, then the two 128-bit halves added as one 16-byte vector and stored at once).
ABCD_INLINE void Sum4x8(const Float8& a0, const Float8& a1, const Float8& a2, const Float8& a3,
                        float* sums) {
  const Float8 t01 = __builtin_shufflevector(a0, a1, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(a0, a1, 2, 10, 3, 11, 6, 14, 7, 15);
  const Float8 t23 = __builtin_shufflevector(a2, a3, 0, 8, 1, 9, 4, 12, 5, 13) +
                     __builtin_shufflevector(a2, a3, 2, 10, 3, 11, 6, 14, 7, 15);
  const Float8 u = __builtin_shufflevector(t01, t23, 0, 1, 8, 9, 4, 5, 12, 13) +
                   __builtin_shufflevector(t01, t23, 2, 3, 10, 11, 6, 7, 14, 15);
  // u: the low-half sums of a0..a3, then their high-half sums.
  using Float4 = float __attribute__((vector_size(16)));
  const Float4 sum =
      __builtin_shufflevector(u, u, 0, 1, 2, 3) + __builtin_shufflevector(u, u, 4, 5, 6, 7);
  std::memcpy(sums, &sum, sizeof(sum));
}

// bf16 rows in "pair order": sixteen bf16 values as one 32-byte load, split into the even
// columns (the low halves of its 32-bit words, shifted up) and the odd ones (the high halves,
// masked): two single-uop ops, where widening eight at a time takes a shuffle per half. The
// query and the output of such a read are kept permuted the same way (PairOrder).
ABCD_INLINE void LoadPairs(const uint16_t* p, Float8& even, Float8& odd) {
  U32x8 w;
  std::memcpy(&w, p, sizeof(w));
  const U32x8 lo = w << 16;
  const U32x8 hi = w & 0xFFFF0000u;
  std::memcpy(&even, &lo, sizeof(even));
  std::memcpy(&odd, &hi, sizeof(odd));
}

// Columns 16b + 2j -> 16b + j and 16b + 2j + 1 -> 16b + 8 + j (head_dim % 16 == 0), and back.
inline void ToPairOrder(const float* x, int head_dim, float* out) {
  for (int b = 0; b < head_dim; b += 16) {
    for (int j = 0; j < 8; ++j) {
      out[b + j] = x[b + 2 * j];
      out[b + 8 + j] = x[b + 2 * j + 1];
    }
  }
}
inline void FromPairOrder(const float* x, int head_dim, float* out) {
  for (int b = 0; b < head_dim; b += 16) {
    for (int j = 0; j < 8; ++j) {
      out[b + 2 * j] = x[b + j];
      out[b + 2 * j + 1] = x[b + 8 + j];
    }
  }
}

template <typename T>
ABCD_INLINE void Prefetch(const T* row, int head_dim) {
  constexpr int kPerLine = 64 / sizeof(T);
  for (int c = 0; c < head_dim; c += kPerLine) __builtin_prefetch(row + c);
}

// Advances a running softmax by one block of scores: row[0, seen) are scores, row[seen, n) are
// masked (-infinity, or ignored). Afterwards row[0, n) holds exp(score - the new maximum) (0 where
// masked) and `run` the new maximum and sum; returns the factor by which the block's earlier
// output must be rescaled (0 on the first block).
float AdvanceRun(float* row, int64_t n, int64_t seen, SoftmaxPartial& run);

// f16 rows go to the F16c kernels where the CPU runs them (unless `portable`): read(keys,
// values) is called with the rows as F16c or as F16, the same bits.
template <typename Read>
void ReadF16(const F16* keys, const F16* values, bool portable, const Read& read) {
#if ABCD_HAS_VECTOR_CLONES
  if (!portable && UseF16c()) {
    read(reinterpret_cast<const F16c*>(keys), reinterpret_cast<const F16c*>(values));
    return;
  }
#endif
  read(keys, values);
}

}  // namespace abcd::softmax_internal
