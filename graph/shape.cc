#include "graph/shape.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace headroom::graph {

int DTypeSize(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
    case proto::DTYPE_INT32:
      return 4;
    case proto::DTYPE_FLOAT16:
    case proto::DTYPE_BFLOAT16:
      return 2;
    case proto::DTYPE_INT64:
      return 8;
    case proto::DTYPE_BOOL:
      return 1;
    default:
      return 0;
  }
}

const char* DTypeName(proto::DType dtype) {
  switch (dtype) {
    case proto::DTYPE_FLOAT32:
      return "float32";
    case proto::DTYPE_FLOAT16:
      return "float16";
    case proto::DTYPE_BFLOAT16:
      return "bfloat16";
    case proto::DTYPE_INT32:
      return "int32";
    case proto::DTYPE_INT64:
      return "int64";
    case proto::DTYPE_BOOL:
      return "bool";
    default:
      return "unspecified";
  }
}

bool IsFloating(proto::DType dtype) {
  return dtype == proto::DTYPE_FLOAT32 || dtype == proto::DTYPE_FLOAT16 ||
         dtype == proto::DTYPE_BFLOAT16;
}

bool IsInteger(proto::DType dtype) {
  return dtype == proto::DTYPE_INT32 || dtype == proto::DTYPE_INT64;
}

std::string ShapeString(const Shape& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

const char* RoleName(proto::TensorRole role) {
  switch (role) {
    case proto::ROLE_INPUT:
      return "input";
    case proto::ROLE_LABEL:
      return "label";
    case proto::ROLE_PARAMETER:
      return "parameter";
    case proto::ROLE_BUFFER:
      return "buffer";
    case proto::ROLE_ACTIVATION:
      return "activation";
    case proto::ROLE_GRADIENT:
      return "gradient";
    case proto::ROLE_OPTIMIZER_STATE:
      return "optimizer_state";
    case proto::ROLE_TEMPORARY:
      return "temporary";
    case proto::ROLE_CACHED_INPUT:
      return "cached_input";
    case proto::ROLE_COMMUNICATION:
      return "communication";
    default:
      return "unspecified";
  }
}

absl::StatusOr<uint64_t> CheckedNumElements(const Shape& shape, proto::DType dtype,
                                            const std::string& what) {
  const uint64_t element_bytes = DTypeSize(dtype) > 0 ? DTypeSize(dtype) : 1;
  const uint64_t max_elements = kMaxTensorBytes / element_bytes;
  uint64_t n = 1;
  for (size_t i = 0; i < shape.size(); ++i) {
    const int64_t d = shape[i];
    if (d <= 0) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": dimension ", i, " of shape ",
                                                     ShapeString(shape), " is ", d,
                                                     "; dimensions must be positive"));
    }
    if (static_cast<uint64_t>(d) > max_elements || n > max_elements / static_cast<uint64_t>(d)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": shape ", ShapeString(shape), " of ", DTypeName(dtype),
                       " exceeds the largest tensor Headroom accepts (2^48 bytes)"));
    }
    n *= static_cast<uint64_t>(d);
  }
  return n;
}

uint64_t NumElements(const Shape& shape) {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace headroom::graph
