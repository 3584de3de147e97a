// Image classification on a labelled image set (data/image_dataset.h): how a forward graph
// takes its batches, and evaluation of held-out images by loss and top-1 accuracy.
//
// ImageTask::Create() finds, once, the graph's one float input of [B, C, H, W] (the set's
// image shape) or [B, C * H * W] (the images flattened row-major, as an mlp reads them: the
// same bytes), its labels [B] (int64 or int32) and its logits [B, classes] (the first input
// of its SoftmaxCrossEntropy loss, with at least the set's classes); then Tensors() turns
// pixels and labels into the batch the trainer takes. ClassificationTotals adds up loss and
// correct answers from logits. EvaluateImages() runs a held-out set through
// Trainer::Evaluate: inside the training arena, inference mode, any number of items (the
// last batch is filled with repeats that are not counted).
//
// ImageTask and ClassificationTotals are values; EvaluateImages uses the trainer (not
// thread-safe).
#ifndef HEADROOM_EXECUTOR_IMAGE_TASK_H_
#define HEADROOM_EXECUTOR_IMAGE_TASK_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "data/image_dataset.h"
#include "executor/host_tensor.h"
#include "executor/trainer.h"
#include "graph/graph.h"

namespace headroom::executor {

struct ImageTask {
  std::string input;   // [batch, C, H, W] or [batch, C * H * W] float32
  std::string labels;  // [batch], label_dtype
  std::string logits;  // [batch, classes] float32, or bfloat16 (a bf16 graph's)
  int64_t batch = 0;
  int64_t classes = 0;
  proto::DType label_dtype = proto::DTYPE_INT64;
  graph::Shape input_shape;

  // Returns how `forward` takes batches of `set`. InvalidArgument naming the tensor whose
  // shape or dtype does not fit the set (e.g. a model built for 32x32x3 images).
  static absl::StatusOr<ImageTask> Create(const graph::Graph& forward,
                                          const data::ImageSetShape& set);
  static absl::StatusOr<ImageTask> Create(const graph::Graph& forward,
                                          const data::ImageDataset& set);

  // Returns the batch tensors of `pixels` (batch * C * H * W) and `labels` (batch).
  // REQUIRES: the sizes fit.
  std::vector<HostTensor> Tensors(absl::Span<const float> pixels,
                                  absl::Span<const int64_t> labels) const;
};

// Loss and top-1 accuracy summed over items.
struct ClassificationTotals {
  double loss_sum = 0;  // sum of each item's cross-entropy, in double
  int64_t correct = 0;  // items whose largest logit (the first, on ties) is the label
  int64_t items = 0;

  // Adds the first `count` rows of `logits` ([rows, classes] float32 or bfloat16) against
  // `labels`.
  // REQUIRES: count <= rows and labels.size() >= count.
  void Add(const HostTensor& logits, absl::Span<const int64_t> labels, int64_t count);

  // The mean cross-entropy and the fraction correct (0 for no items).
  double loss() const { return items == 0 ? 0 : loss_sum / items; }
  double accuracy() const { return items == 0 ? 0 : static_cast<double>(correct) / items; }
};

struct EvalMetrics {
  double loss = 0;      // mean cross-entropy over the items
  double accuracy = 0;  // fraction of items right (top-1)
  int64_t items = 0;
  double seconds = 0;
  // The largest live bytes of any pass, and the arena's high-water mark after them.
  uint64_t peak_live_bytes = 0;
  uint64_t arena_high_water_bytes = 0;
};

// Returns loss and top-1 accuracy of `trainer`'s model on items `items` of `set`, in that
// order, batch by batch through Trainer::Evaluate. InvalidArgument for no items; the
// trainer's errors.
absl::StatusOr<EvalMetrics> EvaluateImages(Trainer& trainer, const ImageTask& task,
                                           const data::ImageDataset& set,
                                           absl::Span<const int64_t> items);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_IMAGE_TASK_H_
