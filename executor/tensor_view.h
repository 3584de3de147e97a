// A typed window onto a tensor's bytes in some backend's memory: what kernels see.
#ifndef HEADROOM_EXECUTOR_TENSOR_VIEW_H_
#define HEADROOM_EXECUTOR_TENSOR_VIEW_H_

#include <cstdint>

#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::executor {

// A tensor's shape, dtype and bytes. `data` is backend memory (host memory on the CPU
// backend, device memory on CUDA), or nullptr where the kernel is not given the tensor (a
// forward tensor its backward does not read, a gradient that does not flow). Does not own.
struct TensorView {
  void* data = nullptr;
  graph::Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;

  bool present() const { return data != nullptr; }
  int64_t num_elements() const { return static_cast<int64_t>(graph::NumElements(shape)); }
  uint64_t bytes() const { return graph::NumElements(shape) * graph::DTypeSize(dtype); }
  int rank() const { return static_cast<int>(shape.size()); }
  // Returns the dim, counting from the end for negative `i`.
  int64_t dim(int i) const { return shape[i < 0 ? i + rank() : i]; }

  float* f32() const { return static_cast<float*>(data); }
  int32_t* i32() const { return static_cast<int32_t*>(data); }
  int64_t* i64() const { return static_cast<int64_t*>(data); }
  uint8_t* u8() const { return static_cast<uint8_t*>(data); }
};

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_TENSOR_VIEW_H_
