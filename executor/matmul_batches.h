// Which matrices a batched MatMul pairs under numpy's broadcasting of batch dims: output
// matrix i (row-major over the broadcast batch shape) is a's matrix a_of[i] times b's matrix
// b_of[i]. Deciding only, shared by the CPU and CUDA kernels: [B,1,M,K] x [1,H,K,N] gives
// B*H products, each a's matrix used H times and each b's matrix B times, and the backward
// sums each operand's gradient over the products that used it.
#ifndef HEADROOM_EXECUTOR_MATMUL_BATCHES_H_
#define HEADROOM_EXECUTOR_MATMUL_BATCHES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/shape.h"

namespace headroom::executor {

struct MatMulBatches {
  graph::Shape dims;          // The broadcast batch dims of the output.
  std::vector<int64_t> a_of;  // Per output matrix, the index of a's matrix (row-major).
  std::vector<int64_t> b_of;  // Per output matrix, the index of b's matrix.

  // Returns the number of output matrices.
  int64_t size() const { return static_cast<int64_t>(a_of.size()); }
  // Returns "dims [..] a_of [..] b_of [..]", for messages and test failures.
  std::string DebugString() const;
};

// Returns the pairing of a's batch dims with b's (each without its last two dims, ranks
// right-aligned, each pair of dims equal or one of them 1), or InvalidArgument naming both.
absl::StatusOr<MatMulBatches> BroadcastMatMulBatches(const graph::Shape& a_batch,
                                                     const graph::Shape& b_batch);

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_MATMUL_BATCHES_H_
