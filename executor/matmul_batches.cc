#include "executor/matmul_batches.h"

#include <algorithm>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::executor {

std::string MatMulBatches::DebugString() const {
  return absl::StrCat("dims ", graph::ShapeString(dims), " a_of [", absl::StrJoin(a_of, ","),
                      "] b_of [", absl::StrJoin(b_of, ","), "]");
}

absl::StatusOr<MatMulBatches> BroadcastMatMulBatches(const graph::Shape& a_batch,
                                                     const graph::Shape& b_batch) {
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  // Both padded with leading 1s to the output's rank.
  graph::Shape a(rank - a_batch.size(), 1), b(rank - b_batch.size(), 1);
  a.insert(a.end(), a_batch.begin(), a_batch.end());
  b.insert(b.end(), b_batch.begin(), b_batch.end());
  MatMulBatches out;
  for (size_t d = 0; d < rank; ++d) {
    if (a[d] != b[d] && a[d] != 1 && b[d] != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "batch dims ", graph::ShapeString(a_batch), " and ", graph::ShapeString(b_batch),
          " do not broadcast: dim ", d, " of the output is ", a[d], " in a and ", b[d], " in b"));
    }
    out.dims.push_back(std::max(a[d], b[d]));
  }
  const int64_t count = static_cast<int64_t>(graph::NumElements(out.dims));
  out.a_of.reserve(count);
  out.b_of.reserve(count);
  for (int64_t i = 0; i < count; ++i) {
    // Row-major index i of the output, mapped into a and b (index 0 along their 1s).
    int64_t rest = i, ai = 0, bi = 0, a_stride = 1, b_stride = 1;
    for (size_t k = rank; k-- > 0;) {
      const int64_t idx = rest % out.dims[k];
      rest /= out.dims[k];
      if (a[k] != 1) ai += idx * a_stride;
      if (b[k] != 1) bi += idx * b_stride;
      a_stride *= a[k];
      b_stride *= b[k];
    }
    out.a_of.push_back(ai);
    out.b_of.push_back(bi);
  }
  return out;
}

}  // namespace headroom::executor
