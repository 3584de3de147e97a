// Internal to the CUDA backend's .cu files (device code: include from .cu only): grid-stride
// loops and block-wide reductions.
#ifndef HEADROOM_EXECUTOR_CUDA_CUDA_DEVICE_UTILS_H_
#define HEADROOM_EXECUTOR_CUDA_CUDA_DEVICE_UTILS_H_

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

// for (int64_t i ...) over [0, n), whatever the grid.
#define GRID_STRIDE_LOOP(i, n)                                                           \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(blockDim.x) * gridDim.x)

// for (int64_t row ...) over [0, rows), one block per row at a time.
#define BLOCK_ROW_LOOP(row, rows) for (int64_t row = blockIdx.x; row < (rows); row += gridDim.x)

namespace headroom::executor::cuda {

// Returns the grid of a block-per-row kernel over `rows` rows.
inline unsigned RowGrid(int64_t rows) {
  return static_cast<unsigned>(std::clamp<int64_t>(rows, 1, int64_t{1} << 20));
}

__device__ inline float WarpSum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Returns the sum of `v` over the block to every thread. `shared` holds 32 floats.
// REQUIRES: blockDim.x is a multiple of 32; every thread of the block calls it.
__device__ inline float BlockSum(float v, float* shared) {
  v = WarpSum(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  __syncthreads();  // A previous call's readers are done with `shared`.
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return WarpSum(lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : 0.0f);
}

// Returns the max of `v` over the block to every thread; as BlockSum.
__device__ inline float BlockMax(float v, float* shared) {
  v = WarpMax(v);
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  return WarpMax(lane < static_cast<int>(blockDim.x >> 5) ? shared[lane] : -INFINITY);
}

}  // namespace headroom::executor::cuda

#endif  // HEADROOM_EXECUTOR_CUDA_CUDA_DEVICE_UTILS_H_
