#include "executor/synthetic_data.h"

#include <algorithm>

#include <cmath>

#include "absl/strings/str_cat.h"
#include "util/split_mix.h"

namespace headroom::executor {
namespace {

// Returns the i-th number of stream `stream`, uniform in [-1, 1).
float Uniform(uint64_t seed, uint64_t stream, uint64_t i) {
  const uint64_t bits = SplitMix64(SplitMix64(seed ^ SplitMix64(stream)) + i) >> 40;  // 24 bits.
  return static_cast<float>(bits) * (2.0f / 16777216.0f) - 1.0f;
}

uint64_t StreamOf(const std::string& name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a.
  for (char c : name) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ULL;
  return h;
}

// Classes the prototype task draws labels from (the first ones of the model's): few enough
// that a short run sees each class often, so the loss falls within tens of steps.
constexpr int64_t kMaxTaskClasses = 10;

// The scale of uniform noise with unit variance.
constexpr float kUnitVariance = 1.7320508f;  // sqrt(3)

// Returns the half-width of a parameter's uniform initialiser and whether it is a
// constant instead (`constant` set), from the first node that reads it.
float InitBound(const graph::Graph& g, graph::TensorId t, float* constant, bool* is_constant) {
  *is_constant = false;
  const graph::Tensor& tensor = g.tensor(t);
  for (graph::NodeId n : tensor.consumers) {
    const graph::Node& node = g.node(n);
    int pos = -1;
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      if (node.inputs[i] == t) pos = static_cast<int>(i);
    }
    const std::string& op = node.op->name;
    // A bf16 copy (graph/mixed_precision.h): the parameter initialises as its copy's readers
    // would initialise it, so a bf16 run starts from the float32 run's weights.
    if (op == "Cast") return InitBound(g, node.outputs[0], constant, is_constant);
    if (op == "BatchNorm" || op == "LayerNorm" || op == "GroupNorm") {
      *is_constant = true;
      *constant = (pos == 1 || pos == 4) ? 1.0f : 0.0f;
      return 0;
    }
    // PyTorch's fan-in of a ConvTranspose2d weight [C_in, C_out/groups, kh, kw] is the same
    // product of dims 1 to 3.
    if ((op == "Conv2D" || op == "ConvTranspose2D") && pos >= 1) {
      const graph::Shape& w = g.tensor(node.inputs[1]).shape;
      return 1.0f / std::sqrt(static_cast<float>(w[1] * w[2] * w[3]));
    }
    if (op == "MatMul" && pos >= 1) {
      const graph::Shape& b = g.tensor(node.inputs[1]).shape;
      const int64_t fan_in = node.attrs.Bool("transpose_b") ? b.back() : b[b.size() - 2];
      return 1.0f / std::sqrt(static_cast<float>(fan_in));
    }
    if (op == "Embedding") return 0.02f * kUnitVariance;  // As GPT-2, std 0.02.
  }
  if (tensor.role == proto::ROLE_BUFFER) {
    *is_constant = true;
    *constant = 0.0f;
    return 0;
  }
  return 0.02f * kUnitVariance;
}

}  // namespace

void FillInitialValue(const graph::Graph& forward, graph::TensorId t, uint64_t seed,
                      absl::Span<uint8_t> out) {
  const graph::Tensor& tensor = forward.tensor(t);
  std::fill(out.begin(), out.end(), 0);
  if (tensor.dtype != proto::DTYPE_FLOAT32) return;
  float constant = 0;
  bool is_constant = false;
  const float bound = InitBound(forward, t, &constant, &is_constant);
  const uint64_t stream = StreamOf(tensor.name);
  float* v = reinterpret_cast<float*>(out.data());
  const int64_t n = static_cast<int64_t>(out.size() / sizeof(float));
  for (int64_t i = 0; i < n; ++i) v[i] = is_constant ? constant : bound * Uniform(seed, stream, i);
}

std::vector<HostTensor> InitialState(const graph::Graph& forward, uint64_t seed) {
  std::vector<HostTensor> state;
  for (graph::TensorId t = 0; t < static_cast<graph::TensorId>(forward.tensors().size()); ++t) {
    const graph::Tensor& tensor = forward.tensor(t);
    if (tensor.role != proto::ROLE_PARAMETER && tensor.role != proto::ROLE_BUFFER) continue;
    HostTensor value = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    FillInitialValue(forward, t, seed, absl::MakeSpan(value.bytes));
    state.push_back(std::move(value));
  }
  return state;
}

absl::StatusOr<SyntheticTask> SyntheticTask::Create(const graph::Graph& forward, uint64_t seed) {
  SyntheticTask task(forward, seed);
  const graph::Tensor& loss = forward.tensor(forward.loss());
  const graph::Node& sce = forward.node(loss.producer);
  const bool pixel = sce.op->name == "PixelSoftmaxCrossEntropy";
  if ((sce.op->name != "SoftmaxCrossEntropy" && !pixel) ||
      forward.tensor(sce.inputs[1]).role != proto::ROLE_LABEL) {
    return absl::InvalidArgumentError(
        absl::StrCat("synthetic data: the loss '", loss.name,
                     "' must be a SoftmaxCrossEntropy or "
                     "PixelSoftmaxCrossEntropy of a labels tensor; node '",
                     sce.name, "' is ", sce.op->name));
  }
  task.labels_ = sce.inputs[1];
  const graph::Shape& logits = forward.tensor(sce.inputs[0]).shape;
  task.num_classes_ = pixel ? logits[1] : logits.back();
  if (pixel) task.ignore_index_ = sce.attrs.Int("ignore_index");
  task.id_range_.assign(forward.tensors().size(), 0);
  for (const graph::Node& node : forward.nodes()) {
    if (node.op->name == "Embedding") {
      task.id_range_[node.inputs[0]] = forward.tensor(node.inputs[1]).shape[0];
    }
  }
  return task;
}

std::vector<HostTensor> SyntheticTask::Batch(int64_t step) const {
  const graph::Graph& g = *forward_;
  const uint64_t batch_seed = seed_ ^ SplitMix64(0xba7c4 + static_cast<uint64_t>(step));
  const graph::Tensor& labels_tensor = g.tensor(labels_);
  // Integer inputs first: labels may be a function of them.
  std::vector<HostTensor> batch;
  int ids_like_labels_index = -1;
  for (graph::TensorId t = 0; t < static_cast<graph::TensorId>(g.tensors().size()); ++t) {
    const graph::Tensor& tensor = g.tensor(t);
    if (tensor.role != proto::ROLE_INPUT || !graph::IsInteger(tensor.dtype)) continue;
    HostTensor ids = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    const int64_t range = id_range_[t] > 0 ? id_range_[t] : num_classes_;
    for (int64_t i = 0; i < ids.num_elements(); ++i) {
      const float u = 0.5f * (Uniform(batch_seed, StreamOf(tensor.name), i) + 1.0f);
      const int64_t id = std::min<int64_t>(static_cast<int64_t>(u * range), range - 1);
      if (tensor.dtype == proto::DTYPE_INT64) {
        reinterpret_cast<int64_t*>(ids.bytes.data())[i] = id;
      } else {
        reinterpret_cast<int32_t*>(ids.bytes.data())[i] = static_cast<int32_t>(id);
      }
    }
    batch.push_back(std::move(ids));
    if (batch.back().shape == labels_tensor.shape) {
      ids_like_labels_index = static_cast<int>(batch.size()) - 1;
    }
  }
  // Labels: the next id modulo the classes, or random classes.
  HostTensor labels = MakeHostTensor(labels_tensor.name, labels_tensor.shape,
                                     labels_tensor.dtype);
  const HostTensor* ids_like_labels =
      ids_like_labels_index >= 0 ? &batch[ids_like_labels_index] : nullptr;
  std::vector<int64_t> classes(labels.num_elements());
  const int64_t labels_per_sample =
      labels_tensor.shape.empty() ? 1 : labels.num_elements() / labels_tensor.shape[0];
  for (int64_t i = 0; i < labels.num_elements(); ++i) {
    if (ids_like_labels != nullptr) {
      const int64_t id = ids_like_labels->dtype == proto::DTYPE_INT64
                             ? reinterpret_cast<const int64_t*>(ids_like_labels->bytes.data())[i]
                             : reinterpret_cast<const int32_t*>(ids_like_labels->bytes.data())[i];
      classes[i] = (id + 1) % num_classes_;
    } else {
      // A segmentation task labels every pixel of a sample with the sample's class.
      const int64_t draw = ignore_index_.has_value() ? i - i % labels_per_sample : i;
      const float u = 0.5f * (Uniform(batch_seed, StreamOf(labels.name), draw) + 1.0f);
      const int64_t used = std::min<int64_t>(num_classes_, kMaxTaskClasses);
      classes[i] = std::min<int64_t>(static_cast<int64_t>(u * used), used - 1);
    }
    int64_t label = classes[i];
    // About one pixel in ten is void (the loss's ignore_index).
    if (ignore_index_.has_value() && Uniform(batch_seed, StreamOf(labels.name) + 1, i) > 0.8f) {
      label = *ignore_index_;
    }
    if (labels.dtype == proto::DTYPE_INT64) {
      reinterpret_cast<int64_t*>(labels.bytes.data())[i] = label;
    } else {
      reinterpret_cast<int32_t*>(labels.bytes.data())[i] = static_cast<int32_t>(label);
    }
  }
  // Float inputs: sample n is the prototype of its first label plus noise.
  for (graph::TensorId t = 0; t < static_cast<graph::TensorId>(g.tensors().size()); ++t) {
    const graph::Tensor& tensor = g.tensor(t);
    if (tensor.role != proto::ROLE_INPUT || tensor.dtype != proto::DTYPE_FLOAT32) continue;
    HostTensor x = MakeHostTensor(tensor.name, tensor.shape, tensor.dtype);
    const int64_t samples = tensor.shape.empty() ? 1 : tensor.shape[0];
    const int64_t per_sample = x.num_elements() / samples;
    const uint64_t stream = StreamOf(tensor.name);
    float* v = x.f32();
    for (int64_t n = 0; n < samples; ++n) {
      const int64_t c = classes[std::min<int64_t>(n * labels_per_sample,
                                                  labels.num_elements() - 1)];
      for (int64_t i = 0; i < per_sample; ++i) {
        const float prototype = kUnitVariance * Uniform(seed_, stream + c, i);
        const float noise = kUnitVariance * Uniform(batch_seed, stream, n * per_sample + i);
        v[n * per_sample + i] = prototype + 0.5f * noise;
      }
    }
    batch.push_back(std::move(x));
  }
  batch.push_back(std::move(labels));
  return batch;
}

}  // namespace headroom::executor
