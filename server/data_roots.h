// headroomd's rule for the datasets a job may read: a dataset path (JobSpec.data.dataset)
// must resolve, with every symlink and ".." followed (realpath), to a place under one of the
// directories the daemon was started with (--data-root, each resolved the same way once at
// start), so a client cannot make the daemon read /etc or another user's files through a
// path that looks inside, a "..", or a symlink that points out. "fashion-mnist" (Debian's
// dataset-fashion-mnist package, read from its fixed directory) is always allowed.
//
// Phases: Create() once with the roots; then Resolve() from any thread (immutable).
#ifndef HEADROOM_SERVER_DATA_ROOTS_H_
#define HEADROOM_SERVER_DATA_ROOTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace headroom::server {

// The dataset name that needs no data root.
inline constexpr char kFashionMnistName[] = "fashion-mnist";

class DataRoots {
 public:
  // Returns the roots, each resolved to its real path. InvalidArgument naming a root that
  // does not exist or is not a directory. No roots: only fashion-mnist is allowed.
  static absl::StatusOr<DataRoots> Create(const std::vector<std::string>& roots);
  DataRoots() = default;

  // Returns the path to read for `dataset`: "fashion-mnist" as it is, otherwise its real
  // path, which lies under (or is) one of the roots. InvalidArgument naming the path and the
  // roots for an empty path, one that does not resolve (it does not exist), or one that
  // resolves outside every root.
  absl::StatusOr<std::string> Resolve(const std::string& dataset) const;

  // The resolved roots, in the order given.
  const std::vector<std::string>& roots() const { return roots_; }

 private:
  explicit DataRoots(std::vector<std::string> roots) : roots_(std::move(roots)) {}
  // Returns "'A', 'B'" or "none (start headroomd with --data-root DIR)".
  std::string RootsText() const;

  std::vector<std::string> roots_;
};

}  // namespace headroom::server

#endif  // HEADROOM_SERVER_DATA_ROOTS_H_
