#include "graph/onnx_tensor.h"

#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/bfloat16.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;
using TP = onnx::TensorProto;

// Returns the size of one element of `type` in bytes, or 0 for types the importer skips.
int ElementBytes(OnnxDType type) {
  switch (type) {
    case TP::BOOL:
    case TP::INT8:
    case TP::UINT8:
      return 1;
    case TP::INT16:
    case TP::UINT16:
    case TP::FLOAT16:
    case TP::BFLOAT16:
      return 2;
    case TP::INT32:
    case TP::UINT32:
    case TP::FLOAT:
      return 4;
    case TP::INT64:
    case TP::UINT64:
    case TP::DOUBLE:
      return 8;
    default:
      return 0;
  }
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16;
  const int exponent = (h >> 10) & 0x1f;
  const uint32_t mantissa = h & 0x3ffu;
  float magnitude;
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -24);
  } else if (exponent == 31) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else {
    magnitude = std::ldexp(static_cast<float>(mantissa | 0x400u), exponent - 25);
  }
  float out = magnitude;
  uint32_t bits;
  std::memcpy(&bits, &out, 4);
  bits |= sign;
  std::memcpy(&out, &bits, 4);
  return out;
}

template <typename T>
T Load(const char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Returns the bytes of an initializer stored outside the model (data_location EXTERNAL).
absl::StatusOr<std::string> ReadExternal(const TP& proto, const std::string& dir) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const onnx::StringStringEntryProto& e : proto.external_data()) {
    if (e.key() == "location") location = e.value();
    if (e.key() == "offset") offset = std::stoll(e.value());
    if (e.key() == "length") length = std::stoll(e.value());
  }
  if (location.empty()) {
    return InvalidArgumentError(StrCat("initializer '", proto.name(),
                                       "': external data without a location"));
  }
  if (dir.empty()) {
    return InvalidArgumentError(StrCat(
        "initializer '", proto.name(), "' is stored in the external file '", location,
        "', which only an import from the model's file (not from bytes) can read"));
  }
  const std::string path = dir + "/" + location;
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return InvalidArgumentError(StrCat("initializer '", proto.name(), "': cannot open its ",
                                       "external data file ", path));
  }
  in.seekg(0, std::ios::end);
  const int64_t file_size = in.tellg();
  if (length < 0) length = file_size - offset;
  if (offset < 0 || offset + length > file_size) {
    return InvalidArgumentError(StrCat("initializer '", proto.name(), "': ", path, " has ",
                                       file_size, " bytes, needs ", offset + length));
  }
  std::string bytes(static_cast<size_t>(length), '\0');
  in.seekg(offset);
  in.read(bytes.data(), length);
  return bytes;
}

}  // namespace

absl::StatusOr<proto::DType> HeadroomDType(OnnxDType type) {
  switch (type) {
    case TP::FLOAT: return proto::DTYPE_FLOAT32;
    case TP::FLOAT16: return proto::DTYPE_FLOAT16;
    case TP::BFLOAT16: return proto::DTYPE_BFLOAT16;
    case TP::INT32: return proto::DTYPE_INT32;
    case TP::INT64: return proto::DTYPE_INT64;
    case TP::BOOL: return proto::DTYPE_BOOL;
    default:
      return InvalidArgumentError(StrCat("element type ", OnnxDTypeName(type),
                                         " has no Headroom dtype (float32, float16, bfloat16, "
                                         "int32, int64 or bool)"));
  }
}

std::string OnnxDTypeName(OnnxDType type) {
  return TP::DataType_IsValid(type) ? TP::DataType_Name(static_cast<TP::DataType>(type))
                                    : StrCat("type ", type);
}

absl::StatusOr<OnnxTensor> OnnxTensor::FromProto(const TP& proto, const std::string& external_dir,
                                                 bool with_data) {
  OnnxTensor t;
  t.type_ = proto.data_type();
  const int bytes_per = ElementBytes(t.type_);
  if (bytes_per == 0) {
    return InvalidArgumentError(StrCat("initializer '", proto.name(), "' has element type ",
                                       OnnxDTypeName(t.type_), ", which the importer does not "
                                       "read"));
  }
  t.shape_.assign(proto.dims().begin(), proto.dims().end());
  int64_t n = 1;
  for (int64_t d : t.shape_) {
    if (d < 0) return InvalidArgumentError(StrCat("initializer '", proto.name(), "' has a negative dim"));
    n *= d;
  }
  if (!with_data) {
    t.has_data_ = false;
    return t;
  }
  // 1. Raw bytes, inline or external.
  if (proto.data_location() == TP::EXTERNAL) {
    ASSIGN_OR_RETURN(t.raw_, ReadExternal(proto, external_dir));
  } else if (proto.has_raw_data()) {
    t.raw_ = proto.raw_data();
  }
  if (!t.raw_.empty() || n == 0) {
    if (static_cast<int64_t>(t.raw_.size()) != n * bytes_per) {
      return InvalidArgumentError(StrCat("initializer '", proto.name(), "' has ",
                                         t.raw_.size(), " bytes of data, needs ", n * bytes_per,
                                         " for ", OnnxDTypeName(t.type_), " ",
                                         ShapeString(t.shape_)));
    }
    return t;
  }
  // 2. The typed fields.
  t.decoded_ = true;
  switch (t.type_) {
    case TP::FLOAT:
      t.floats_.assign(proto.float_data().begin(), proto.float_data().end());
      break;
    case TP::DOUBLE:
      t.floats_.assign(proto.double_data().begin(), proto.double_data().end());
      break;
    case TP::FLOAT16:
      for (int32_t v : proto.int32_data()) t.floats_.push_back(HalfToFloat(static_cast<uint16_t>(v)));
      break;
    case TP::BFLOAT16:
      for (int32_t v : proto.int32_data()) t.floats_.push_back(BFloat16ToFloat(static_cast<uint16_t>(v)));
      break;
    case TP::INT64:
      t.ints_.assign(proto.int64_data().begin(), proto.int64_data().end());
      break;
    case TP::UINT32:
    case TP::UINT64:
      for (uint64_t v : proto.uint64_data()) t.ints_.push_back(static_cast<int64_t>(v));
      break;
    default:  // INT32, INT16, INT8, UINT16, UINT8, BOOL
      t.ints_.assign(proto.int32_data().begin(), proto.int32_data().end());
      break;
  }
  const int64_t got = t.is_float() ? t.floats_.size() : t.ints_.size();
  if (got != n) {
    return InvalidArgumentError(StrCat("initializer '", proto.name(), "' has ", got,
                                       " elements, needs ", n, " for ", ShapeString(t.shape_)));
  }
  return t;
}

OnnxTensor OnnxTensor::Decoded(Shape shape, OnnxDType type) {
  OnnxTensor t;
  t.type_ = type;
  t.shape_ = std::move(shape);
  t.decoded_ = true;
  return t;
}

OnnxTensor OnnxTensor::Ints(std::vector<int64_t> values, Shape shape, OnnxDType type) {
  OnnxTensor t = Decoded(std::move(shape), type);
  t.ints_ = std::move(values);
  return t;
}

OnnxTensor OnnxTensor::Floats(std::vector<double> values, Shape shape, OnnxDType type) {
  OnnxTensor t = Decoded(std::move(shape), type);
  t.floats_ = std::move(values);
  return t;
}

int64_t OnnxTensor::size() const {
  int64_t n = 1;
  for (int64_t d : shape_) n *= d;
  return n;
}

bool OnnxTensor::is_float() const {
  return type_ == TP::FLOAT || type_ == TP::DOUBLE || type_ == TP::FLOAT16 ||
         type_ == TP::BFLOAT16;
}

bool OnnxTensor::is_integer() const { return !is_float(); }

void OnnxTensor::Decode() const {
  CHECK(has_data_) << "OnnxTensor: the elements of a shape-only tensor were read";
  if (decoded_) return;
  decoded_ = true;
  const int64_t n = size();
  const char* p = raw_.data();
  if (is_float()) floats_.resize(n);
  else ints_.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    switch (type_) {
      case TP::FLOAT: floats_[i] = Load<float>(p + 4 * i); break;
      case TP::DOUBLE: floats_[i] = Load<double>(p + 8 * i); break;
      case TP::FLOAT16: floats_[i] = HalfToFloat(Load<uint16_t>(p + 2 * i)); break;
      case TP::BFLOAT16: floats_[i] = BFloat16ToFloat(Load<uint16_t>(p + 2 * i)); break;
      case TP::BOOL:
      case TP::UINT8: ints_[i] = Load<uint8_t>(p + i); break;
      case TP::INT8: ints_[i] = Load<int8_t>(p + i); break;
      case TP::INT16: ints_[i] = Load<int16_t>(p + 2 * i); break;
      case TP::UINT16: ints_[i] = Load<uint16_t>(p + 2 * i); break;
      case TP::INT32: ints_[i] = Load<int32_t>(p + 4 * i); break;
      case TP::UINT32: ints_[i] = Load<uint32_t>(p + 4 * i); break;
      default: ints_[i] = Load<int64_t>(p + 8 * i); break;  // INT64, UINT64
    }
  }
}

std::vector<int64_t> OnnxTensor::ints() const {
  Decode();
  if (is_integer()) return ints_;
  std::vector<int64_t> out;
  out.reserve(floats_.size());
  for (double v : floats_) out.push_back(static_cast<int64_t>(v));
  return out;
}

std::vector<double> OnnxTensor::floats() const {
  Decode();
  if (is_float()) return floats_;
  return std::vector<double>(ints_.begin(), ints_.end());
}

int64_t OnnxTensor::int_at(int64_t i) const {
  Decode();
  return is_integer() ? ints_[i] : static_cast<int64_t>(floats_[i]);
}

double OnnxTensor::float_at(int64_t i) const {
  Decode();
  return is_float() ? floats_[i] : static_cast<double>(ints_[i]);
}

absl::StatusOr<proto::TensorValue> OnnxTensor::ToValue(const std::string& name) const {
  ASSIGN_OR_RETURN(proto::DType dtype, HeadroomDType(type_));
  if (!has_data_) {
    return absl::FailedPreconditionError(StrCat("tensor '", name, "' was read without its data"));
  }
  proto::TensorValue v;
  v.set_name(name);
  for (int64_t d : shape_) v.add_shape(d);
  v.set_dtype(dtype);
  if (!raw_.empty() && !decoded_) {  // already in the layout Headroom keeps
    v.set_data(raw_);
    return v;
  }
  const int64_t n = size();
  std::string& data = *v.mutable_data();
  data.resize(static_cast<size_t>(n) * DTypeSize(dtype));
  char* out = data.data();
  for (int64_t i = 0; i < n; ++i) {
    switch (dtype) {
      case proto::DTYPE_FLOAT32: {
        const float f = static_cast<float>(float_at(i));
        std::memcpy(out + 4 * i, &f, 4);
        break;
      }
      case proto::DTYPE_INT64: {
        const int64_t x = int_at(i);
        std::memcpy(out + 8 * i, &x, 8);
        break;
      }
      case proto::DTYPE_INT32: {
        const int32_t x = static_cast<int32_t>(int_at(i));
        std::memcpy(out + 4 * i, &x, 4);
        break;
      }
      case proto::DTYPE_BOOL:
        out[i] = int_at(i) != 0 ? 1 : 0;
        break;
      default:
        return InvalidArgumentError(StrCat("constant '", name, "' of type ",
                                           OnnxDTypeName(type_),
                                           " cannot be written out element by element"));
    }
  }
  return v;
}

std::string OnnxTensor::DebugString() const {
  constexpr int64_t kShown = 8;
  std::vector<std::string> parts;
  for (int64_t i = 0; i < std::min(size(), kShown); ++i) {
    parts.push_back(is_float() ? StrCat(float_at(i)) : StrCat(int_at(i)));
  }
  if (size() > kShown) parts.push_back("...");
  return StrCat(OnnxDTypeName(type_), ShapeString(shape_), " {", absl::StrJoin(parts, ", "), "}");
}

}  // namespace headroom::graph
