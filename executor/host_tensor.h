// A tensor's values in host memory the caller owns: batches, initial and final state.
#ifndef HEADROOM_EXECUTOR_HOST_TENSOR_H_
#define HEADROOM_EXECUTOR_HOST_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "graph/shape.h"
#include "proto/headroom.pb.h"

namespace headroom::executor {

struct HostTensor {
  std::string name;
  graph::Shape shape;
  proto::DType dtype = proto::DTYPE_FLOAT32;
  // The raw little-endian elements, row-major.
  std::vector<uint8_t> bytes;

  int64_t num_elements() const { return static_cast<int64_t>(graph::NumElements(shape)); }
  float* f32() { return reinterpret_cast<float*>(bytes.data()); }
  const float* f32() const { return reinterpret_cast<const float*>(bytes.data()); }
};

// Returns a zeroed host tensor of that shape and dtype.
inline HostTensor MakeHostTensor(std::string name, graph::Shape shape, proto::DType dtype) {
  HostTensor t;
  t.name = std::move(name);
  t.shape = std::move(shape);
  t.dtype = dtype;
  t.bytes.assign(graph::NumElements(t.shape) * graph::DTypeSize(dtype), 0);
  return t;
}

// Returns the tensor a TensorValue (a checkpoint's, an imported model's weights) holds.
inline HostTensor HostTensorFromValue(const proto::TensorValue& v) {
  HostTensor t;
  t.name = v.name();
  t.shape.assign(v.shape().begin(), v.shape().end());
  t.dtype = v.dtype();
  t.bytes.assign(v.data().begin(), v.data().end());
  return t;
}

}  // namespace headroom::executor

#endif  // HEADROOM_EXECUTOR_HOST_TENSOR_H_
