#include "executor/cuda/cudnn_limits.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::executor::cuda {

absl::Status CheckCudnnElements(const std::vector<int64_t>& dims, const char* what) {
  int64_t count = 1;
  for (int64_t d : dims) count *= d;
  if (count > INT_MAX) {
    return absl::UnimplementedError(
        absl::StrCat(what, " [", absl::StrJoin(dims, ","), "] has ", count,
                     " elements, past cuDNN's limit of 2^31 - 1 (", INT_MAX, ") per tensor"));
  }
  return absl::OkStatus();
}

}  // namespace headroom::executor::cuda
