// The flags `headroom train` and `headroom profile` share: what to train, under which
// budget, on which backend, with which optimizer; and the backend they name.
#ifndef HEADROOM_CLIENTS_TRAIN_FLAGS_H_
#define HEADROOM_CLIENTS_TRAIN_FLAGS_H_

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "util/cli_flags.h"
#include "executor/backend.h"
#include "executor/trainer.h"
#include "graph/graph.h"

namespace headroom::clients {

struct TrainFlags {
  // --steps; the default is the command's.
  int64_t steps = 20;
  // --backend: "cpu" (default) or "cuda".
  std::string backend = "cpu";
  // --profile: a profile whose measured costs the plan is chosen with.
  std::string profile_path;
  // --sections: split the forward pass into this many sections of equal length instead of
  // searching (0: search).
  int64_t sections = 0;
  executor::TrainerOptions trainer;
};

// Takes --steps (default `default_steps`), --seed, --budget, --sections, --backend,
// --no-offload, --optimizer, --lr and --device from `flags` into `f`; returns false after
// printing "headroom COMMAND: ..." to `err` for a bad value.
bool TakeTrainFlags(CliFlags& flags, const std::string& command, int64_t default_steps,
                    TrainFlags& f, std::ostream& err);

// Resolves the flags that need the graph: f.trainer.cost from --profile, f.trainer.cuts
// from --sections. The error names the file or the flag.
absl::Status ResolveGraphFlags(const graph::Graph& forward, TrainFlags& f);

// Returns the help lines of the flags TakeTrainFlags takes.
std::string TrainFlagsUsage(int64_t default_steps);

// Returns "[#######.............]" for step `done` of `total`.
std::string ProgressBar(int64_t done, int64_t total);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_TRAIN_FLAGS_H_
