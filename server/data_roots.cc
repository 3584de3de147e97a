#include "server/data_roots.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cerrno>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::server {
namespace {

// Returns the real path of `path` (symlinks and ".." resolved), or the error naming it.
absl::StatusOr<std::string> RealPath(const std::string& path, const std::string& what) {
  char resolved[PATH_MAX];
  if (realpath(path.c_str(), resolved) == nullptr) {
    const int error = errno;
    return absl::InvalidArgumentError(
        absl::StrCat(what, " '", path, "' does not resolve: ", strerror(error)));
  }
  return std::string(resolved);
}

// Whether real path `path` is `root` or lies beneath it.
bool Under(const std::string& path, const std::string& root) {
  if (root == "/") return true;
  return path == root || absl::StartsWith(path, absl::StrCat(root, "/"));
}

}  // namespace

absl::StatusOr<DataRoots> DataRoots::Create(const std::vector<std::string>& roots) {
  std::vector<std::string> resolved;
  for (const std::string& root : roots) {
    absl::StatusOr<std::string> real = RealPath(root, "--data-root");
    if (!real.ok()) return real.status();
    struct stat st;
    if (stat(real->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--data-root '", root, "' is not a directory"));
    }
    resolved.push_back(*std::move(real));
  }
  return DataRoots(std::move(resolved));
}

std::string DataRoots::RootsText() const {
  if (roots_.empty()) return "none (start headroomd with --data-root DIR)";
  std::vector<std::string> quoted;
  for (const std::string& r : roots_) quoted.push_back(absl::StrCat("'", r, "'"));
  return absl::StrJoin(quoted, ", ");
}

absl::StatusOr<std::string> DataRoots::Resolve(const std::string& dataset) const {
  if (dataset == kFashionMnistName) return dataset;
  if (dataset.empty()) {
    return absl::InvalidArgumentError("spec.data.dataset: empty path");
  }
  absl::StatusOr<std::string> real = RealPath(dataset, "spec.data.dataset");
  if (!real.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        real.status().message(), "; datasets are read under the data roots ", RootsText()));
  }
  for (const std::string& root : roots_) {
    if (Under(*real, root)) return *real;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("spec.data.dataset '", dataset, "' resolves to '", *real,
                   "', outside this daemon's data roots: ", RootsText(), " (only '",
                   kFashionMnistName, "' and paths under a root may be read)"));
}

}  // namespace headroom::server
