#include "executor/image_task.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "graph/shape.h"
#include "util/bfloat16.h"
#include "util/status_macros.h"

namespace headroom::executor {

absl::StatusOr<ImageTask> ImageTask::Create(const graph::Graph& forward,
                                            const data::ImageSetShape& set) {
  ImageTask task;
  // 1. The loss: a SoftmaxCrossEntropy of logits and labels.
  const graph::Tensor& loss = forward.tensor(forward.loss());
  const graph::Node& sce = forward.node(loss.producer);
  if (sce.op->name != "SoftmaxCrossEntropy" ||
      forward.tensor(sce.inputs[1]).role != proto::ROLE_LABEL) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training on '", set.name, "' needs a SoftmaxCrossEntropy loss of a labels tensor; '",
        loss.name, "' is made by node '", sce.name, "' (", sce.op->name, ")"));
  }
  const graph::Tensor& logits = forward.tensor(sce.inputs[0]);
  const graph::Tensor& labels = forward.tensor(sce.inputs[1]);
  task.logits = logits.name;
  task.labels = labels.name;
  task.label_dtype = labels.dtype;
  // bfloat16 logits are a --precision bf16 graph's (graph/mixed_precision.h).
  if (logits.shape.size() != 2 ||
      (logits.dtype != proto::DTYPE_FLOAT32 && logits.dtype != proto::DTYPE_BFLOAT16) ||
      logits.shape[1] < set.num_classes) {
    return absl::InvalidArgumentError(
        absl::StrCat("logits '", logits.name, "' are ", graph::ShapeString(logits.shape), " ",
                     graph::DTypeName(logits.dtype), "; '", set.name,
                     "' needs [batch, classes >= ", set.num_classes, "] float32 or bfloat16"));
  }
  task.batch = logits.shape[0];
  task.classes = logits.shape[1];
  if (labels.shape != graph::Shape{task.batch} ||
      (labels.dtype != proto::DTYPE_INT64 && labels.dtype != proto::DTYPE_INT32)) {
    return absl::InvalidArgumentError(
        absl::StrCat("labels '", labels.name, "' are ", graph::ShapeString(labels.shape), " ",
                     graph::DTypeName(labels.dtype), "; needs [", task.batch, "] int64 or int32"));
  }
  // 2. The one input: the set's images.
  const graph::Shape images{task.batch, set.channels, set.height, set.width};
  for (const graph::Tensor& t : forward.tensors()) {
    if (t.role != proto::ROLE_INPUT) continue;
    if (!task.input.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("training on '", set.name,
                                                     "' needs one input; the model has '",
                                                     task.input, "' and '", t.name, "'"));
    }
    // The images as they are, or flattened row-major (the same bytes: what an mlp reads).
    const graph::Shape flat{task.batch, set.channels * set.height * set.width};
    if ((t.shape != images && t.shape != flat) || t.dtype != proto::DTYPE_FLOAT32) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", t.name, "' is ", graph::ShapeString(t.shape), " ",
                       graph::DTypeName(t.dtype), "; '", set.name, "' gives ",
                       graph::ShapeString(images), " float32 (", set.channels, " channel(s) of ",
                       set.height, "x", set.width, "), or flattened ", graph::ShapeString(flat)));
    }
    task.input = t.name;
    task.input_shape = t.shape;
  }
  if (task.input.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("training on '", set.name, "' needs an image input; the model has none"));
  }
  return task;
}

absl::StatusOr<ImageTask> ImageTask::Create(const graph::Graph& forward,
                                            const data::ImageDataset& set) {
  return Create(forward, set.shape());
}

std::vector<HostTensor> ImageTask::Tensors(absl::Span<const float> pixels,
                                           absl::Span<const int64_t> labels) const {
  std::vector<HostTensor> batch_tensors;
  HostTensor images = MakeHostTensor(input, input_shape, proto::DTYPE_FLOAT32);
  std::memcpy(images.bytes.data(), pixels.data(), images.bytes.size());
  HostTensor classes = MakeHostTensor(this->labels, {batch}, label_dtype);
  for (int64_t i = 0; i < batch; ++i) {
    if (label_dtype == proto::DTYPE_INT64) {
      reinterpret_cast<int64_t*>(classes.bytes.data())[i] = labels[i];
    } else {
      reinterpret_cast<int32_t*>(classes.bytes.data())[i] = static_cast<int32_t>(labels[i]);
    }
  }
  batch_tensors.push_back(std::move(images));
  batch_tensors.push_back(std::move(classes));
  return batch_tensors;
}

void ClassificationTotals::Add(const HostTensor& logits, absl::Span<const int64_t> labels,
                               int64_t count) {
  const int64_t classes = logits.shape.back();
  // A bfloat16 row is widened (exactly) first.
  std::vector<float> widened(logits.dtype == proto::DTYPE_BFLOAT16 ? classes : 0);
  for (int64_t i = 0; i < count; ++i) {
    const float* row = widened.data();
    if (widened.empty()) {
      row = logits.f32() + i * classes;
    } else {
      const uint16_t* bits = reinterpret_cast<const uint16_t*>(logits.bytes.data()) + i * classes;
      for (int64_t c = 0; c < classes; ++c) widened[c] = BFloat16ToFloat(bits[c]);
    }
    const int64_t best = std::max_element(row, row + classes) - row;
    correct += best == labels[i] ? 1 : 0;
    // Cross-entropy by log-sum-exp from the largest logit.
    double sum = 0;
    for (int64_t c = 0; c < classes; ++c) sum += std::exp(double{row[c]} - row[best]);
    loss_sum += std::log(sum) + row[best] - row[labels[i]];
    ++items;
  }
}

absl::StatusOr<EvalMetrics> EvaluateImages(Trainer& trainer, const ImageTask& task,
                                           const data::ImageDataset& set,
                                           absl::Span<const int64_t> items) {
  if (items.empty()) return absl::InvalidArgumentError("evaluation of no items");
  EvalMetrics metrics;
  ClassificationTotals totals;
  const int64_t image = set.image_elements();
  std::vector<float> pixels(task.batch * image);
  std::vector<int64_t> labels(task.batch);
  const std::string read[] = {task.logits};
  const int64_t n = static_cast<int64_t>(items.size());
  for (int64_t first = 0; first < n; first += task.batch) {
    // The last batch is filled with the set's first items, which are not counted.
    const int64_t count = std::min(task.batch, n - first);
    for (int64_t i = 0; i < task.batch; ++i) {
      const int64_t item = items[i < count ? first + i : i % n];
      labels[i] = set.Read(item, absl::MakeSpan(pixels).subspan(i * image, image));
    }
    ASSIGN_OR_RETURN(EvalResult pass, trainer.Evaluate(task.Tensors(pixels, labels), read));
    totals.Add(pass.read[0], labels, count);
    metrics.seconds += pass.seconds;
    metrics.peak_live_bytes = std::max(metrics.peak_live_bytes, pass.peak_live_bytes);
    metrics.arena_high_water_bytes = pass.arena_high_water_bytes;
  }
  metrics.loss = totals.loss();
  metrics.accuracy = totals.accuracy();
  metrics.items = totals.items;
  return metrics;
}

}  // namespace headroom::executor
