// A tensor whose value the ONNX importer knows at import time: an initializer, a Constant
// node's output, or what the importer folded from them (the shape arithmetic that
// torch.onnx exports: Shape, Gather, Concat, Unsqueeze, ...).
//
// Integer and boolean elements are held as int64, floating ones as double, so that folding
// is exact for shapes (INT64_MAX included) and close enough for float constants (which are
// rounded back to their dtype when they become tensors). Large float initializers (weights)
// keep only their raw bytes until something asks for their elements.
#ifndef HEADROOM_GRAPH_ONNX_TENSOR_H_
#define HEADROOM_GRAPH_ONNX_TENSOR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "graph/shape.h"
#include "onnx/onnx_pb.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// ONNX's element types (onnx::TensorProto::DataType) that the importer handles.
using OnnxDType = int32_t;

// Returns Headroom's dtype of an ONNX element type, or InvalidArgument naming it.
absl::StatusOr<proto::DType> HeadroomDType(OnnxDType type);

// Returns "FLOAT", "INT64", ... for messages.
std::string OnnxDTypeName(OnnxDType type);

class OnnxTensor {
 public:
  OnnxTensor() = default;

  // Returns the tensor of an initializer or Constant value. External data is read from
  // files in `external_dir` (the model's folder). InvalidArgument naming the tensor for an
  // element type Headroom cannot hold, data of the wrong size, or a missing file.
  // With `with_data` false only the type and shape are read (a weight that planning
  // needs no values of); such a tensor has_data() false and no elements.
  static absl::StatusOr<OnnxTensor> FromProto(const onnx::TensorProto& proto,
                                              const std::string& external_dir,
                                              bool with_data = true);

  // Returns an integer-typed tensor (INT64 unless `type` says otherwise) of `values` in
  // `shape` ({} for a scalar, {n} for a vector). REQUIRES: the sizes agree.
  static OnnxTensor Ints(std::vector<int64_t> values, Shape shape,
                         OnnxDType type = onnx::TensorProto::INT64);
  // Returns a float-typed tensor (FLOAT unless `type` says otherwise).
  static OnnxTensor Floats(std::vector<double> values, Shape shape,
                           OnnxDType type = onnx::TensorProto::FLOAT);

  OnnxDType type() const { return type_; }
  bool has_data() const { return has_data_; }
  const Shape& shape() const { return shape_; }
  int64_t size() const;
  bool is_integer() const;  // INT8..INT64, UINT8..UINT64, BOOL
  bool is_float() const;    // FLOAT, DOUBLE, FLOAT16, BFLOAT16

  // Returns the elements as int64 (floats are truncated toward zero).
  std::vector<int64_t> ints() const;
  // Returns the elements as double.
  std::vector<double> floats() const;
  // Returns element i as int64 / double.
  int64_t int_at(int64_t i) const;
  double float_at(int64_t i) const;

  // Returns the value as Headroom keeps tensors: name, shape, Headroom dtype and raw
  // little-endian bytes. InvalidArgument for a type Headroom cannot hold.
  absl::StatusOr<proto::TensorValue> ToValue(const std::string& name) const;

  // Returns "INT64[4] {1, 3, 224, 224}" (the first few elements), for messages.
  std::string DebugString() const;

 private:
  // Returns an empty tensor of `shape` and `type` with nothing left to decode.
  static OnnxTensor Decoded(Shape shape, OnnxDType type);
  // Decodes raw_ into ints_ or floats_.
  void Decode() const;

  OnnxDType type_ = onnx::TensorProto::FLOAT;
  Shape shape_;
  // Exactly one representation is filled at a time; raw bytes decode on first use.
  mutable std::vector<int64_t> ints_;
  mutable std::vector<double> floats_;
  mutable bool decoded_ = false;
  std::string raw_;
  bool has_data_ = true;
};

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_ONNX_TENSOR_H_
