#include "data/image_dataset.h"

#include <sys/stat.h>

#include <array>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::data {
namespace {

using ::testing::HasSubstr;

IdxArray Images(std::vector<int64_t> dims) {
  IdxArray a;
  a.dims = std::move(dims);
  int64_t n = 1;
  for (int64_t d : a.dims) n *= d;
  for (int64_t i = 0; i < n; ++i) a.bytes.push_back(static_cast<uint8_t>(i % 256));
  return a;
}

IdxArray Labels(std::vector<uint8_t> values) {
  IdxArray a;
  a.dims = {static_cast<int64_t>(values.size())};
  a.bytes = std::move(values);
  return a;
}

TEST(ImageDatasetTest, ReadsPixelsScaledAndLabels) {
  absl::StatusOr<ImageDataset> set =
      ImageDataset::Create("tiny", Images({2, 2, 3}), Labels({4, 1}), 5);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->size(), 2);
  EXPECT_EQ(set->channels(), 1);
  EXPECT_EQ(set->height(), 2);
  EXPECT_EQ(set->width(), 3);
  std::vector<float> pixels(6);
  EXPECT_EQ(set->Read(1, absl::MakeSpan(pixels)), 1);
  // Item 1 holds bytes 6..11.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(pixels[i], (6 + i) / 255.0f) << i;
}

TEST(ImageDatasetTest, TakesChannelsFromFourDims) {
  absl::StatusOr<ImageDataset> set =
      ImageDataset::Create("rgb", Images({2, 3, 4, 4}), Labels({0, 1}), 2);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->channels(), 3);
  EXPECT_EQ(set->image_elements(), 48);
}

TEST(ImageDatasetTest, BadSetsAreErrorsNamingTheSetAndItem) {
  EXPECT_THAT(ImageDataset::Create("s", Images({2, 2, 2}), Labels({0, 9}), 5).status().message(),
              HasSubstr("dataset 's': item 1 has label 9, outside [0, 5)"));
  EXPECT_THAT(ImageDataset::Create("s", Images({3, 2, 2}), Labels({0, 1}), 5).status().message(),
              HasSubstr("3 images but 2 labels"));
  EXPECT_THAT(ImageDataset::Create("s", Images({4, 4}), Labels({0, 1, 0, 1}), 5).status().message(),
              HasSubstr("need [N, H, W] or [N, C, H, W]"));
  EXPECT_THAT(ImageDataset::Create("s", Images({2, 2, 2}), Labels({0, 0}), 1).status().message(),
              HasSubstr("1 classes"));
}

TEST(ImageDatasetTest, AMissingFashionMnistSaysWhichPackage) {
  absl::StatusOr<ImageDataset> set =
      ImageDataset::LoadFashionMnist(FashionMnistPart::kTest, "/nonexistent");
  EXPECT_EQ(set.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(set.status().message(), HasSubstr("dataset-fashion-mnist"));
}

// The real set, as Debian packages it (./headroom installs it): its published sizes, and
// classes balanced exactly (6,000 per class in training, 1,000 in test), which a reader
// that mixed up items or labels would not reproduce.
TEST(ImageDatasetTest, FashionMnistHasItsPublishedShape) {
  struct stat st;
  if (stat(kFashionMnistDir, &st) != 0) GTEST_SKIP() << kFashionMnistDir << " is not installed";
  for (const auto& [part, items] :
       {std::pair{FashionMnistPart::kTrain, 60000}, std::pair{FashionMnistPart::kTest, 10000}}) {
    absl::StatusOr<ImageDataset> set = ImageDataset::LoadFashionMnist(part);
    ASSERT_TRUE(set.ok()) << set.status();
    EXPECT_EQ(set->size(), items);
    EXPECT_EQ(set->channels(), 1);
    EXPECT_EQ(set->height(), 28);
    EXPECT_EQ(set->width(), 28);
    std::array<int, 10> per_class{};
    for (int64_t i = 0; i < set->size(); ++i) ++per_class[set->Label(i)];
    for (int c = 0; c < 10; ++c) EXPECT_EQ(per_class[c], items / 10) << "class " << c;
  }
}

}  // namespace
}  // namespace headroom::data
