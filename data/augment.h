// Image augmentation for training, deterministic from the run's seed: a random crop of the
// image padded with zeros on every side (torchvision's RandomCrop(size, padding)) and a
// random horizontal flip (RandomHorizontalFlip(0.5)). What an item gets in an epoch depends
// only on (seed, epoch, item), never on the thread or the order it is decoded in, so a
// resumed run and every rank see the same images.
//
// Pure functions; thread-safe.
#ifndef HEADROOM_DATA_AUGMENT_H_
#define HEADROOM_DATA_AUGMENT_H_

#include <cstdint>

#include "absl/types/span.h"

namespace headroom::data {

struct Augmentation {
  // Zero pixels added on each side before a crop back to the image's size; 0 crops nothing.
  // Default 0.
  int64_t crop_padding = 0;
  // Whether half the images (chosen from the seed) are mirrored left to right. Default false.
  bool horizontal_flip = false;

  bool any() const { return crop_padding > 0 || horizontal_flip; }
};

// What one item gets in one epoch.
struct AugmentDraw {
  int64_t dy = 0, dx = 0;  // the crop's origin in the padded image, each in [0, 2 * padding]
  bool flip = false;
};

// Returns the draw of item `item` in epoch `epoch` of a run seeded `seed`.
AugmentDraw DrawAugmentation(const Augmentation& augmentation, uint64_t seed, int64_t epoch,
                             int64_t item);

// Writes into `out` the [channels, height, width] image `in` padded by `padding`, cropped at
// (draw.dy, draw.dx) and mirrored where draw.flip. REQUIRES: in and out hold
// channels * height * width floats and do not overlap.
void ApplyAugmentation(const AugmentDraw& draw, int64_t padding, int64_t channels, int64_t height,
                       int64_t width, absl::Span<const float> in, absl::Span<float> out);

}  // namespace headroom::data

#endif  // HEADROOM_DATA_AUGMENT_H_
