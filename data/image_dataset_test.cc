#include "data/image_dataset.h"

#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <string>
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

std::string TempDir(const std::string& name) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = std::string(tmp != nullptr ? tmp : "/tmp") + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// A directory of two shards (docs/data.md) reads as the shards' items in index order.
TEST(ImageDatasetTest, ADirectoryConcatenatesItsShards) {
  const std::string dir = TempDir("two_shards");
  Write(dir + "/a.images.idx", EncodeIdx(Images({2, 2, 2})));
  Write(dir + "/a.labels.idx", EncodeIdx(Labels({0, 1})));
  IdxArray more = Images({3, 2, 2});
  for (uint8_t& b : more.bytes) b = 200;
  Write(dir + "/b.images.idx", EncodeIdx(more));
  Write(dir + "/b.labels.idx", EncodeIdx(Labels({2, 2, 1})));
  Write(dir + "/index.txt",
        "headroom-dataset 1\n# two shards\nclasses 3\nshard a.images.idx a.labels.idx\n\n"
        "shard b.images.idx b.labels.idx\n");
  absl::StatusOr<ImageDataset> set = ImageDataset::LoadDirectory(dir);
  ASSERT_TRUE(set.ok()) << set.status();
  EXPECT_EQ(set->size(), 5);
  EXPECT_EQ(set->num_classes(), 3);
  std::vector<float> px(4);
  EXPECT_EQ(set->Read(1, absl::MakeSpan(px)), 1);
  EXPECT_EQ(px[0], 4 / 255.0f);
  EXPECT_EQ(set->Read(4, absl::MakeSpan(px)), 1);
  EXPECT_EQ(px[3], 200 / 255.0f);
}

// Inspecting reads the headers: the shape a load would have, and none of the elements (so
// a bad label or a short file is found only by loading).
TEST(ImageDatasetTest, InspectingADirectoryGivesTheLoadedShapeFromTheHeaders) {
  const std::string dir = TempDir("inspect");
  Write(dir + "/a.images.idx", EncodeIdx(Images({2, 3, 4, 5})));
  Write(dir + "/a.labels.idx", EncodeIdx(Labels({0, 1})));
  Write(dir + "/b.images.idx", EncodeIdx(Images({7, 3, 4, 5})));
  Write(dir + "/b.labels.idx", EncodeIdx(Labels({2, 2, 1, 0, 0, 1, 2})));
  Write(dir + "/index.txt",
        "headroom-dataset 1\nclasses 3\nshard a.images.idx a.labels.idx\n"
        "shard b.images.idx b.labels.idx\n");
  absl::StatusOr<ImageSetShape> shape = ImageDataset::InspectDirectory(dir);
  ASSERT_TRUE(shape.ok()) << shape.status();
  absl::StatusOr<ImageDataset> set = ImageDataset::LoadDirectory(dir);
  ASSERT_TRUE(set.ok()) << set.status();
  for (const ImageSetShape& s : {*shape, set->shape()}) {
    EXPECT_EQ(s.name, dir);
    EXPECT_EQ(s.size, 9);
    EXPECT_EQ(s.channels, 3);
    EXPECT_EQ(s.height, 4);
    EXPECT_EQ(s.width, 5);
    EXPECT_EQ(s.num_classes, 3);
    EXPECT_FALSE(s.floats);
    EXPECT_EQ(s.memory_bytes(), 9u * (60 + 1));
  }

  // A label out of range and a truncated shard: only the load reads them.
  Write(dir + "/b.labels.idx", EncodeIdx(Labels({2, 2, 1, 0, 0, 1, 9})));
  std::string images = EncodeIdx(Images({7, 3, 4, 5}));
  images.resize(images.size() - 10);
  Write(dir + "/b.images.idx", images);
  EXPECT_TRUE(ImageDataset::InspectDirectory(dir).ok());
  EXPECT_THAT(ImageDataset::LoadDirectory(dir).status().message(), HasSubstr("ends inside"));
}

TEST(ImageDatasetTest, FloatImagesReadAsTheyAre) {
  IdxArray images;
  images.type = kIdxFloat;
  images.dims = {2, 1, 2};
  const float values[] = {0.5f, -1.25f, 3.0f, 1e-3f};
  images.bytes.assign(reinterpret_cast<const uint8_t*>(values),
                      reinterpret_cast<const uint8_t*>(values) + sizeof(values));
  absl::StatusOr<ImageDataset> set = ImageDataset::Create("f", images, Labels({1, 0}), 2);
  ASSERT_TRUE(set.ok()) << set.status();
  std::vector<float> px(2);
  EXPECT_EQ(set->Read(1, absl::MakeSpan(px)), 0);
  EXPECT_EQ(px, (std::vector<float>{3.0f, 1e-3f}));
  const float bad[] = {0.0f, std::nanf(""), 1.0f, 1.0f};
  images.bytes.assign(reinterpret_cast<const uint8_t*>(bad),
                      reinterpret_cast<const uint8_t*>(bad) + sizeof(bad));
  EXPECT_THAT(ImageDataset::Create("f", images, Labels({1, 0}), 2).status().message(),
              HasSubstr("item 0 holds nan"));
}

TEST(ImageDatasetTest, BadDirectoriesAreErrorsNamingFileAndLine) {
  const std::string dir = TempDir("bad_index");
  Write(dir + "/a.images.idx", EncodeIdx(Images({2, 2, 2})));
  Write(dir + "/a.labels.idx", EncodeIdx(Labels({0, 1})));
  Write(dir + "/c.images.idx", EncodeIdx(Images({2, 3, 3})));
  Write(dir + "/c.labels.idx", EncodeIdx(Labels({0, 1, 1})));
  struct Case {
    std::string index, message;
  };
  const Case cases[] = {
      {"classes 2\n", "line 1: the first line must be 'headroom-dataset 1'"},
      {"headroom-dataset 1\nclasses two\n", "line 2: 'classes' needs a number"},
      {"headroom-dataset 1\nclasses 2\nshards a b\n", "line 3: 'shards a b' is neither"},
      {"headroom-dataset 1\nclasses 2\n", "at least one 'shard IMAGES LABELS'"},
      {"headroom-dataset 1\nclasses 2\nshard a.images.idx a.labels.idx\n"
       "shard c.images.idx a.labels.idx\n",
       "line 4: shard 'c.images.idx' holds [2,3,3] items of another shape"},
      {"headroom-dataset 1\nclasses 2\nshard a.images.idx c.labels.idx\n",
       "shard 'c.labels.idx' holds labels [3] for 2 images"},
      {"headroom-dataset 1\nclasses 2\nshard a.images.idx missing.idx\n", "missing.idx"},
  };
  for (const Case& c : cases) {
    Write(dir + "/index.txt", c.index);
    absl::StatusOr<ImageDataset> set = ImageDataset::LoadDirectory(dir);
    EXPECT_FALSE(set.ok()) << c.index;
    EXPECT_THAT(set.status().message(), HasSubstr(c.message)) << c.index;
    // The headers alone find the same fault.
    EXPECT_EQ(ImageDataset::InspectDirectory(dir).status(), set.status()) << c.index;
  }
  EXPECT_EQ(ImageDataset::LoadDirectory(TempDir("empty")).status().code(),
            absl::StatusCode::kNotFound);
  EXPECT_EQ(ImageDataset::InspectDirectory(TempDir("empty")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(ImageDatasetTest, AMissingFashionMnistSaysWhichPackage) {
  absl::StatusOr<ImageDataset> set =
      ImageDataset::LoadFashionMnist(FashionMnistPart::kTest, "/nonexistent");
  EXPECT_EQ(set.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(set.status().message(), HasSubstr("dataset-fashion-mnist"));
  EXPECT_EQ(ImageDataset::InspectFashionMnist(FashionMnistPart::kTest, "/nonexistent").status(),
            set.status());
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
    absl::StatusOr<ImageSetShape> shape = ImageDataset::InspectFashionMnist(part);
    ASSERT_TRUE(shape.ok()) << shape.status();
    EXPECT_EQ(shape->size, items);
    EXPECT_EQ(shape->memory_bytes(), static_cast<uint64_t>(items) * (28 * 28 + 1));
    EXPECT_EQ(shape->name, set->name());
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
