// Shapes and element types of tensors, with overflow-checked sizes.
#ifndef HEADROOM_GRAPH_SHAPE_H_
#define HEADROOM_GRAPH_SHAPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/headroom.pb.h"

namespace headroom::graph {

// Dimensions, outermost first; empty for a scalar.
using Shape = std::vector<int64_t>;

// The largest tensor Headroom accepts: 2^48 bytes (256 TiB). Anything larger is an error,
// never a wrap-around.
inline constexpr uint64_t kMaxTensorBytes = uint64_t{1} << 48;

// Returns the size of one element in bytes, or 0 for DTYPE_UNSPECIFIED.
int DTypeSize(proto::DType dtype);

// Returns "float32", "int64", ... ("unspecified" for DTYPE_UNSPECIFIED).
const char* DTypeName(proto::DType dtype);

// Returns true for float32, float16 and bfloat16.
bool IsFloating(proto::DType dtype);

// Returns true for int32 and int64.
bool IsInteger(proto::DType dtype);

// Returns "[32,3,224,224]" ("[]" for a scalar).
std::string ShapeString(const Shape& shape);

// Returns "parameter", "activation", ...
const char* RoleName(proto::TensorRole role);

// Returns the number of elements, or InvalidArgument if a dimension is not positive or the
// tensor would exceed kMaxTensorBytes. `what` names the tensor in the message.
absl::StatusOr<uint64_t> CheckedNumElements(const Shape& shape, proto::DType dtype,
                                            const std::string& what);

// Returns the product of the dimensions (1 for a scalar).
// REQUIRES: the shape passed CheckedNumElements.
uint64_t NumElements(const Shape& shape);

}  // namespace headroom::graph

#endif  // HEADROOM_GRAPH_SHAPE_H_
