#include "data/batch_loader.h"

#include <chrono>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "data/epoch_order.h"
#include "util/check.h"

namespace headroom::data {

absl::StatusOr<std::unique_ptr<BatchLoader>> BatchLoader::Create(const ImageDataset* set,
                                                                 std::vector<int64_t> items,
                                                                 const LoaderOptions& options) {
  auto fail = [&](const std::string& what) {
    return absl::InvalidArgumentError(absl::StrCat("loading '", set->name(), "': ", what));
  };
  if (options.batch < 1) return fail(absl::StrCat("batch ", options.batch, " is below 1"));
  if (options.ranks < 1 || options.rank < 0 || options.rank >= options.ranks) {
    return fail(absl::StrCat("rank ", options.rank, " is outside [0, ", options.ranks, ")"));
  }
  if (options.prefetch < 1) return fail(absl::StrCat("prefetch ", options.prefetch, " is below 1"));
  for (int64_t item : items) {
    if (item < 0 || item >= set->size()) {
      return fail(absl::StrCat("item ", item, " is outside the set's ", set->size()));
    }
  }
  const int64_t global = options.batch * options.ranks;
  const int64_t batches = BatchesPerEpoch(static_cast<int64_t>(items.size()), global);
  if (batches == 0) {
    return fail(absl::StrCat(items.size(), " items hold no whole global batch of ", global, " (",
                             options.ranks, " rank(s) of ", options.batch, ")"));
  }
  if (options.first_epoch < 0 || options.first_batch < 0 || options.first_batch >= batches) {
    return fail(absl::StrCat("start at epoch ", options.first_epoch, " batch ", options.first_batch,
                             " is outside the epoch's ", batches, " batches"));
  }
  return std::unique_ptr<BatchLoader>(new BatchLoader(set, std::move(items), options, batches));
}

BatchLoader::BatchLoader(const ImageDataset* set, std::vector<int64_t> items,
                         const LoaderOptions& options, int64_t batches_per_epoch)
    : set_(set),
      items_(std::move(items)),
      options_(options),
      batches_per_epoch_(batches_per_epoch),
      thread_([this] { Run(); }) {}

BatchLoader::~BatchLoader() {
  {
    absl::MutexLock lock(&mu_);
    stop_ = true;
  }
  thread_.join();
}

Batch BatchLoader::Decode(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const {
  absl::StatusOr<absl::Span<const int64_t>> mine =
      RankBatch(order, index, options_.batch, options_.rank, options_.ranks);
  CHECK(mine.ok());  // Create() checked the options and the epoch's size.
  const int64_t elements = set_->image_elements();
  Batch b;
  b.epoch = epoch;
  b.index = index;
  b.pixels.resize(options_.batch * elements);
  b.labels.resize(options_.batch);
  std::vector<float> plain(options_.augmentation.any() ? elements : 0);
  for (int64_t i = 0; i < options_.batch; ++i) {
    const int64_t item = (*mine)[i];
    absl::Span<float> dst = absl::MakeSpan(b.pixels).subspan(i * elements, elements);
    if (!options_.augmentation.any()) {
      b.labels[i] = set_->Read(item, dst);
      continue;
    }
    b.labels[i] = set_->Read(item, absl::MakeSpan(plain));
    const AugmentDraw draw = DrawAugmentation(options_.augmentation, options_.seed, epoch, item);
    ApplyAugmentation(draw, options_.augmentation.crop_padding, set_->channels(), set_->height(),
                      set_->width(), plain, dst);
  }
  return b;
}

void BatchLoader::Run() {
  int64_t epoch = options_.first_epoch;
  int64_t index = options_.first_batch;
  std::vector<int64_t> order;
  int64_t order_epoch = -1;
  while (true) {
    {
      absl::MutexLock lock(&mu_);
      auto room = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
        return stop_ || static_cast<int>(ready_.size()) < options_.prefetch;
      };
      mu_.Await(absl::Condition(&room));
      if (stop_) return;
    }
    if (order_epoch != epoch) {
      order = options_.shuffle ? EpochPermutation(items_, options_.seed, epoch) : items_;
      order_epoch = epoch;
    }
    Batch b = Decode(order, epoch, index);
    {
      absl::MutexLock lock(&mu_);
      ready_.push_back(std::move(b));
    }
    if (++index == batches_per_epoch_) {
      index = 0;
      ++epoch;
    }
  }
}

Batch BatchLoader::Next() {
  const auto start = std::chrono::steady_clock::now();
  absl::MutexLock lock(&mu_);
  auto decoded = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return !ready_.empty(); };
  mu_.Await(absl::Condition(&decoded));
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  Batch b = std::move(ready_.front());
  ready_.pop_front();
  return b;
}

}  // namespace headroom::data
