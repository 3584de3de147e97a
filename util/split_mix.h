// SplitMix64: the counter-based hash behind every random number Headroom draws (initial
// weights, synthetic batches, dropout masks), so a value depends only on its seed and its
// index: any thread can compute any element, and a re-run draws the same. Host and device
// (util/host_device.h), so that both backends draw the same dropout masks.
#ifndef HEADROOM_UTIL_SPLIT_MIX_H_
#define HEADROOM_UTIL_SPLIT_MIX_H_

#include <cstdint>

#include "util/host_device.h"

namespace headroom {

// Returns a well-mixed 64-bit hash of `x` (Steele, Lea and Flood's SplitMix64 finaliser).
HEADROOM_HOST_DEVICE inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace headroom

#endif  // HEADROOM_UTIL_SPLIT_MIX_H_
