// What a backend's kernels are handed for one node of the training step. The executor
// builds these from the plan (every view points into the arena at the tensor's planned
// offset); the backend only computes.
#ifndef HEADROOM_EXECUTOR_KERNEL_ARGS_H_
#define HEADROOM_EXECUTOR_KERNEL_ARGS_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "executor/tensor_view.h"
#include "graph/op_registry.h"

namespace headroom::executor {

// Sums `count` floats at `data` in place over every data-parallel rank and returns once the
// sum is there on this rank (blocking): a synchronised batch norm's per-channel sums
// (executor/batch_norm_sync.h). `what` says which sums ("batch sums"); the caller adds the
// node. Every rank calls it at the same nodes, in the same order, with the same counts.
using StatisticsAllreduce =
    std::function<absl::Status(float* data, size_t count, const char* what)>;

// A forward op (op set name, e.g. "Conv2D"), in training mode or not.
//
// Aliasing: where the op's gradient rule allows forward in-place (elementwise ops, Add, Mul,
// BatchNorm, LayerNorm, Dropout), outputs[0].data may equal an input's data of the same
// size; where the op is a view (Flatten, Reshape) outputs[0].data usually equals
// inputs[0].data and the kernel must then write nothing.
struct ForwardArgs {
  std::string op;
  const graph::Attrs* attrs = nullptr;
  // The op's inputs in schema order (an omitted optional input is absent). In training,
  // BatchNorm gets only x, weight and bias here; its running statistics are in `running`.
  std::vector<TensorView> inputs;
  // The op's outputs, all present.
  std::vector<TensorView> outputs;
  // Training only: the state the backward reads, in the order of the op's gradient rule
  // (BatchNorm: mean, then a per-channel deviation statistic; LayerNorm: per-row mean and
  // a per-row deviation statistic; Dropout: the bool keep-mask). What the deviation
  // statistic holds (inverse std or variance) is the backend's choice; only the same
  // backend's backward reads it.
  std::vector<TensorView> saved;
  // BatchNorm in a training forward that is not a re-forward: running_mean and running_var
  // [C], updated in place with the op's momentum (PyTorch's rule: the running variance
  // takes the unbiased batch variance). Empty otherwise, including every re-forward.
  std::vector<TensorView> running;
  // Batch statistics for BatchNorm, an active Dropout.
  bool training = true;
  // BatchNorm in training, synchronised across data-parallel ranks (--sync-batchnorm): the
  // statistics are the global batch's: the kernel sums count, sum(x) and then
  // sum((x - mean)^2) per channel through this (two calls of C + 1 and C floats) and saves
  // the global mean and biased variance; the running statistics take the unbiased variance
  // over the global count. Empty: the statistics are this rank's own batch.
  StatisticsAllreduce sync_statistics;
  // BatchNorm in a training re-forward: `saved` already holds the forward's statistics (a
  // synchronised batch norm's global ones, which the executor copied in; a reversible
  // block's rebuild reads the forward's saved tensors themselves); the kernel normalises
  // with them as its forward did (with sync_statistics set, as a synchronised forward) and
  // computes, reduces and updates nothing.
  bool saved_statistics_given = false;
  // Dropout's random stream for this node in this step. A re-forward is handed the same
  // seed and must write the same mask and output.
  uint64_t seed = 0;
  // Bytes of the arena the kernel may use while it runs: the node's planned scratch, as
  // many bytes as Backend::ScratchBytes() declared for these arguments (nullptr and 0 when
  // it declared none). Nothing in it survives to the next call.
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
};

// The backward of a forward op ("Conv2D", not "Conv2DGrad").
//
// Aliasing: where the op's gradient rule allows backward in-place (ReLU, ReLU6,
// HardSigmoid, HardSwish, Sigmoid, Tanh, Softmax, GELU, Dropout, Add, Mul),
// input_grads[i].data may equal output_grads[0].data; where it is a view (Flatten, Reshape)
// they are usually equal and the kernel writes nothing. No input gradient aliases any other
// tensor otherwise.
struct BackwardArgs {
  std::string op;
  const graph::Attrs* attrs = nullptr;
  // The forward op's inputs, outputs and saved state. Shapes and dtypes are always set;
  // data only for the tensors the op's gradient rule reads (planner/gradient_rules.cc).
  // BatchNorm's inputs are x, weight, bias (running statistics are never read).
  std::vector<TensorView> inputs;
  std::vector<TensorView> outputs;
  std::vector<TensorView> saved;
  // One per forward output; data is nullptr where no gradient flows (read it as zero).
  std::vector<TensorView> output_grads;
  // One per forward input; data is nullptr where that input needs no gradient. The
  // kernel overwrites each present one (it does not accumulate). Distinct inputs always
  // have distinct gradients.
  std::vector<TensorView> input_grads;
  // BatchNorm synchronised across ranks (ForwardArgs::sync_statistics): where dx is
  // computed and a gradient flows, the kernel sums count, sum(dy) and sum(dy * xhat) per
  // channel through this (one call of 2C + 1 floats) so that dx is the global batch's;
  // dweight and dbias stay this rank's own sums (the gradient exchange averages them).
  StatisticsAllreduce sync_statistics;
  // The node's planned scratch, as for ForwardArgs.
  void* scratch = nullptr;
  uint64_t scratch_bytes = 0;
};

// Hyper-parameters of an optimizer step, with defaults as in PyTorch's SGD and Adam.
struct OptimizerParams {
  double learning_rate = 0.01;
  double momentum = 0.9;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  // L2 penalty added to the gradient before the step.
  double weight_decay = 0;
};

// One parameter's optimizer step: "SgdMomentumUpdate" (state: momentum buffer, PyTorch's
// rule buf = momentum * buf + grad, p -= lr * buf, with buf = grad on step 1) or
// "AdamUpdate" (state: m, v; bias-corrected, as torch.optim.Adam).
struct UpdateArgs {
  std::string op;
  TensorView param;
  TensorView grad;
  std::vector<TensorView> state;
  OptimizerParams params;
  // 1 for the first step.
  int64_t step = 1;
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_KERNEL_ARGS_H_
