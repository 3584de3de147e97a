// A fit loop's checkpoint file (executor/fit.h): the trainer's state and everything around
// it that an exact resume needs.
//
// The file: the line "headroom-fit-checkpoint 1", then records, each a key (uint32 length,
// bytes) and a payload (uint64 length, bytes), little-endian: "position" (text lines
// "name value"), one "tensor" per persistent tensor (a serialized proto::TensorValue),
// "metric NAME" ("value epoch"), "callback NAME" (the callback's bytes), and "end", whose
// absence marks a file cut short. Doubles are written with 17 significant digits, which
// read back bitwise. Written to PATH.tmp and renamed, so PATH is whole or absent.
//
// Functions; thread-safe.
#ifndef HEADROOM_EXECUTOR_FIT_CHECKPOINT_H_
#define HEADROOM_EXECUTOR_FIT_CHECKPOINT_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "executor/host_tensor.h"

namespace headroom::executor {

struct FitCheckpoint {
  // The next batch to train.
  int64_t epoch = 0;
  int64_t batch = 0;
  // The data order it was taken under: a resume must use the same.
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t ranks = 1;
  // The loop's running loss of the epoch, and whether a callback had asked it to stop.
  double epoch_loss_sum = 0;
  int64_t epoch_steps = 0;
  bool stop_requested = false;
  std::string stop_reason;
  // The trainer's state: steps run and every persistent tensor.
  int64_t steps_run = 0;
  std::vector<HostTensor> tensors;
  // Metrics by name: (value, epoch).
  std::map<std::string, std::pair<double, int64_t>> metrics;
  // Each callback's state, by name.
  std::vector<std::pair<std::string, std::string>> callbacks;
};

// Writes `checkpoint` to `path` (via PATH.tmp). Unavailable naming the file if it cannot.
absl::Status WriteFitCheckpoint(const std::string& path, const FitCheckpoint& checkpoint);

// Returns the checkpoint in `path`. NotFound for a missing file; InvalidArgument naming
// the file and the record for one that is not a checkpoint, is cut short or malformed.
absl::StatusOr<FitCheckpoint> ReadFitCheckpoint(const std::string& path);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_FIT_CHECKPOINT_H_
