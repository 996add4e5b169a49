// Grouped-query softmax attention over one block's chunk of cached rows, shared by the KV-cache
// split-K kernel (softmax_state_cuda.cu) and the sliding-window ring (window_state_cuda.cu):
// the `group` query heads that share one key/value head are served by ONE block, which reads
// each key and value row of its chunk from global memory once (staged in shared memory a tile
// at a time) for all of them. Device code plus the host-side sizes of its shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "engine/attention/attention_cuda_common.cuh"

namespace abcd::cuda::internal {

// Rows of one key or value tile staged in shared memory: about 16 KB of them, 1..64.
inline __host__ __device__ int GroupTileRows(int head_dim) {
  const int rows = 4096 / head_dim;
  return rows < 1 ? 1 : (rows > 64 ? 64 : rows);
}

// Floats of the value partials: a slot of `vec` floats per (value group, query head, column
// vector) (see GroupAttend), at most max(kThreads * vec, group * head_dim).
inline __host__ __device__ int GroupReduceFloats(int group, int head_dim, int vec) {
  const int per_group = group * head_dim;
  return per_group > kThreads * vec ? per_group : kThreads * vec;
}

// GroupAttend's shared floats besides the `group` scores per row of its chunk.
inline int64_t GroupAttendFixedFloats(int group, int head_dim, int vec) {
  return int64_t{GroupTileRows(head_dim)} * head_dim + int64_t{group} * head_dim +
         GroupReduceFloats(group, head_dim, vec) + 2 * int64_t{group};
}

// Softmax attention of the `group` query heads at q (head g at q + g * dh) over key/value
// rows 0 .. local - 1 at keys / values (row t at + t * stride), by the whole block; every
// thread must call it. `shared` holds GroupAttendFixedFloats + group * chunk floats
// (local <= chunk). Leaves the result in shared memory for GroupWrite (an empty chunk: o = 0,
// m = -inf, l = 0, which the split-K combine drops).
template <int kVec>
__device__ __forceinline__ void GroupAttend(const float* q, int group, int dh, const float* keys,
                                            const float* values, int stride, int local, int chunk,
                                            int lanes, float* shared) {
  const int tile = GroupTileRows(dh);
  const int columns = dh / kVec;
  float* tile_s = shared;  // first: float4-aligned
  float* q_s = tile_s + tile * dh;
  float* reduce_s = q_s + group * dh;
  float* score_s = reduce_s + GroupReduceFloats(group, dh, kVec);
  float* stats_s = score_s + group * chunk;
  for (int c = threadIdx.x; c < group * dh; c += kThreads) q_s[c] = q[c];
  // Values: thread slot a = (value group vg, query head g, column vector col) sums the rows
  // vg, vg + value_groups, ... of every tile for head g; reduce_s keeps its sums.
  const int units = group * columns;
  const int value_groups = units < kThreads ? kThreads / units : 1;
  const int slots = value_groups * units;
  for (int i = threadIdx.x; i < slots * kVec; i += kThreads) reduce_s[i] = 0.0f;

  // Scores: a group of `lanes` lanes per (query head, row) of the staged key tile.
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = lane % lanes;
  const int groups_per_warp = 32 / lanes;
  const int lane_groups = (kThreads / 32) * groups_per_warp;
  const int lane_group = warp * groups_per_warp + lane / lanes;
  for (int t = 0; t < local; t += tile) {
    const int n = min(tile, local - t);
    __syncthreads();  // q_s written; the previous tile scored
    for (int i = threadIdx.x; i < n * columns; i += kThreads) {
      const int row = i / columns, c4 = i % columns;
      float key[kVec];
      LoadVec<kVec>(keys + static_cast<int64_t>(t + row) * stride + c4 * kVec, key);
      StoreVec<kVec>(tile_s + row * dh + c4 * kVec, key);
    }
    __syncthreads();
    const int pairs = group * n;
    for (int base = 0; base < pairs; base += lane_groups) {
      const int pair = base + lane_group;
      const int g = pair / n, tt = pair % n;
      float dot = 0.0f;
      if (pair < pairs) {
        for (int c4 = sub; c4 < columns; c4 += lanes) {
          float key[kVec], query[kVec];
          LoadVec<kVec>(tile_s + tt * dh + c4 * kVec, key);
          LoadVec<kVec>(q_s + g * dh + c4 * kVec, query);
#pragma unroll
          for (int e = 0; e < kVec; ++e) dot += query[e] * key[e];
        }
      }
      dot = GroupSum(dot, lanes);
      if (pair < pairs && sub == 0) score_s[g * chunk + t + tt] = dot;
    }
  }
  __syncthreads();
  for (int g = warp; g < group; g += kThreads / 32) {
    WarpSoftmax(score_s + g * chunk, local, stats_s + 2 * g);
  }

  for (int t = 0; t < local; t += tile) {
    const int n = min(tile, local - t);
    __syncthreads();  // the weights final; the previous tile read
    for (int i = threadIdx.x; i < n * columns; i += kThreads) {
      const int row = i / columns, c4 = i % columns;
      float value[kVec];
      LoadVec<kVec>(values + static_cast<int64_t>(t + row) * stride + c4 * kVec, value);
      StoreVec<kVec>(tile_s + row * dh + c4 * kVec, value);
    }
    __syncthreads();
    for (int a = threadIdx.x; a < slots; a += kThreads) {
      const int vg = a / units, u = a % units;
      const int g = u / columns, column = u % columns;
      const float* weights = score_s + g * chunk + t;
      float acc[kVec] = {};
      for (int tt = vg; tt < n; tt += value_groups) {
        float value[kVec];
        LoadVec<kVec>(tile_s + tt * dh + column * kVec, value);
        const float p = weights[tt];
#pragma unroll
        for (int e = 0; e < kVec; ++e) acc[e] += p * value[e];
      }
#pragma unroll
      for (int e = 0; e < kVec; ++e) reduce_s[a * kVec + e] += acc[e];
    }
  }
}

// GroupAttend's result, by the whole block right after it (it synchronises first), per
// query head g: split-K off (partial == nullptr), out[g * dh + c] = o / l; on, partial + g *
// partial_stride gets [o (dh), m, l]. The caller synchronises the block before it reuses shared
// memory.
template <int kVec>
__device__ __forceinline__ void GroupWrite(int group, int dh, int chunk, const float* shared,
                                           float* out, float* partial, int64_t partial_stride) {
  __syncthreads();
  const int units = group * (dh / kVec);
  const int value_groups = units < kThreads ? kThreads / units : 1;
  const float* reduce_s = shared + (GroupTileRows(dh) + group) * dh;
  const float* stats_s = reduce_s + GroupReduceFloats(group, dh, kVec) + group * chunk;
  // Slot a's floats sit at a * kVec: value group vg's sums of head g, column c at
  // vg * group * dh + g * dh + c.
  for (int i = threadIdx.x; i < group * dh; i += kThreads) {
    const int g = i / dh, c = i % dh;
    float o = 0.0f;
    for (int vg = 0; vg < value_groups; ++vg) o += reduce_s[vg * group * dh + i];
    if (partial == nullptr) {
      out[i] = o / stats_s[2 * g + 1];
    } else {
      float* p = partial + g * partial_stride;
      p[c] = o;
      if (c == 0) {
        p[dh] = stats_s[2 * g];
        p[dh + 1] = stats_s[2 * g + 1];
      }
    }
  }
}

}  // namespace abcd::cuda::internal
