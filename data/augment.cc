#include "data/augment.h"

#include "util/check.h"
#include "util/split_mix.h"

namespace headroom::data {

AugmentDraw DrawAugmentation(const Augmentation& augmentation, uint64_t seed, int64_t epoch,
                             int64_t item) {
  // One 64-bit hash per (seed, epoch, item); its bits give the draws.
  const uint64_t h = SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(epoch)) ^
                                static_cast<uint64_t>(item));
  AugmentDraw d;
  if (augmentation.crop_padding > 0) {
    const uint64_t span = static_cast<uint64_t>(2 * augmentation.crop_padding + 1);
    // Two independent 24-bit fields; the modulo's bias is below span / 2^24.
    d.dy = static_cast<int64_t>((h & 0xFFFFFF) % span);
    d.dx = static_cast<int64_t>(((h >> 24) & 0xFFFFFF) % span);
  }
  d.flip = augmentation.horizontal_flip && ((h >> 63) & 1) != 0;
  return d;
}

void ApplyAugmentation(const AugmentDraw& draw, int64_t padding, int64_t channels, int64_t height,
                       int64_t width, absl::Span<const float> in, absl::Span<float> out) {
  CHECK(static_cast<int64_t>(in.size()) == channels * height * width);
  CHECK(in.size() == out.size());
  for (int64_t c = 0; c < channels; ++c) {
    const float* plane = in.data() + c * height * width;
    float* dst = out.data() + c * height * width;
    for (int64_t y = 0; y < height; ++y) {
      const int64_t sy = y + draw.dy - padding;  // row of the unpadded image
      for (int64_t x = 0; x < width; ++x) {
        // The flip mirrors the cropped image: column x reads cropped column width - 1 - x.
        const int64_t cx = draw.flip ? width - 1 - x : x;
        const int64_t sx = cx + draw.dx - padding;
        const bool inside = sy >= 0 && sy < height && sx >= 0 && sx < width;
        dst[y * width + x] = inside ? plane[sy * width + sx] : 0.0f;
      }
    }
  }
}

}  // namespace headroom::data
