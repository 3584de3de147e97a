#include "data/augment.h"

#include <vector>

#include "gtest/gtest.h"

namespace headroom::data {
namespace {

// The same transform the long way, as torchvision composes it: pad into a larger image,
// crop a window of it, then mirror the crop.
std::vector<float> Reference(const AugmentDraw& d, int64_t pad, int64_t c, int64_t h, int64_t w,
                             const std::vector<float>& in) {
  const int64_t ph = h + 2 * pad, pw = w + 2 * pad;
  std::vector<float> padded(c * ph * pw, 0.0f);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        padded[(k * ph + y + pad) * pw + x + pad] = in[(k * h + y) * w + x];
  std::vector<float> crop(c * h * w);
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        crop[(k * h + y) * w + x] = padded[(k * ph + y + d.dy) * pw + x + d.dx];
  if (!d.flip) return crop;
  std::vector<float> flipped(crop.size());
  for (int64_t k = 0; k < c; ++k)
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x)
        flipped[(k * h + y) * w + x] = crop[(k * h + y) * w + (w - 1 - x)];
  return flipped;
}

TEST(AugmentTest, MatchesPadCropFlipDoneTheLongWay) {
  constexpr int64_t kC = 2, kH = 5, kW = 7, kPad = 3;
  std::vector<float> in(kC * kH * kW);
  for (size_t i = 0; i < in.size(); ++i) in[i] = 1.0f + i;
  const Augmentation a{.crop_padding = kPad, .horizontal_flip = true};
  for (int64_t item = 0; item < 200; ++item) {
    const AugmentDraw d = DrawAugmentation(a, 9, 2, item);
    ASSERT_GE(d.dy, 0);
    ASSERT_LE(d.dy, 2 * kPad);
    ASSERT_GE(d.dx, 0);
    ASSERT_LE(d.dx, 2 * kPad);
    std::vector<float> out(in.size());
    ApplyAugmentation(d, kPad, kC, kH, kW, in, absl::MakeSpan(out));
    EXPECT_EQ(out, Reference(d, kPad, kC, kH, kW, in))
        << "item " << item << " dy " << d.dy << " dx " << d.dx << " flip " << d.flip;
  }
}

TEST(AugmentTest, DrawsAreSeededAndSpreadOverTheirRange) {
  const Augmentation a{.crop_padding = 4, .horizontal_flip = true};
  std::vector<int> dy(9, 0), dx(9, 0);
  int flips = 0;
  constexpr int kItems = 9000;
  for (int64_t item = 0; item < kItems; ++item) {
    const AugmentDraw d = DrawAugmentation(a, 1, 0, item);
    ++dy[d.dy];
    ++dx[d.dx];
    flips += d.flip;
    const AugmentDraw again = DrawAugmentation(a, 1, 0, item);
    EXPECT_EQ(again.dy, d.dy);
    EXPECT_EQ(again.dx, d.dx);
    EXPECT_EQ(again.flip, d.flip);
  }
  for (int v = 0; v < 9; ++v) {
    // Expected 1000 each, standard deviation about 30.
    EXPECT_NEAR(dy[v], kItems / 9, 200) << "dy " << v;
    EXPECT_NEAR(dx[v], kItems / 9, 200) << "dx " << v;
  }
  EXPECT_NEAR(flips, kItems / 2, 300);
  // Another epoch draws anew.
  int same = 0;
  for (int64_t item = 0; item < 100; ++item) {
    const AugmentDraw a0 = DrawAugmentation(a, 1, 0, item), a1 = DrawAugmentation(a, 1, 1, item);
    same += a0.dy == a1.dy && a0.dx == a1.dx && a0.flip == a1.flip;
  }
  EXPECT_LT(same, 10);
}

TEST(AugmentTest, NoAugmentationDrawsNothing) {
  const AugmentDraw d = DrawAugmentation(Augmentation{}, 1, 0, 5);
  EXPECT_EQ(d.dy, 0);
  EXPECT_EQ(d.dx, 0);
  EXPECT_FALSE(d.flip);
  EXPECT_FALSE(Augmentation{}.any());
}

}  // namespace
}  // namespace headroom::data
