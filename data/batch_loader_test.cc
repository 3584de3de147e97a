#include "data/batch_loader.h"

#include <numeric>
#include <vector>

#include "data/epoch_order.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::data {
namespace {

using ::testing::HasSubstr;

// 23 images of 1x3x2 whose pixels encode their index, with label index % 4.
ImageDataset TinySet() {
  IdxArray images, labels;
  images.dims = {23, 3, 2};
  labels.dims = {23};
  for (int i = 0; i < 23; ++i) {
    for (int p = 0; p < 6; ++p) images.bytes.push_back(static_cast<uint8_t>(i * 10 + p));
    labels.bytes.push_back(static_cast<uint8_t>(i % 4));
  }
  return *ImageDataset::Create("tiny", images, labels, 4);
}

std::vector<int64_t> All(const ImageDataset& set) {
  std::vector<int64_t> v(set.size());
  std::iota(v.begin(), v.end(), 0);
  return v;
}

// Batch `index` of `epoch` as epoch_order.h and the set define it, without the thread.
Batch Expected(const ImageDataset& set, const LoaderOptions& o, int64_t epoch, int64_t index) {
  const std::vector<int64_t> order = EpochPermutation(All(set), o.seed, epoch);
  absl::Span<const int64_t> mine = *RankBatch(order, index, o.batch, o.rank, o.ranks);
  Batch b;
  b.epoch = epoch;
  b.index = index;
  for (int64_t item : mine) {
    std::vector<float> px(set.image_elements());
    b.labels.push_back(set.Read(item, absl::MakeSpan(px)));
    b.pixels.insert(b.pixels.end(), px.begin(), px.end());
  }
  return b;
}

TEST(BatchLoaderTest, BatchesFollowTheEpochOrderAcrossEpochs) {
  const ImageDataset set = TinySet();
  LoaderOptions o;
  o.batch = 5;
  o.seed = 3;
  auto loader = BatchLoader::Create(&set, All(set), o);
  ASSERT_TRUE(loader.ok()) << loader.status();
  EXPECT_EQ((*loader)->batches_per_epoch(), 4);  // 23 items: 4 whole batches of 5
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    for (int64_t index = 0; index < 4; ++index) {
      const Batch got = (*loader)->Next();
      const Batch want = Expected(set, o, epoch, index);
      EXPECT_EQ(got.epoch, epoch);
      EXPECT_EQ(got.index, index);
      EXPECT_EQ(got.labels, want.labels) << epoch << "/" << index;
      EXPECT_EQ(got.pixels, want.pixels) << epoch << "/" << index;
    }
  }
  EXPECT_GE((*loader)->wait_seconds(), 0.0);
}

TEST(BatchLoaderTest, AResumedLoaderGoesOnWhereTheFirstStopped) {
  const ImageDataset set = TinySet();
  LoaderOptions o;
  o.batch = 4;
  o.augmentation = {.crop_padding = 1, .horizontal_flip = true};
  auto whole = *BatchLoader::Create(&set, All(set), o);
  std::vector<Batch> first;
  for (int i = 0; i < 12; ++i) first.push_back(whole->Next());
  o.first_epoch = 1;
  o.first_batch = 3;  // 5 batches per epoch: the 9th batch of the run
  auto resumed = *BatchLoader::Create(&set, All(set), o);
  for (int i = 8; i < 12; ++i) {
    const Batch b = resumed->Next();
    EXPECT_EQ(b.epoch, first[i].epoch);
    EXPECT_EQ(b.index, first[i].index);
    EXPECT_EQ(b.pixels, first[i].pixels) << "batch " << i;
    EXPECT_EQ(b.labels, first[i].labels) << "batch " << i;
  }
}

// Ranks side by side read what one process at ranks * batch reads, augmentation included.
TEST(BatchLoaderTest, RanksShareEachGlobalBatch) {
  const ImageDataset set = TinySet();
  LoaderOptions one;
  one.batch = 6;
  one.augmentation = {.crop_padding = 1, .horizontal_flip = true};
  auto single = *BatchLoader::Create(&set, All(set), one);
  std::vector<std::unique_ptr<BatchLoader>> ranks;
  for (int r = 0; r < 3; ++r) {
    LoaderOptions o = one;
    o.batch = 2;
    o.rank = r;
    o.ranks = 3;
    ranks.push_back(*BatchLoader::Create(&set, All(set), o));
  }
  for (int step = 0; step < 7; ++step) {
    const Batch whole = single->Next();
    std::vector<float> pixels;
    std::vector<int64_t> labels;
    for (auto& r : ranks) {
      const Batch part = r->Next();
      pixels.insert(pixels.end(), part.pixels.begin(), part.pixels.end());
      labels.insert(labels.end(), part.labels.begin(), part.labels.end());
    }
    EXPECT_EQ(pixels, whole.pixels) << "step " << step;
    EXPECT_EQ(labels, whole.labels) << "step " << step;
  }
}

TEST(BatchLoaderTest, UnshuffledVisitsTheItemsInOrder) {
  const ImageDataset set = TinySet();
  LoaderOptions o;
  o.batch = 3;
  o.shuffle = false;
  auto loader = *BatchLoader::Create(&set, {5, 6, 7, 20, 21, 22}, o);
  EXPECT_EQ(loader->Next().labels, (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(loader->Next().labels, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(loader->Next().labels, (std::vector<int64_t>{1, 2, 3}));  // the next epoch
}

TEST(BatchLoaderTest, BadOptionsAreErrors) {
  const ImageDataset set = TinySet();
  auto error = [&](LoaderOptions o, std::vector<int64_t> items) {
    return std::string(BatchLoader::Create(&set, std::move(items), o).status().message());
  };
  LoaderOptions o;
  o.batch = 4;
  EXPECT_THAT(error({.batch = 0}, All(set)), HasSubstr("batch 0 is below 1"));
  EXPECT_THAT(error({.batch = 4, .rank = 2, .ranks = 2}, All(set)), HasSubstr("rank 2"));
  EXPECT_THAT(error(o, {0, 1, 99}), HasSubstr("item 99 is outside"));
  EXPECT_THAT(error({.batch = 24}, All(set)), HasSubstr("no whole global batch of 24"));
  o.first_batch = 5;
  EXPECT_THAT(error(o, All(set)), HasSubstr("outside the epoch's 5 batches"));
}

// A loader whose queue is full, and one whose consumer never came, stop when destroyed.
TEST(BatchLoaderTest, StopsWhenDestroyedWithAFullQueue) {
  const ImageDataset set = TinySet();
  LoaderOptions o;
  o.batch = 2;
  o.prefetch = 1;
  for (int i = 0; i < 20; ++i) {
    auto loader = *BatchLoader::Create(&set, All(set), o);
    if (i % 2 == 0) loader->Next();
  }
}

}  // namespace
}  // namespace headroom::data
