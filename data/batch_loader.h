// Batches of a dataset, decoded and augmented on a background thread ahead of the step that
// needs them: the input pipeline of a training run on real data.
//
// Phases: Create() starts the thread, which decodes the batches in order into a queue of at
// most `prefetch` of them; Next() returns them one after another, waiting only where the
// thread is behind (the time it waits is kept: wait_seconds()). Destroying the loader stops
// the thread. The order is data/epoch_order.h's: epoch e visits the permutation of (seed, e),
// cut into global batches of ranks * batch of which this rank reads its share, so the
// batches depend only on the options, never on timing. A loader made at (first_epoch,
// first_batch) continues exactly where a run that stopped there left off.
//
// Thread-safety: Next() and the accessors from one thread; the decoding thread is the
// loader's own.
#ifndef HEADROOM_DATA_BATCH_LOADER_H_
#define HEADROOM_DATA_BATCH_LOADER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "data/augment.h"
#include "data/image_dataset.h"

namespace headroom::data {

struct LoaderOptions {
  // Items per batch on this rank (required, >= 1).
  int64_t batch = 0;
  // This process's rank among `ranks` reading the same set. Default one process.
  int rank = 0;
  int ranks = 1;
  // Seeds the epochs' permutations and the augmentation. Default 1.
  uint64_t seed = 1;
  // Whether each epoch visits a new permutation; false visits the items in the order given
  // (evaluation). Default true.
  bool shuffle = true;
  // Default none.
  Augmentation augmentation;
  // Batches decoded ahead of Next(); at least 1. Default 2.
  int prefetch = 2;
  // Where the run starts (a resumed run: the next batch it has not trained on). Default the
  // beginning.
  int64_t first_epoch = 0;
  int64_t first_batch = 0;
};

struct Batch {
  int64_t epoch = 0;
  int64_t index = 0;  // within its epoch
  // [batch, channels, height, width] pixels in [0, 1] (augmented), row-major.
  std::vector<float> pixels;
  // [batch] class labels.
  std::vector<int64_t> labels;
};

class BatchLoader {
 public:
  // Returns a loader of `items` (indices into `set`, which must outlive it) and starts its
  // thread. InvalidArgument for a batch below 1, a rank outside [0, ranks), prefetch below
  // 1, a start past the epoch's batches, or an epoch that holds no whole global batch.
  static absl::StatusOr<std::unique_ptr<BatchLoader>> Create(const ImageDataset* set,
                                                             std::vector<int64_t> items,
                                                             const LoaderOptions& options);
  ~BatchLoader();
  BatchLoader(const BatchLoader&) = delete;
  BatchLoader& operator=(const BatchLoader&) = delete;

  // Returns the next batch, waiting for the thread if it is not decoded yet.
  Batch Next();

  // Whole global batches in one epoch.
  int64_t batches_per_epoch() const { return batches_per_epoch_; }
  // Seconds Next() has spent waiting for the thread, in all.
  double wait_seconds() const { return wait_seconds_; }

 private:
  BatchLoader(const ImageDataset* set, std::vector<int64_t> items, const LoaderOptions& options,
              int64_t batches_per_epoch);
  // The thread: decodes batches in order until stopped.
  void Run();
  // Decodes batch `index` of epoch `epoch` (whose permutation is `order`).
  Batch Decode(const std::vector<int64_t>& order, int64_t epoch, int64_t index) const;

  const ImageDataset* const set_;
  const std::vector<int64_t> items_;
  const LoaderOptions options_;
  const int64_t batches_per_epoch_;
  double wait_seconds_ = 0;

  absl::Mutex mu_;
  std::deque<Batch> ready_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace headroom::data

#endif  // HEADROOM_DATA_BATCH_LOADER_H_
