// Initial weights and a learnable synthetic task for any forward graph, from a seed: what
// `headroom train` trains on when no data is given. Deterministic: the same seed gives the
// same bytes on every machine (counter-based random numbers, no library generator).
#ifndef HEADROOM_EXECUTOR_SYNTHETIC_DATA_H_
#define HEADROOM_EXECUTOR_SYNTHETIC_DATA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "executor/host_tensor.h"
#include "graph/graph.h"

namespace headroom::executor {

// Returns every parameter and buffer of `forward`, in tensor-id order, initialised as
// PyTorch's layers do by default: convolution and matmul weights and biases uniform in
// +-1/sqrt(fan_in); normalisation weights one and biases zero; running means zero and
// running variances one; embedding tables and other parameters with standard deviation
// 0.02 (as GPT-2 initialises them).
std::vector<HostTensor> InitialState(const graph::Graph& forward, uint64_t seed);

// Writes the initial value InitialState() gives parameter or buffer `t` into `out` (exactly
// its bytes): one tensor at a time, without the others.
void FillInitialValue(const graph::Graph& forward, graph::TensorId t, uint64_t seed,
                      absl::Span<uint8_t> out);

// The batches of a learnable task. Labels are drawn from the first 10 classes; each has a
// fixed random prototype, and a sample is its class's prototype plus noise, so the loss must
// fall. Integer inputs (token ids) are random
// ids below the size of the table they index, and labels of the same shape are each id
// plus one, modulo the number of classes (each token predicts a function of itself).
// Under a PixelSoftmaxCrossEntropy every pixel of a sample carries the sample's class, and
// about one pixel in ten (chosen at random per batch) the loss's ignore_index instead.
// Thread-compatible; Batch() is const.
class SyntheticTask {
 public:
  // Returns the task for `forward`, or InvalidArgument if its loss is not a
  // SoftmaxCrossEntropy or PixelSoftmaxCrossEntropy of a labels tensor.
  static absl::StatusOr<SyntheticTask> Create(const graph::Graph& forward, uint64_t seed);

  // Returns batch `step`: every input and label tensor, by name.
  std::vector<HostTensor> Batch(int64_t step) const;

 private:
  SyntheticTask(const graph::Graph& forward, uint64_t seed) : forward_(&forward), seed_(seed) {}

  const graph::Graph* forward_;
  uint64_t seed_;
  graph::TensorId labels_ = -1;
  int64_t num_classes_ = 0;
  // A PixelSoftmaxCrossEntropy's ignore_index: every pixel of a sample is labelled with its
  // class, but about one in ten with this.
  std::optional<int64_t> ignore_index_;
  // By tensor: the rows of the table an integer input indexes (0 if none).
  std::vector<int64_t> id_range_;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_SYNTHETIC_DATA_H_
