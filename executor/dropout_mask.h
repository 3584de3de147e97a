// The dropout keep-mask both backends draw, so that a model with dropout trains the same way
// on the CPU and on CUDA and a checkpoint moves between them: element i of a Dropout node
// run with seed `seed` survives iff DropoutKeeps(DropoutStream(seed), i,
// DropoutKeepThreshold(rate)), and a kept element is scaled by DropoutScale(rate).
//
// A counter-based draw: a pure function of (seed, i), so any thread computes any element and
// a re-forward with the same seed draws the same mask. The hash is SplitMix64
// (util/split_mix.h); the draw is the top 53 bits of the hash as
// a double in [0, 1), kept where it is >= rate, compared here in integers (exactly
// equivalent, and cheap on a GPU).
//
// Host and device (util/host_device.h): under nvcc the draw functions are __host__
// __device__; elsewhere plain inline functions.
#ifndef HEADROOM_EXECUTOR_DROPOUT_MASK_H_
#define HEADROOM_EXECUTOR_DROPOUT_MASK_H_

#include <cmath>
#include <cstdint>

#include "util/host_device.h"
#include "util/split_mix.h"

namespace headroom::executor {

// Returns the stream of draws of a Dropout node run with `seed`.
HEADROOM_HOST_DEVICE inline uint64_t DropoutStream(uint64_t seed) { return SplitMix64(seed); }

// Returns the smallest 53-bit draw that survives `rate`: ceil(rate * 2^53), so that
// draw >= threshold exactly when draw * 2^-53 >= rate (both sides are exact in double).
// REQUIRES: 0 <= rate < 1 (then the threshold is at most 2^53).
inline uint64_t DropoutKeepThreshold(double rate) {
  return static_cast<uint64_t>(std::ceil(std::ldexp(rate, 53)));
}

// Returns whether element `i` of stream `stream` survives a rate of `threshold`
// (DropoutKeepThreshold).
HEADROOM_HOST_DEVICE inline bool DropoutKeeps(uint64_t stream, int64_t i, uint64_t threshold) {
  const uint64_t h = SplitMix64(stream + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ULL);
  return (h >> 11) >= threshold;
}

// Returns PyTorch's scale of a kept element: 1 / (1 - rate) in float.
inline float DropoutScale(double rate) { return 1.0f / static_cast<float>(1.0 - rate); }

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_DROPOUT_MASK_H_
