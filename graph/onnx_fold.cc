#include "graph/onnx_fold.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;
using TP = onnx::TensorProto;
using Inputs = std::vector<const OnnxTensor*>;

int64_t Product(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> strides(s.size(), 1);
  for (int d = static_cast<int>(s.size()) - 2; d >= 0; --d) strides[d] = strides[d + 1] * s[d + 1];
  return strides;
}

// Returns the numpy broadcast of `shapes`.
absl::StatusOr<Shape> Broadcast(const std::vector<Shape>& shapes) {
  size_t rank = 0;
  for (const Shape& s : shapes) rank = std::max(rank, s.size());
  Shape out(rank, 1);
  for (const Shape& s : shapes) {
    for (size_t k = 0; k < s.size(); ++k) {
      int64_t& o = out[rank - s.size() + k];
      const int64_t d = s[k];
      if (d == o || d == 1) continue;
      if (o != 1) {
        std::vector<std::string> names;
        for (const Shape& t : shapes) names.push_back(ShapeString(t));
        return InvalidArgumentError(StrCat("shapes ", absl::StrJoin(names, ", "),
                                           " do not broadcast"));
      }
      o = d;
    }
  }
  return out;
}

// Returns the flat index into a tensor of shape `in` broadcast to `out` for output index i.
int64_t BroadcastIndex(int64_t i, const Shape& out, const std::vector<int64_t>& out_strides,
                       const Shape& in, const std::vector<int64_t>& in_strides) {
  int64_t j = 0;
  const size_t offset = out.size() - in.size();
  for (size_t d = 0; d < out.size(); ++d) {
    const int64_t coord = (i / out_strides[d]) % out[d];
    if (d >= offset && in[d - offset] != 1) j += coord * in_strides[d - offset];
  }
  return j;
}

// Returns `values` (int64 or double elements of `like`'s kind) as a tensor of `type`.
OnnxTensor Make(OnnxDType type, Shape shape, const std::vector<double>& f,
                const std::vector<int64_t>& i) {
  const bool float_type =
      type == TP::FLOAT || type == TP::DOUBLE || type == TP::FLOAT16 || type == TP::BFLOAT16;
  if (float_type) {
    if (!f.empty() || i.empty()) return OnnxTensor::Floats(f, std::move(shape), type);
    return OnnxTensor::Floats(std::vector<double>(i.begin(), i.end()), std::move(shape), type);
  }
  if (!i.empty() || f.empty()) return OnnxTensor::Ints(i, std::move(shape), type);
  std::vector<int64_t> ints;
  for (double v : f) ints.push_back(static_cast<int64_t>(v));
  return OnnxTensor::Ints(std::move(ints), std::move(shape), type);
}

// Returns the elements of `t` at `indices` (flat), kept in its kind.
OnnxTensor Gathered(const OnnxTensor& t, Shape shape, const std::vector<int64_t>& indices) {
  if (t.is_float()) {
    const std::vector<double> f = t.floats();
    std::vector<double> out;
    out.reserve(indices.size());
    for (int64_t k : indices) out.push_back(f[k]);
    return OnnxTensor::Floats(std::move(out), std::move(shape), t.type());
  }
  const std::vector<int64_t> v = t.ints();
  std::vector<int64_t> out;
  out.reserve(indices.size());
  for (int64_t k : indices) out.push_back(v[k]);
  return OnnxTensor::Ints(std::move(out), std::move(shape), t.type());
}

absl::StatusOr<int64_t> Axis(int64_t axis, int64_t rank, const char* what) {
  if (axis < -rank || axis >= rank) {
    return InvalidArgumentError(StrCat(what, " ", axis, " is outside rank ", rank));
  }
  return axis < 0 ? axis + rank : axis;
}

// ---- Elementwise --------------------------------------------------------------------------

bool IsComparison(const std::string& op) {
  return op == "Equal" || op == "Less" || op == "Greater" || op == "LessOrEqual" ||
         op == "GreaterOrEqual" || op == "And" || op == "Or" || op == "Xor";
}

double ApplyFloat(const std::string& op, double a, double b, int64_t fmod) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return a / b;
  if (op == "Pow") return std::pow(a, b);
  if (op == "Min") return std::min(a, b);
  if (op == "Max") return std::max(a, b);
  if (op == "Mod") {
    const double r = std::fmod(a, b);
    return fmod || r == 0 || (r < 0) == (b < 0) ? r : r + b;
  }
  if (op == "Equal") return a == b;
  if (op == "Less") return a < b;
  if (op == "Greater") return a > b;
  if (op == "LessOrEqual") return a <= b;
  if (op == "GreaterOrEqual") return a >= b;
  if (op == "And") return (a != 0) && (b != 0);
  if (op == "Or") return (a != 0) || (b != 0);
  return (a != 0) != (b != 0);  // Xor
}

int64_t ApplyInt(const std::string& op, int64_t a, int64_t b, int64_t fmod) {
  if (op == "Add") return a + b;
  if (op == "Sub") return a - b;
  if (op == "Mul") return a * b;
  if (op == "Div") return b == 0 ? 0 : a / b;
  if (op == "Pow") return static_cast<int64_t>(std::pow(static_cast<double>(a), static_cast<double>(b)));
  if (op == "Min") return std::min(a, b);
  if (op == "Max") return std::max(a, b);
  if (op == "Mod") {
    if (b == 0) return 0;
    const int64_t r = a % b;
    return fmod || r == 0 || (r < 0) == (b < 0) ? r : r + b;
  }
  return static_cast<int64_t>(ApplyFloat(op, static_cast<double>(a), static_cast<double>(b), fmod));
}

absl::StatusOr<OnnxTensor> Binary(const onnx::NodeProto& node, const OnnxTensor& a,
                                  const OnnxTensor& b) {
  const std::string& op = node.op_type();
  ASSIGN_OR_RETURN(Shape out, Broadcast({a.shape(), b.shape()}));
  const std::vector<int64_t> os = Strides(out), as = Strides(a.shape()), bs = Strides(b.shape());
  const int64_t n = Product(out);
  const int64_t fmod = OnnxIntAttr(node, "fmod", 0);
  const bool floating = a.is_float() || b.is_float();
  const OnnxDType type = IsComparison(op) ? static_cast<OnnxDType>(TP::BOOL)
                         : a.is_float()   ? a.type()
                                          : (b.is_float() ? b.type() : a.type());
  std::vector<double> f;
  std::vector<int64_t> v;
  const std::vector<double> af = floating ? a.floats() : std::vector<double>();
  const std::vector<double> bf = floating ? b.floats() : std::vector<double>();
  const std::vector<int64_t> ai = floating ? std::vector<int64_t>() : a.ints();
  const std::vector<int64_t> bi = floating ? std::vector<int64_t>() : b.ints();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t ja = BroadcastIndex(i, out, os, a.shape(), as);
    const int64_t jb = BroadcastIndex(i, out, os, b.shape(), bs);
    if (floating) f.push_back(ApplyFloat(op, af[ja], bf[jb], fmod));
    else v.push_back(ApplyInt(op, ai[ja], bi[jb], fmod));
  }
  return Make(type, std::move(out), f, v);
}

absl::StatusOr<OnnxTensor> Unary(const std::string& op, const OnnxTensor& x) {
  if (op == "Not") {
    std::vector<int64_t> v = x.ints();
    for (int64_t& e : v) e = e == 0;
    return OnnxTensor::Ints(std::move(v), x.shape(), TP::BOOL);
  }
  if (x.is_integer() && (op == "Neg" || op == "Abs" || op == "Floor" || op == "Ceil")) {
    std::vector<int64_t> v = x.ints();
    for (int64_t& e : v) e = op == "Neg" ? -e : op == "Abs" ? std::abs(e) : e;
    return OnnxTensor::Ints(std::move(v), x.shape(), x.type());
  }
  std::vector<double> f = x.floats();
  for (double& e : f) {
    if (op == "Neg") e = -e;
    else if (op == "Abs") e = std::fabs(e);
    else if (op == "Sqrt") e = std::sqrt(e);
    else if (op == "Floor") e = std::floor(e);
    else if (op == "Ceil") e = std::ceil(e);
    else if (op == "Reciprocal") e = 1.0 / e;
    else if (op == "Exp") e = std::exp(e);
    else if (op == "Log") e = std::log(e);
    else if (op == "Erf") e = std::erf(e);
  }
  return OnnxTensor::Floats(std::move(f), x.shape(), x.is_float() ? x.type() : TP::FLOAT);
}

absl::StatusOr<OnnxTensor> Where(const OnnxTensor& c, const OnnxTensor& x, const OnnxTensor& y) {
  ASSIGN_OR_RETURN(Shape out, Broadcast({c.shape(), x.shape(), y.shape()}));
  const std::vector<int64_t> os = Strides(out), cs = Strides(c.shape()), xs = Strides(x.shape()),
                             ys = Strides(y.shape());
  const std::vector<int64_t> cv = c.ints();
  const int64_t n = Product(out);
  std::vector<double> f;
  std::vector<int64_t> v;
  const bool floating = x.is_float();
  const std::vector<double> xf = floating ? x.floats() : std::vector<double>();
  const std::vector<double> yf = floating ? y.floats() : std::vector<double>();
  const std::vector<int64_t> xi = floating ? std::vector<int64_t>() : x.ints();
  const std::vector<int64_t> yi = floating ? std::vector<int64_t>() : y.ints();
  for (int64_t i = 0; i < n; ++i) {
    const bool take_x = cv[BroadcastIndex(i, out, os, c.shape(), cs)] != 0;
    const int64_t j = take_x ? BroadcastIndex(i, out, os, x.shape(), xs)
                             : BroadcastIndex(i, out, os, y.shape(), ys);
    if (floating) f.push_back(take_x ? xf[j] : yf[j]);
    else v.push_back(take_x ? xi[j] : yi[j]);
  }
  return Make(x.type(), std::move(out), f, v);
}

// ---- Data movement ------------------------------------------------------------------------

absl::StatusOr<OnnxTensor> Gather(const onnx::NodeProto& node, const OnnxTensor& data,
                                  const OnnxTensor& indices) {
  const int64_t rank = data.shape().size();
  ASSIGN_OR_RETURN(int64_t axis, Axis(OnnxIntAttr(node, "axis", 0), rank, "axis"));
  Shape out(data.shape().begin(), data.shape().begin() + axis);
  out.insert(out.end(), indices.shape().begin(), indices.shape().end());
  out.insert(out.end(), data.shape().begin() + axis + 1, data.shape().end());
  const int64_t outer = Product(Shape(data.shape().begin(), data.shape().begin() + axis));
  const int64_t inner = Product(Shape(data.shape().begin() + axis + 1, data.shape().end()));
  const int64_t dim = data.shape()[axis];
  const std::vector<int64_t> idx = indices.ints();
  std::vector<int64_t> flat;
  for (int64_t o = 0; o < outer; ++o) {
    for (int64_t k : idx) {
      if (k < -dim || k >= dim) {
        return InvalidArgumentError(StrCat("index ", k, " is outside axis ", axis, " of ",
                                           dim, " elements"));
      }
      const int64_t kk = k < 0 ? k + dim : k;
      for (int64_t e = 0; e < inner; ++e) flat.push_back((o * dim + kk) * inner + e);
    }
  }
  return Gathered(data, std::move(out), flat);
}

absl::StatusOr<OnnxTensor> Concat(const onnx::NodeProto& node, const Inputs& inputs) {
  const Shape& first = inputs[0]->shape();
  ASSIGN_OR_RETURN(int64_t axis, Axis(OnnxIntAttr(node, "axis", 0), first.size(), "axis"));
  Shape out = first;
  out[axis] = 0;
  for (const OnnxTensor* t : inputs) {
    if (t->shape().size() != first.size()) return InvalidArgumentError("inputs differ in rank");
    out[axis] += t->shape()[axis];
  }
  const int64_t outer = Product(Shape(first.begin(), first.begin() + axis));
  std::vector<double> f;
  std::vector<int64_t> v;
  const bool floating = inputs[0]->is_float();
  for (int64_t o = 0; o < outer; ++o) {
    for (const OnnxTensor* t : inputs) {
      const int64_t chunk = Product(Shape(t->shape().begin() + axis, t->shape().end()));
      for (int64_t e = 0; e < chunk; ++e) {
        if (floating) f.push_back(t->float_at(o * chunk + e));
        else v.push_back(t->int_at(o * chunk + e));
      }
    }
  }
  return Make(inputs[0]->type(), std::move(out), f, v);
}

absl::StatusOr<OnnxTensor> Transpose(const onnx::NodeProto& node, const OnnxTensor& x) {
  const Shape& in = x.shape();
  std::vector<int64_t> perm = OnnxIntsAttr(node, "perm");
  if (perm.empty()) {
    for (int64_t d = static_cast<int64_t>(in.size()) - 1; d >= 0; --d) perm.push_back(d);
  }
  if (perm.size() != in.size()) return InvalidArgumentError("perm does not match the rank");
  Shape out;
  for (int64_t p : perm) out.push_back(in[p]);
  const std::vector<int64_t> is = Strides(in), os = Strides(out);
  std::vector<int64_t> flat(Product(out));
  for (int64_t i = 0; i < static_cast<int64_t>(flat.size()); ++i) {
    int64_t j = 0;
    for (size_t d = 0; d < out.size(); ++d) j += ((i / os[d]) % out[d]) * is[perm[d]];
    flat[i] = j;
  }
  return Gathered(x, std::move(out), flat);
}

absl::StatusOr<OnnxTensor> Slice(const onnx::NodeProto& node, const Inputs& in, int64_t opset) {
  const OnnxTensor& x = *in[0];
  const int64_t rank = x.shape().size();
  ASSIGN_OR_RETURN(std::vector<SliceRange> ranges, OnnxSliceRanges(node, in, x.shape(), opset));
  Shape out;
  for (const SliceRange& r : ranges) out.push_back(r.count);
  const std::vector<int64_t> is = Strides(x.shape()), os = Strides(out);
  std::vector<int64_t> flat(Product(out));
  for (int64_t i = 0; i < static_cast<int64_t>(flat.size()); ++i) {
    int64_t j = 0;
    for (int64_t d = 0; d < rank; ++d) {
      j += (ranges[d].start + ((i / os[d]) % out[d]) * ranges[d].step) * is[d];
    }
    flat[i] = j;
  }
  return Gathered(x, std::move(out), flat);
}

absl::StatusOr<OnnxTensor> Reshaped(const OnnxTensor& x, Shape shape) {
  if (Product(shape) != x.size()) {
    return InvalidArgumentError(StrCat("cannot reshape ", ShapeString(x.shape()), " to ",
                                       ShapeString(shape)));
  }
  std::vector<int64_t> flat(x.size());
  for (int64_t i = 0; i < x.size(); ++i) flat[i] = i;
  return Gathered(x, std::move(shape), flat);
}

}  // namespace

absl::StatusOr<Shape> OnnxReshapeTarget(const Shape& in, const std::vector<int64_t>& shape,
                                        bool allow_zero) {
  Shape out;
  int inferred = -1;
  int64_t known = 1;
  for (size_t k = 0; k < shape.size(); ++k) {
    int64_t d = shape[k];
    if (d == 0 && !allow_zero) {
      if (k >= in.size()) return InvalidArgumentError("shape copies a dim the input lacks");
      d = in[k];
    }
    if (d == -1) {
      if (inferred >= 0) return InvalidArgumentError("shape has two -1 dims");
      inferred = static_cast<int>(k);
    } else {
      known *= d;
    }
    out.push_back(d);
  }
  if (inferred >= 0) {
    if (known == 0 || Product(in) % known != 0) {
      return InvalidArgumentError(StrCat("cannot infer the -1 of [", absl::StrJoin(shape, ","),
                                         "] from ", ShapeString(in)));
    }
    out[inferred] = Product(in) / known;
  }
  return out;
}

namespace {

absl::StatusOr<OnnxTensor> Expand(const OnnxTensor& x, const OnnxTensor& shape) {
  ASSIGN_OR_RETURN(Shape out, Broadcast({x.shape(), shape.ints()}));
  const std::vector<int64_t> os = Strides(out), xs = Strides(x.shape());
  std::vector<int64_t> flat(Product(out));
  for (int64_t i = 0; i < static_cast<int64_t>(flat.size()); ++i) {
    flat[i] = BroadcastIndex(i, out, os, x.shape(), xs);
  }
  return Gathered(x, std::move(out), flat);
}

absl::StatusOr<OnnxTensor> ScatterND(const onnx::NodeProto& node, const OnnxTensor& data,
                                     const OnnxTensor& indices, const OnnxTensor& updates) {
  if (OnnxStringAttr(node, "reduction", "none") != "none") {
    return InvalidArgumentError("only reduction 'none' is folded");
  }
  const Shape& ds = data.shape();
  const int64_t k = indices.shape().empty() ? 0 : indices.shape().back();
  if (k < 1 || k > static_cast<int64_t>(ds.size())) {
    return InvalidArgumentError("indices' last dim must be in [1, rank of data]");
  }
  const int64_t rows = indices.size() / k;
  const int64_t slice = Product(Shape(ds.begin() + k, ds.end()));
  if (updates.size() != rows * slice) return InvalidArgumentError("updates do not fit indices");
  const std::vector<int64_t> strides = Strides(ds);
  const std::vector<int64_t> idx = indices.ints();
  const bool floating = data.is_float();
  std::vector<double> f = floating ? data.floats() : std::vector<double>();
  std::vector<int64_t> v = floating ? std::vector<int64_t>() : data.ints();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t base = 0;
    for (int64_t d = 0; d < k; ++d) {
      int64_t c = idx[r * k + d];
      if (c < 0) c += ds[d];
      if (c < 0 || c >= ds[d]) return InvalidArgumentError("an index is outside data");
      base += c * strides[d];
    }
    for (int64_t e = 0; e < slice; ++e) {
      if (floating) f[base + e] = updates.float_at(r * slice + e);
      else v[base + e] = updates.int_at(r * slice + e);
    }
  }
  return Make(data.type(), ds, f, v);
}

// ---- Dispatch -----------------------------------------------------------------------------

using FoldFn = std::function<absl::StatusOr<std::vector<OnnxTensor>>(
    const onnx::NodeProto&, const Inputs&, int64_t)>;

std::vector<int64_t> AxesOf(const onnx::NodeProto& node, const Inputs& in, int64_t opset) {
  if (opset >= 13 && in.size() > 1 && in[1] != nullptr) return in[1]->ints();
  return OnnxIntsAttr(node, "axes");
}

absl::StatusOr<OnnxTensor> Unsqueeze(const onnx::NodeProto& node, const Inputs& in,
                                     int64_t opset) {
  ASSIGN_OR_RETURN(Shape out, OnnxUnsqueezeShape(in[0]->shape(), AxesOf(node, in, opset)));
  return Reshaped(*in[0], std::move(out));
}

absl::StatusOr<OnnxTensor> Squeeze(const onnx::NodeProto& node, const Inputs& in, int64_t opset) {
  ASSIGN_OR_RETURN(Shape out, OnnxSqueezeShape(in[0]->shape(), AxesOf(node, in, opset)));
  return Reshaped(*in[0], std::move(out));
}

absl::StatusOr<OnnxTensor> Cast(const onnx::NodeProto& node, const OnnxTensor& x) {
  const OnnxDType to = static_cast<OnnxDType>(OnnxIntAttr(node, "to", TP::FLOAT));
  if (to == TP::BOOL) {
    std::vector<int64_t> v;
    for (double e : x.floats()) v.push_back(e != 0);
    return OnnxTensor::Ints(std::move(v), x.shape(), TP::BOOL);
  }
  return Make(to, x.shape(), x.is_float() ? x.floats() : std::vector<double>(),
              x.is_float() ? std::vector<int64_t>() : x.ints());
}

absl::StatusOr<OnnxTensor> ConstantOfShape(const onnx::NodeProto& node, const OnnxTensor& shape) {
  Shape out = shape.ints();
  const onnx::AttributeProto* value = FindOnnxAttr(node, "value");
  OnnxTensor fill = OnnxTensor::Floats({0.0}, {1});
  if (value != nullptr) {
    ASSIGN_OR_RETURN(fill, OnnxTensor::FromProto(value->t(), ""));
  }
  const int64_t n = Product(out);
  if (fill.is_float()) return OnnxTensor::Floats(std::vector<double>(n, fill.float_at(0)), out, fill.type());
  return OnnxTensor::Ints(std::vector<int64_t>(n, fill.int_at(0)), out, fill.type());
}

absl::StatusOr<OnnxTensor> Range(const OnnxTensor& start, const OnnxTensor& limit,
                                 const OnnxTensor& delta) {
  const double s = start.float_at(0), l = limit.float_at(0), d = delta.float_at(0);
  if (d == 0) return InvalidArgumentError("delta is 0");
  const int64_t n = std::max<int64_t>(0, static_cast<int64_t>(std::ceil((l - s) / d)));
  std::vector<double> f;
  for (int64_t i = 0; i < n; ++i) f.push_back(s + i * d);
  return Make(start.type(), {n}, start.is_float() ? f : std::vector<double>(),
              start.is_float() ? std::vector<int64_t>()
                               : std::vector<int64_t>(f.begin(), f.end()));
}

absl::StatusOr<OnnxTensor> ShapeOf(const onnx::NodeProto& node, const OnnxTensor& x) {
  const int64_t rank = x.shape().size();
  int64_t start = OnnxIntAttr(node, "start", 0), end = OnnxIntAttr(node, "end", rank);
  if (start < 0) start += rank;
  if (end < 0) end += rank;
  start = std::clamp<int64_t>(start, 0, rank);
  end = std::clamp<int64_t>(end, start, rank);
  std::vector<int64_t> dims(x.shape().begin() + start, x.shape().begin() + end);
  const int64_t n = dims.size();
  return OnnxTensor::Ints(std::move(dims), {n});
}

template <typename F>
FoldFn One(F f) {
  return [f](const onnx::NodeProto& node, const Inputs& in, int64_t opset)
             -> absl::StatusOr<std::vector<OnnxTensor>> {
    ASSIGN_OR_RETURN(OnnxTensor t, f(node, in, opset));
    std::vector<OnnxTensor> out;
    out.push_back(std::move(t));
    return out;
  };
}

const absl::flat_hash_map<std::string, FoldFn>& Folders() {
  static const auto* folders = [] {
    auto* m = new absl::flat_hash_map<std::string, FoldFn>();
    auto& f = *m;
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Mod", "Pow", "Min", "Max", "Equal",
                           "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or",
                           "Xor"}) {
      f[op] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
        return Binary(n, *in[0], *in[1]);
      });
    }
    for (const char* op : {"Not", "Neg", "Abs", "Sqrt", "Floor", "Ceil", "Reciprocal", "Exp",
                           "Log", "Erf"}) {
      f[op] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
        return Unary(n.op_type(), *in[0]);
      });
    }
    f["Identity"] = One([](const onnx::NodeProto&, const Inputs& in, int64_t)
                            -> absl::StatusOr<OnnxTensor> { return *in[0]; });
    f["Cast"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return Cast(n, *in[0]);
    });
    f["Shape"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return ShapeOf(n, *in[0]);
    });
    f["Gather"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return Gather(n, *in[0], *in[1]);
    });
    f["Concat"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return Concat(n, in);
    });
    f["Transpose"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return Transpose(n, *in[0]);
    });
    f["Slice"] = One(Slice);
    f["Unsqueeze"] = One(Unsqueeze);
    f["Squeeze"] = One(Squeeze);
    f["Reshape"] = One([](const onnx::NodeProto& n, const Inputs& in,
                          int64_t opset) -> absl::StatusOr<OnnxTensor> {
      const std::vector<int64_t> shape = opset >= 5 ? in[1]->ints() : OnnxIntsAttr(n, "shape");
      ASSIGN_OR_RETURN(Shape out,
                       OnnxReshapeTarget(in[0]->shape(), shape, OnnxIntAttr(n, "allowzero", 0) != 0));
      return Reshaped(*in[0], std::move(out));
    });
    f["Flatten"] = One([](const onnx::NodeProto& n, const Inputs& in,
                          int64_t) -> absl::StatusOr<OnnxTensor> {
      const Shape& s = in[0]->shape();
      ASSIGN_OR_RETURN(int64_t axis, Axis(OnnxIntAttr(n, "axis", 1), s.size() + 1, "axis"));
      return Reshaped(*in[0], {Product(Shape(s.begin(), s.begin() + axis)),
                               Product(Shape(s.begin() + axis, s.end()))});
    });
    f["Expand"] = One([](const onnx::NodeProto&, const Inputs& in, int64_t) {
      return Expand(*in[0], *in[1]);
    });
    f["Where"] = One([](const onnx::NodeProto&, const Inputs& in, int64_t) {
      return Where(*in[0], *in[1], *in[2]);
    });
    f["ConstantOfShape"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return ConstantOfShape(n, *in[0]);
    });
    f["Range"] = One([](const onnx::NodeProto&, const Inputs& in, int64_t) {
      return Range(*in[0], *in[1], *in[2]);
    });
    f["ScatterND"] = One([](const onnx::NodeProto& n, const Inputs& in, int64_t) {
      return ScatterND(n, *in[0], *in[1], *in[2]);
    });
    return m;
  }();
  return *folders;
}

}  // namespace

bool IsFoldableOnnxOp(const std::string& op_type) { return Folders().contains(op_type); }

absl::StatusOr<std::vector<OnnxTensor>> FoldOnnxNode(const onnx::NodeProto& node,
                                                     const Inputs& inputs, int64_t opset) {
  auto it = Folders().find(node.op_type());
  if (it == Folders().end()) {
    return InvalidArgumentError(StrCat(OnnxNodeLabel(node), ": cannot be evaluated at import"));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    // Only trailing optional inputs of Slice may be omitted.
    if (inputs[i] == nullptr && !(node.op_type() == "Slice" && i >= 3)) {
      return InvalidArgumentError(StrCat(OnnxNodeLabel(node), ": input ", i, " is missing"));
    }
  }
  absl::StatusOr<std::vector<OnnxTensor>> out = it->second(node, inputs, opset);
  if (!out.ok()) {
    return InvalidArgumentError(StrCat(OnnxNodeLabel(node), ": ", out.status().message()));
  }
  return out;
}

absl::StatusOr<std::vector<SliceRange>> OnnxSliceRanges(const onnx::NodeProto& node,
                                                        const Inputs& in, const Shape& shape,
                                                        int64_t opset) {
  const int64_t rank = shape.size();
  std::vector<int64_t> starts, ends, axes, steps;
  if (opset < 10) {
    starts = OnnxIntsAttr(node, "starts");
    ends = OnnxIntsAttr(node, "ends");
    axes = OnnxIntsAttr(node, "axes");
  } else {
    if (in.size() < 3 || in[1] == nullptr || in[2] == nullptr) {
      return InvalidArgumentError("starts and ends are required");
    }
    starts = in[1]->ints();
    ends = in[2]->ints();
    if (in.size() > 3 && in[3] != nullptr) axes = in[3]->ints();
    if (in.size() > 4 && in[4] != nullptr) steps = in[4]->ints();
  }
  if (axes.empty()) {
    for (int64_t d = 0; d < static_cast<int64_t>(starts.size()); ++d) axes.push_back(d);
  }
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size()) {
    return InvalidArgumentError("starts, ends, axes and steps differ in length");
  }
  std::vector<SliceRange> ranges(rank);
  for (int64_t d = 0; d < rank; ++d) ranges[d] = {0, 1, shape[d]};
  for (size_t k = 0; k < axes.size(); ++k) {
    ASSIGN_OR_RETURN(int64_t axis, Axis(axes[k], rank, "axis"));
    ASSIGN_OR_RETURN(ranges[axis], NormalizeSliceRange(shape[axis], starts[k], ends[k], steps[k]));
  }
  return ranges;
}

absl::StatusOr<Shape> OnnxUnsqueezeShape(const Shape& in, std::vector<int64_t> axes) {
  const int64_t rank = in.size() + axes.size();
  for (int64_t& a : axes) {
    ASSIGN_OR_RETURN(a, Axis(a, rank, "axis"));
  }
  std::sort(axes.begin(), axes.end());
  if (std::adjacent_find(axes.begin(), axes.end()) != axes.end()) {
    return InvalidArgumentError("axes repeat");
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d) {
    if (std::binary_search(axes.begin(), axes.end(), d)) out.push_back(1);
    else out.push_back(in[next++]);
  }
  return out;
}

absl::StatusOr<Shape> OnnxSqueezeShape(const Shape& in, std::vector<int64_t> axes) {
  for (int64_t& a : axes) {
    ASSIGN_OR_RETURN(a, Axis(a, in.size(), "axis"));
  }
  Shape out;
  for (int64_t d = 0; d < static_cast<int64_t>(in.size()); ++d) {
    const bool listed = std::find(axes.begin(), axes.end(), d) != axes.end();
    if (listed && in[d] != 1) {
      return InvalidArgumentError(StrCat("axis ", d, " of ", ShapeString(in), " is not 1"));
    }
    if (!(listed || (axes.empty() && in[d] == 1))) out.push_back(in[d]);
  }
  return out;
}

absl::StatusOr<Shape> OnnxBroadcastShapes(const std::vector<Shape>& shapes) {
  return Broadcast(shapes);
}

absl::StatusOr<SliceRange> NormalizeSliceRange(int64_t dim, int64_t start, int64_t end,
                                               int64_t step) {
  if (step == 0) return InvalidArgumentError("slice step is 0");
  // Negative values count from the end (INT64_MIN + dim cannot overflow).
  auto clamp = [dim](int64_t v, int64_t lo, int64_t hi) {
    return std::clamp(v < 0 ? v + dim : v, lo, hi);
  };
  SliceRange r;
  r.step = step;
  if (dim == 0) return r;
  if (step > 0) {
    r.start = clamp(start, 0, dim);
    const int64_t e = clamp(end, 0, dim);
    r.count = e > r.start ? (e - r.start + step - 1) / step : 0;
  } else {
    r.start = clamp(start, 0, dim - 1);
    const int64_t e = clamp(end, -1, dim - 1);
    r.count = r.start > e ? (r.start - e + (-step) - 1) / (-step) : 0;
  }
  return r;
}

const onnx::AttributeProto* FindOnnxAttr(const onnx::NodeProto& node, const std::string& name) {
  for (const onnx::AttributeProto& a : node.attribute()) {
    if (a.name() == name) return &a;
  }
  return nullptr;
}

int64_t OnnxIntAttr(const onnx::NodeProto& node, const std::string& name, int64_t fallback) {
  const onnx::AttributeProto* a = FindOnnxAttr(node, name);
  return a == nullptr ? fallback : a->i();
}

std::vector<int64_t> OnnxIntsAttr(const onnx::NodeProto& node, const std::string& name,
                                  std::vector<int64_t> fallback) {
  const onnx::AttributeProto* a = FindOnnxAttr(node, name);
  if (a == nullptr) return fallback;
  return std::vector<int64_t>(a->ints().begin(), a->ints().end());
}

double OnnxFloatAttr(const onnx::NodeProto& node, const std::string& name, double fallback) {
  const onnx::AttributeProto* a = FindOnnxAttr(node, name);
  return a == nullptr ? fallback : a->f();
}

std::string OnnxStringAttr(const onnx::NodeProto& node, const std::string& name,
                           std::string fallback) {
  const onnx::AttributeProto* a = FindOnnxAttr(node, name);
  return a == nullptr ? fallback : a->s();
}

std::string OnnxNodeLabel(const onnx::NodeProto& node) {
  return StrCat("node '", node.name().empty() ? node.output(0) : node.name(), "' (",
                node.op_type(), ")");
}

}  // namespace headroom::graph
