// The backends by name, for the command line and the daemon.
#ifndef HEADROOM_EXECUTOR_BACKENDS_H_
#define HEADROOM_EXECUTOR_BACKENDS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "executor/backend.h"

namespace headroom::executor {

// What a backend may trade for speed, filled from flags (`--nondeterministic`).
struct BackendOptions {
  // Whether every kernel must be deterministic: bitwise the same results run after run, as
  // "plans change memory, never math" needs. Default true. The CPU backend always is; on
  // CUDA, false admits cuDNN convolution algorithms that accumulate with atomics (often
  // faster, sometimes with less workspace).
  bool deterministic = true;
};

// Returns the backend named "cpu" (oneDNN) or "cuda" (device 0) with `options`.
// InvalidArgument for another name; FailedPrecondition for cuda in a build without the
// toolkit (and the CUDA backend's own error where no GPU is attached).
absl::StatusOr<std::unique_ptr<Backend>> MakeBackendWithOptions(const std::string& name,
                                                                const BackendOptions& options);
// As above, with the default options. (Not an overload: this one is passed around as a
// function.)
absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_BACKENDS_H_
