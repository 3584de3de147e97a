// The backends by name, for the command line and the daemon.
#ifndef HEADROOM_EXECUTOR_BACKENDS_H_
#define HEADROOM_EXECUTOR_BACKENDS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "executor/backend.h"

namespace headroom::executor {

// Returns the backend named "cpu" (oneDNN) or "cuda" (device 0). InvalidArgument for another
// name; FailedPrecondition for cuda in a build without the toolkit (and the CUDA backend's
// own error where no GPU is attached).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_BACKENDS_H_
