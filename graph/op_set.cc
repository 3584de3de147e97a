// Headroom's op set: the schema and shape/dtype inference of every op a graph may use.
//
// Layouts: images are NCHW; Conv2D weights are [out, in/groups, kh, kw]. Inference functions
// return InvalidArgument naming the input or attribute at fault; the graph loader prefixes
// the node's name and op.

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "graph/op_registry.h"
#include "util/status_macros.h"

namespace headroom::graph {
namespace {

using absl::InvalidArgumentError;
using absl::StrCat;

// ---- Attribute specs --------------------------------------------------------------------

AttrSpec Required(std::string name, AttrType type) {
  return AttrSpec{std::move(name), type, /*required=*/true, {}};
}

AttrSpec IntDefault(std::string name, int64_t v) {
  AttrSpec s{std::move(name), AttrType::kInt, false, {}};
  s.default_value.set_i(v);
  return s;
}

AttrSpec FloatDefault(std::string name, double v) {
  AttrSpec s{std::move(name), AttrType::kFloat, false, {}};
  s.default_value.set_f(v);
  return s;
}

AttrSpec BoolDefault(std::string name, bool v) {
  AttrSpec s{std::move(name), AttrType::kBool, false, {}};
  s.default_value.set_b(v);
  return s;
}

AttrSpec StringDefault(std::string name, std::string v) {
  AttrSpec s{std::move(name), AttrType::kString, false, {}};
  s.default_value.set_s(std::move(v));
  return s;
}

AttrSpec IntsDefault(std::string name, std::vector<int64_t> v) {
  AttrSpec s{std::move(name), AttrType::kInts, false, {}};
  s.default_value.mutable_ints();  // Set the oneof even when the list is empty.
  for (int64_t x : v) s.default_value.mutable_ints()->add_values(x);
  return s;
}

// ---- Checks shared by several ops -------------------------------------------------------

absl::Status ExpectRank(const InferenceContext& ctx, int i, int rank) {
  if (static_cast<int>(ctx.input_shapes[i].size()) != rank) {
    return InvalidArgumentError(StrCat(ctx.Input(i), " has ", ctx.input_shapes[i].size(),
                                       " dims ", ShapeString(ctx.input_shapes[i]), ", needs ",
                                       rank));
  }
  return absl::OkStatus();
}

absl::Status ExpectMinRank(const InferenceContext& ctx, int i, int rank) {
  if (static_cast<int>(ctx.input_shapes[i].size()) < rank) {
    return InvalidArgumentError(StrCat(ctx.Input(i), " has ", ctx.input_shapes[i].size(),
                                       " dims ", ShapeString(ctx.input_shapes[i]),
                                       ", needs at least ", rank));
  }
  return absl::OkStatus();
}

// Returns OK if input i's dtype passes `allowed`, else an error saying what it `needs`.
absl::Status ExpectDType(const InferenceContext& ctx, int i, bool (*allowed)(proto::DType),
                         const char* needs) {
  if (!allowed(ctx.input_dtypes[i])) {
    return InvalidArgumentError(
        StrCat(ctx.Input(i), " has dtype ", DTypeName(ctx.input_dtypes[i]), ", needs ", needs));
  }
  return absl::OkStatus();
}

absl::Status ExpectFloating(const InferenceContext& ctx, int i) {
  return ExpectDType(ctx, i, IsFloating, "a floating-point type");
}

absl::Status ExpectInteger(const InferenceContext& ctx, int i) {
  return ExpectDType(ctx, i, IsInteger, "int32 or int64 (indices)");
}

// Every input from `first` on must be floating and share input `first`'s dtype.
absl::Status ExpectSameFloating(const InferenceContext& ctx, int first = 0) {
  for (int i = first; i < static_cast<int>(ctx.input_dtypes.size()); ++i) {
    RETURN_IF_ERROR(ExpectFloating(ctx, i));
    if (ctx.input_dtypes[i] != ctx.input_dtypes[first]) {
      return InvalidArgumentError(StrCat(ctx.Input(i), " has dtype ",
                                         DTypeName(ctx.input_dtypes[i]), " but ",
                                         ctx.Input(first), " has ",
                                         DTypeName(ctx.input_dtypes[first])));
    }
  }
  return absl::OkStatus();
}

// Input i must have exactly `shape`.
absl::Status ExpectShape(const InferenceContext& ctx, int i, const Shape& shape) {
  if (ctx.input_shapes[i] != shape) {
    return InvalidArgumentError(StrCat(ctx.Input(i), " has shape ",
                                       ShapeString(ctx.input_shapes[i]), ", needs ",
                                       ShapeString(shape)));
  }
  return absl::OkStatus();
}

// Returns `axis` in [0, rank), accepting negative axes counted from the end.
absl::StatusOr<int> NormalizeAxis(int64_t axis, int rank, const std::string& what) {
  if (axis < -rank || axis >= rank) {
    return InvalidArgumentError(
        StrCat("attribute '", what, "' is ", axis, ", outside [", -rank, ", ", rank, ")"));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Checks that an int-list attribute has one of `sizes` values, each at least `min_value`.
absl::StatusOr<std::vector<int64_t>> ListAttr(const InferenceContext& ctx,
                                              const std::string& name,
                                              std::vector<size_t> sizes, int64_t min_value) {
  std::vector<int64_t> v = ctx.attrs.Ints(name);
  if (std::find(sizes.begin(), sizes.end(), v.size()) == sizes.end()) {
    return InvalidArgumentError(StrCat("attribute '", name, "' has ", v.size(),
                                       " values, needs ", absl::StrJoin(sizes, " or ")));
  }
  for (int64_t x : v) {
    if (x < min_value) {
      return InvalidArgumentError(StrCat("attribute '", name, "' is [", absl::StrJoin(v, ","),
                                         "]; every value must be at least ", min_value));
    }
  }
  return v;
}

// Returns the numpy broadcast of inputs 0 and 1.
absl::StatusOr<Shape> BroadcastShapes(const InferenceContext& ctx, int a, int b) {
  const Shape& x = ctx.input_shapes[a];
  const Shape& y = ctx.input_shapes[b];
  Shape out(std::max(x.size(), y.size()));
  for (size_t i = 0; i < out.size(); ++i) {
    const int64_t dx = i < x.size() ? x[x.size() - 1 - i] : 1;
    const int64_t dy = i < y.size() ? y[y.size() - 1 - i] : 1;
    if (dx != dy && dx != 1 && dy != 1) {
      return InvalidArgumentError(StrCat(ctx.Input(a), " ", ShapeString(x), " and ",
                                         ctx.Input(b), " ", ShapeString(y),
                                         " do not broadcast"));
    }
    out[out.size() - 1 - i] = std::max(dx, dy);
  }
  return out;
}

void SetOutput(InferenceContext& ctx, Shape shape, proto::DType dtype, int i = 0) {
  ctx.output_shapes[i] = std::move(shape);
  ctx.output_dtypes[i] = dtype;
}

// ---- Inference, one function per op family ----------------------------------------------

absl::Status InferElementwise(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  SetOutput(ctx, ctx.input_shapes[0], ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferGelu(InferenceContext& ctx) {
  const std::string& mode = ctx.attrs.String("approximate");
  if (mode != "none" && mode != "tanh") {
    return InvalidArgumentError(
        StrCat("attribute 'approximate' is '", mode, "', needs 'none' or 'tanh'"));
  }
  return InferElementwise(ctx);
}

// Returns the inference of a unary elementwise op whose float attributes `names` must be
// finite: HardSigmoid, LeakyReLU, ELU, SELU.
InferFn InferFiniteAttrs(std::vector<std::string> names) {
  return [names = std::move(names)](InferenceContext& ctx) -> absl::Status {
    for (const std::string& name : names) {
      const double v = ctx.attrs.Float(name);
      if (!std::isfinite(v)) {
        return InvalidArgumentError(
            StrCat("attribute '", name, "' is ", v, ", needs a finite value"));
      }
    }
    return InferElementwise(ctx);
  };
}

absl::Status InferDropout(InferenceContext& ctx) {
  const double rate = ctx.attrs.Float("rate");
  if (!(rate >= 0.0 && rate < 1.0)) {
    return InvalidArgumentError(StrCat("attribute 'rate' is ", rate, ", needs [0, 1)"));
  }
  return InferElementwise(ctx);
}

absl::Status InferBinary(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectSameFloating(ctx));
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, 0, 1));
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// PReLU: the slope broadcasts to x (PyTorch's per-channel slope is [C, 1, 1] beside x[N, C,
// H, W]); y has x's shape.
absl::Status InferPRelu(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectSameFloating(ctx));
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(ctx, 0, 1));
  if (out != ctx.input_shapes[0]) {
    return InvalidArgumentError(StrCat(ctx.Input(1), " ", ShapeString(ctx.input_shapes[1]),
                                       " does not broadcast to ", ctx.Input(0), " ",
                                       ShapeString(ctx.input_shapes[0])));
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferMatMul(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectSameFloating(ctx));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 2));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 1, 2));
  const Shape& a = ctx.input_shapes[0];
  const Shape& b = ctx.input_shapes[1];
  const bool ta = ctx.attrs.Bool("transpose_a");
  const bool tb = ctx.attrs.Bool("transpose_b");
  const int64_t m = ta ? a[a.size() - 1] : a[a.size() - 2];
  const int64_t ka = ta ? a[a.size() - 2] : a[a.size() - 1];
  const int64_t kb = tb ? b[b.size() - 1] : b[b.size() - 2];
  const int64_t n = tb ? b[b.size() - 2] : b[b.size() - 1];
  if (ka != kb) {
    return InvalidArgumentError(StrCat(ctx.Input(0), " ", ShapeString(a), " and ", ctx.Input(1),
                                       " ", ShapeString(b), " have inner dimensions ", ka,
                                       " and ", kb, " (transpose_a=", ta, ", transpose_b=", tb,
                                       "); they must match"));
  }
  // Batch dimensions broadcast like numpy.
  InferenceContext batch;
  batch.input_names = {ctx.input_names[0], ctx.input_names[1]};
  batch.input_shapes = {Shape(a.begin(), a.end() - 2), Shape(b.begin(), b.end() - 2)};
  ASSIGN_OR_RETURN(Shape out, BroadcastShapes(batch, 0, 1));
  out.push_back(m);
  out.push_back(n);
  if (ctx.input_shapes.size() == 3) RETURN_IF_ERROR(ExpectShape(ctx, 2, {n}));
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// Output size of a sliding window over one spatial dimension; 0 or less means empty.
int64_t WindowOutput(int64_t in, int64_t pad_begin, int64_t pad_end, int64_t kernel,
                     int64_t stride, int64_t dilation, bool ceil_mode) {
  const int64_t span = in + pad_begin + pad_end - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // PyTorch's rule: the last window must start inside the input or its leading padding.
  if (ceil_mode && (out - 1) * stride >= in + pad_begin) --out;
  return out;
}

// Returns padding as {top, left, bottom, right} from 2 (symmetric) or 4 values.
absl::StatusOr<std::vector<int64_t>> Padding4(const InferenceContext& ctx) {
  ASSIGN_OR_RETURN(std::vector<int64_t> p, ListAttr(ctx, "padding", {2, 4}, 0));
  if (p.size() == 2) p = {p[0], p[1], p[0], p[1]};
  return p;
}

absl::Status InferConv2D(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectSameFloating(ctx));
  RETURN_IF_ERROR(ExpectRank(ctx, 0, 4));
  RETURN_IF_ERROR(ExpectRank(ctx, 1, 4));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, ListAttr(ctx, "stride", {2}, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> dilation, ListAttr(ctx, "dilation", {2}, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> pad, Padding4(ctx));
  const int64_t groups = ctx.attrs.Int("groups");
  const Shape& x = ctx.input_shapes[0];
  const Shape& w = ctx.input_shapes[1];
  if (groups < 1 || x[1] % groups != 0 || w[0] % groups != 0) {
    return InvalidArgumentError(StrCat("attribute 'groups' is ", groups, "; it must be positive ",
                                       "and divide the input channels (", x[1],
                                       ") and output channels (", w[0], ")"));
  }
  if (w[1] != x[1] / groups) {
    return InvalidArgumentError(StrCat(ctx.Input(1), " has shape ", ShapeString(w),
                                       ": dim 1 must be input channels / groups = ", x[1], "/",
                                       groups, " = ", x[1] / groups, " for ", ctx.Input(0), " ",
                                       ShapeString(x)));
  }
  Shape out = {x[0], w[0], 0, 0};
  for (int d = 0; d < 2; ++d) {
    out[2 + d] = WindowOutput(x[2 + d], pad[d], pad[d + 2], w[2 + d], stride[d], dilation[d],
                              /*ceil_mode=*/false);
    if (out[2 + d] <= 0) {
      return InvalidArgumentError(StrCat("kernel ", ShapeString({w[2], w[3]}), " with dilation [",
                                         absl::StrJoin(dilation, ","), "] is larger than ",
                                         ctx.Input(0), " ", ShapeString(x), " plus padding"));
    }
  }
  if (ctx.input_shapes.size() == 3) RETURN_IF_ERROR(ExpectShape(ctx, 2, {w[0]}));
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// ConvTranspose2D: the gradient of a Conv2D with respect to its input, as a layer
// (PyTorch's nn.ConvTranspose2d, ONNX's ConvTranspose). weight [C_in, C_out/groups, kh, kw];
// each output dim is (in - 1) stride - pad_begin - pad_end + dilation (k - 1) +
// output_padding + 1.
absl::Status InferConvTranspose2D(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectSameFloating(ctx));
  RETURN_IF_ERROR(ExpectRank(ctx, 0, 4));
  RETURN_IF_ERROR(ExpectRank(ctx, 1, 4));
  ASSIGN_OR_RETURN(std::vector<int64_t> stride, ListAttr(ctx, "stride", {2}, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> dilation, ListAttr(ctx, "dilation", {2}, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> out_pad, ListAttr(ctx, "output_padding", {2}, 0));
  ASSIGN_OR_RETURN(std::vector<int64_t> pad, Padding4(ctx));
  const int64_t groups = ctx.attrs.Int("groups");
  const Shape& x = ctx.input_shapes[0];
  const Shape& w = ctx.input_shapes[1];
  if (groups < 1 || x[1] % groups != 0) {
    return InvalidArgumentError(StrCat("attribute 'groups' is ", groups,
                                       "; it must be positive and divide the input channels (",
                                       x[1], ")"));
  }
  if (w[0] != x[1]) {
    return InvalidArgumentError(StrCat(
        ctx.Input(1), " has shape ", ShapeString(w), ": dim 0 must be the input channels ", x[1],
        " of ", ctx.Input(0), " ", ShapeString(x), " (weight [C_in, C_out/groups, kh, kw])"));
  }
  for (int d = 0; d < 2; ++d) {
    // PyTorch's rule: the extra rows must be fewer than the stride or the dilation.
    if (out_pad[d] >= stride[d] && out_pad[d] >= dilation[d]) {
      return InvalidArgumentError(
          StrCat("attribute 'output_padding' [", absl::StrJoin(out_pad, ","),
                 "] must be smaller than either stride [", absl::StrJoin(stride, ","),
                 "] or dilation [", absl::StrJoin(dilation, ","), "]"));
    }
  }
  Shape out = {x[0], w[1] * groups, 0, 0};
  for (int d = 0; d < 2; ++d) {
    out[2 + d] = (x[2 + d] - 1) * stride[d] - pad[d] - pad[d + 2] + dilation[d] * (w[2 + d] - 1) +
                 out_pad[d] + 1;
    if (out[2 + d] <= 0) {
      return InvalidArgumentError(
          StrCat("padding [", absl::StrJoin(pad, ","), "] leaves no output of ", ctx.Input(0), " ",
                 ShapeString(x), " and kernel ", ShapeString({w[2], w[3]})));
    }
  }
  if (ctx.input_shapes.size() == 3) RETURN_IF_ERROR(ExpectShape(ctx, 2, {out[1]}));
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// Resize: x[N,C,H,W] to [N,C,size[0],size[1]] by nearest or bilinear interpolation, as
// PyTorch 1.13's F.interpolate. scale_h and scale_w, when positive, are F.interpolate's
// scale_factor (the coordinates then use 1 / scale, not in / out); size must then be
// floor(in * scale).
absl::Status InferResize(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  RETURN_IF_ERROR(ExpectRank(ctx, 0, 4));
  const std::string& mode = ctx.attrs.String("mode");
  if (mode != "nearest" && mode != "bilinear") {
    return InvalidArgumentError(StrCat("attribute 'mode' is '", mode,
                                       "', needs 'nearest' or 'bilinear' (no bicubic, area or "
                                       "nearest-exact)"));
  }
  if (mode == "nearest" && ctx.attrs.Bool("align_corners")) {
    return InvalidArgumentError(
        "attribute 'align_corners' is true, but mode 'nearest' has no corners to align "
        "(PyTorch refuses it too)");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> size, ListAttr(ctx, "size", {2}, 1));
  const Shape& x = ctx.input_shapes[0];
  const char* scale_names[2] = {"scale_h", "scale_w"};
  for (int d = 0; d < 2; ++d) {
    const double scale = ctx.attrs.Float(scale_names[d]);
    if (scale == 0) continue;
    if (!(std::isfinite(scale) && scale > 0)) {
      return InvalidArgumentError(StrCat("attribute '", scale_names[d], "' is ", scale,
                                         ", needs 0 (from the sizes) or a positive scale"));
    }
    const int64_t expect = static_cast<int64_t>(std::floor(x[2 + d] * scale));
    if (size[d] != expect) {
      return InvalidArgumentError(StrCat("attribute 'size' [", absl::StrJoin(size, ","),
                                         "] does not fit ", ctx.Input(0), " ", ShapeString(x),
                                         " at ", scale_names[d], " ", scale, ": dim ", 2 + d,
                                         " needs floor(", x[2 + d], " * ", scale, ") = ", expect));
    }
  }
  SetOutput(ctx, {x[0], x[1], size[0], size[1]}, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferPool(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  RETURN_IF_ERROR(ExpectRank(ctx, 0, 4));
  ASSIGN_OR_RETURN(std::vector<int64_t> kernel, ListAttr(ctx, "kernel_size", {2}, 1));
  std::vector<int64_t> stride = kernel;
  if (!ctx.attrs.Ints("stride").empty()) {
    ASSIGN_OR_RETURN(stride, ListAttr(ctx, "stride", {2}, 1));
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pad, Padding4(ctx));
  const bool ceil_mode = ctx.attrs.Bool("ceil_mode");
  const Shape& x = ctx.input_shapes[0];
  Shape out = {x[0], x[1], 0, 0};
  for (int d = 0; d < 2; ++d) {
    if (pad[d] > kernel[d] / 2 || pad[d + 2] > kernel[d] / 2) {
      return InvalidArgumentError(StrCat("attribute 'padding' [", absl::StrJoin(pad, ","),
                                         "] exceeds half of kernel_size [",
                                         absl::StrJoin(kernel, ","), "]"));
    }
    out[2 + d] = WindowOutput(x[2 + d], pad[d], pad[d + 2], kernel[d], stride[d], 1, ceil_mode);
    if (out[2 + d] <= 0) {
      return InvalidArgumentError(StrCat("kernel_size [", absl::StrJoin(kernel, ","),
                                         "] is larger than ", ctx.Input(0), " ", ShapeString(x),
                                         " plus padding"));
    }
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferGlobalAvgPool(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  RETURN_IF_ERROR(ExpectRank(ctx, 0, 4));
  const Shape& x = ctx.input_shapes[0];
  SetOutput(ctx, {x[0], x[1], 1, 1}, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// Returns InvalidArgument unless float attribute `name` is positive and finite (NaN and
// infinity compare false with 0, so `<= 0` let them through).
absl::Status ExpectPositiveFinite(const InferenceContext& ctx, const char* name) {
  const double value = ctx.attrs.Float(name);
  if (!(std::isfinite(value) && value > 0)) {
    return InvalidArgumentError(
        StrCat("attribute '", name, "' is ", value, "; it must be positive and finite"));
  }
  return absl::OkStatus();
}

// A normalisation's x may be bfloat16 with its weight, bias and running statistics float32
// (mixed precision: the statistics are accumulated in float32); otherwise every input shares
// x's floating dtype.
absl::Status ExpectNormInputs(const InferenceContext& ctx) {
  if (ctx.input_dtypes[0] != proto::DTYPE_BFLOAT16) return ExpectSameFloating(ctx);
  for (int i = 1; i < static_cast<int>(ctx.input_dtypes.size()); ++i) {
    const proto::DType d = ctx.input_dtypes[i];
    if (d != proto::DTYPE_FLOAT32 && d != proto::DTYPE_BFLOAT16) {
      return InvalidArgumentError(StrCat(ctx.Input(i), " has dtype ", DTypeName(d), " but ",
                                         ctx.Input(0),
                                         " is bfloat16: needs float32 (mixed precision) or "
                                         "bfloat16"));
    }
  }
  return ExpectSameFloating(ctx, 1);
}

absl::Status InferBatchNorm(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectNormInputs(ctx));
  const Shape& x = ctx.input_shapes[0];
  if (x.size() != 2 && x.size() != 4) {
    return InvalidArgumentError(StrCat(ctx.Input(0), " has ", x.size(), " dims ", ShapeString(x),
                                       ", needs 2 (N,C) or 4 (N,C,H,W)"));
  }
  for (int i = 1; i < 5; ++i) RETURN_IF_ERROR(ExpectShape(ctx, i, {x[1]}));
  RETURN_IF_ERROR(ExpectPositiveFinite(ctx, "epsilon"));
  const double momentum = ctx.attrs.Float("momentum");
  if (!(momentum >= 0.0 && momentum <= 1.0)) {
    return InvalidArgumentError(StrCat("attribute 'momentum' is ", momentum, ", needs [0, 1]"));
  }
  SetOutput(ctx, x, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferLayerNorm(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectNormInputs(ctx));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 1));
  const Shape& x = ctx.input_shapes[0];
  for (int i = 1; i < 3; ++i) RETURN_IF_ERROR(ExpectShape(ctx, i, {x.back()}));
  RETURN_IF_ERROR(ExpectPositiveFinite(ctx, "epsilon"));
  SetOutput(ctx, x, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// GroupNorm: x[N, C, ...] normalised over each of num_groups groups of C / num_groups
// channels (and all of the rest) per sample; weight and bias [C]. InstanceNorm is num_groups
// = C.
absl::Status InferGroupNorm(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectNormInputs(ctx));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 2));
  const Shape& x = ctx.input_shapes[0];
  for (int i = 1; i < 3; ++i) RETURN_IF_ERROR(ExpectShape(ctx, i, {x[1]}));
  RETURN_IF_ERROR(ExpectPositiveFinite(ctx, "epsilon"));
  const int64_t groups = ctx.attrs.Int("num_groups");
  if (groups <= 0 || x[1] % groups != 0) {
    return InvalidArgumentError(StrCat("attribute 'num_groups' is ", groups,
                                       "; it must divide the ", x[1], " channels of ", ctx.Input(0),
                                       " ", ShapeString(x)));
  }
  SetOutput(ctx, x, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferFlatten(InferenceContext& ctx) {
  const Shape& x = ctx.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  int64_t axis = ctx.attrs.Int("axis");
  if (axis < -rank || axis > rank) {
    return InvalidArgumentError(
        StrCat("attribute 'axis' is ", axis, ", outside [", -rank, ", ", rank, "]"));
  }
  if (axis < 0) axis += rank;
  const Shape outer(x.begin(), x.begin() + axis);
  const Shape inner(x.begin() + axis, x.end());
  SetOutput(ctx, {static_cast<int64_t>(NumElements(outer)), static_cast<int64_t>(NumElements(inner))},
            ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferReshape(InferenceContext& ctx) {
  Shape out = ctx.attrs.Ints("shape");
  const uint64_t total = NumElements(ctx.input_shapes[0]);
  int inferred = -1;
  uint64_t known = 1;
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (out[i] <= 0) {
      return InvalidArgumentError(StrCat("attribute 'shape' [", absl::StrJoin(out, ","),
                                         "] may hold one -1; every other value must be positive"));
    } else {
      known *= static_cast<uint64_t>(out[i]);
    }
  }
  if (inferred >= 0 && known != 0 && total % known == 0) {
    out[inferred] = static_cast<int64_t>(total / known);
    known = total;
  }
  if (known != total) {
    return InvalidArgumentError(StrCat("attribute 'shape' [", absl::StrJoin(ctx.attrs.Ints("shape"), ","),
                                       "] does not hold the ", total, " elements of ",
                                       ctx.Input(0), " ", ShapeString(ctx.input_shapes[0])));
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferTranspose(InferenceContext& ctx) {
  const Shape& x = ctx.input_shapes[0];
  const std::vector<int64_t> perm = ctx.attrs.Ints("perm");
  std::vector<bool> seen(x.size(), false);
  bool valid = perm.size() == x.size();
  for (int64_t p : perm) {
    valid = valid && p >= 0 && p < static_cast<int64_t>(x.size()) && !seen[p];
    if (valid) seen[p] = true;
  }
  if (!valid) {
    return InvalidArgumentError(StrCat("attribute 'perm' [", absl::StrJoin(perm, ","),
                                       "] is not a permutation of the ", x.size(), " dims of ",
                                       ctx.Input(0), " ", ShapeString(x)));
  }
  Shape out;
  for (int64_t p : perm) out.push_back(x[p]);
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// Returns how many elements start, start + step, ... take before reaching end (either sign
// of step).
int64_t SliceCount(int64_t start, int64_t end, int64_t step) {
  return step > 0 ? (end - start + step - 1) / step : (start - end - step - 1) / -step;
}

// The checked attributes of one Slice node, one entry per sliced axis.
struct SliceSpec {
  std::vector<int> axes;  // In [0, rank).
  std::vector<int64_t> starts, ends, steps;
};

// Returns Slice's attributes checked against input 0: equal lengths (steps may be empty),
// distinct axes in [-rank, rank) (negative ones normalised), nonzero steps, and 0 <= start <
// end <= dim for a positive step or -1 <= end < start < dim for a negative one (an end of -1
// runs through element 0).
absl::StatusOr<SliceSpec> CheckSlice(const InferenceContext& ctx) {
  const Shape& x = ctx.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const std::vector<int64_t> axes = ctx.attrs.Ints("axes");
  SliceSpec s;
  s.starts = ctx.attrs.Ints("starts");
  s.ends = ctx.attrs.Ints("ends");
  s.steps = ctx.attrs.Ints("steps");
  if (s.steps.empty()) s.steps.assign(axes.size(), 1);
  if (axes.empty() || s.starts.size() != axes.size() || s.ends.size() != axes.size() ||
      s.steps.size() != axes.size()) {
    return InvalidArgumentError(StrCat(
        "attributes 'axes', 'starts', 'ends', 'steps' have ", axes.size(), ", ",
        s.starts.size(), ", ", s.ends.size(), ", ", ctx.attrs.Ints("steps").size(),
        " values; needs at least one axis and one start, end (and step, or no steps) per axis"));
  }
  std::vector<bool> seen(rank, false);
  for (size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < -rank || axes[i] >= rank) {
      return InvalidArgumentError(StrCat("attribute 'axes' [", absl::StrJoin(axes, ","),
                                         "] holds ", axes[i], ", outside [", -rank, ", ", rank,
                                         ") for ", ctx.Input(0), " ", ShapeString(x)));
    }
    const int axis = static_cast<int>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[axis]) {
      return InvalidArgumentError(StrCat("attribute 'axes' [", absl::StrJoin(axes, ","),
                                         "] names axis ", axis, " twice"));
    }
    seen[axis] = true;
    s.axes.push_back(axis);
    if (s.steps[i] == 0) {
      return InvalidArgumentError(StrCat("attribute 'steps' [", absl::StrJoin(s.steps, ","),
                                         "] has 0 for axis ", axis,
                                         "; every step must be nonzero"));
    }
    if (s.steps[i] > 0 && !(0 <= s.starts[i] && s.starts[i] < s.ends[i] && s.ends[i] <= x[axis])) {
      return InvalidArgumentError(StrCat(
          "attributes 'starts', 'ends' give [", s.starts[i], ", ", s.ends[i], ") on axis ", axis,
          "; needs 0 <= start < end <= ", x[axis], " (dim ", axis, " of ", ctx.Input(0), " ",
          ShapeString(x), ")"));
    }
    if (s.steps[i] < 0 && !(-1 <= s.ends[i] && s.ends[i] < s.starts[i] && s.starts[i] < x[axis])) {
      return InvalidArgumentError(StrCat(
          "attributes 'starts', 'ends' give start ", s.starts[i], ", end ", s.ends[i],
          " with step ", s.steps[i], " on axis ", axis, "; a negative step needs -1 <= end < ",
          "start < ", x[axis], " (dim ", axis, " of ", ctx.Input(0), " ", ShapeString(x), ")"));
    }
  }
  return s;
}

absl::Status InferSlice(InferenceContext& ctx) {
  ASSIGN_OR_RETURN(const SliceSpec s, CheckSlice(ctx));
  Shape out = ctx.input_shapes[0];
  for (size_t i = 0; i < s.axes.size(); ++i) {
    out[s.axes[i]] = SliceCount(s.starts[i], s.ends[i], s.steps[i]);
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

// ReduceSum, ReduceMax, ReduceMin: over the distinct axes in [-rank, rank) (all axes when
// none are listed), each kept as size 1 when keepdims holds, else dropped.
absl::Status InferReduce(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  const Shape& x = ctx.input_shapes[0];
  const int rank = static_cast<int>(x.size());
  const std::vector<int64_t> axes = ctx.attrs.Ints("axes");
  std::vector<bool> reduced(rank, axes.empty());
  for (int64_t a : axes) {
    if (a < -rank || a >= rank) {
      return InvalidArgumentError(StrCat("attribute 'axes' [", absl::StrJoin(axes, ","), "] holds ",
                                         a, ", outside [", -rank, ", ", rank, ") for ",
                                         ctx.Input(0), " ", ShapeString(x)));
    }
    const int axis = static_cast<int>(a < 0 ? a + rank : a);
    if (reduced[axis]) {
      return InvalidArgumentError(
          StrCat("attribute 'axes' [", absl::StrJoin(axes, ","), "] names axis ", axis, " twice"));
    }
    reduced[axis] = true;
  }
  const bool keepdims = ctx.attrs.Bool("keepdims");
  Shape out;
  for (int d = 0; d < rank; ++d) {
    if (!reduced[d]) {
      out.push_back(x[d]);
    } else if (keepdims) {
      out.push_back(1);
    }
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferExpand(InferenceContext& ctx) {
  const Shape& x = ctx.input_shapes[0];
  const Shape target = ctx.attrs.Ints("shape");
  for (int64_t d : target) {
    if (d < 1) {
      return InvalidArgumentError(StrCat("attribute 'shape' [", absl::StrJoin(target, ","),
                                         "] holds ", d, "; every value must be positive"));
    }
  }
  if (target.size() < x.size()) {
    return InvalidArgumentError(StrCat("attribute 'shape' [", absl::StrJoin(target, ","),
                                       "] has ", target.size(), " dims, fewer than ",
                                       ctx.Input(0), " ", ShapeString(x)));
  }
  const size_t lead = target.size() - x.size();
  for (size_t d = 0; d < x.size(); ++d) {
    if (x[d] != 1 && x[d] != target[lead + d]) {
      return InvalidArgumentError(StrCat(ctx.Input(0), " ", ShapeString(x),
                                         " does not broadcast to attribute 'shape' [",
                                         absl::StrJoin(target, ","), "]: its dim ", d, " is ",
                                         x[d], ", needs 1 or ", target[lead + d]));
    }
  }
  SetOutput(ctx, target, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferConcat(InferenceContext& ctx) {
  const Shape& first = ctx.input_shapes[0];
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(ctx.attrs.Int("axis"), first.size(), "axis"));
  Shape out = first;
  for (size_t i = 1; i < ctx.input_shapes.size(); ++i) {
    const Shape& s = ctx.input_shapes[i];
    bool fits = s.size() == first.size() && ctx.input_dtypes[i] == ctx.input_dtypes[0];
    for (size_t d = 0; fits && d < s.size(); ++d) fits = d == axis || s[d] == first[d];
    if (!fits) {
      return InvalidArgumentError(StrCat(ctx.Input(i), " ", ShapeString(s), " ",
                                         DTypeName(ctx.input_dtypes[i]), " does not fit ",
                                         ctx.Input(0), " ", ShapeString(first), " ",
                                         DTypeName(ctx.input_dtypes[0]),
                                         ": all dims but axis ", axis, " and dtypes must match"));
    }
    out[axis] += s[axis];
  }
  SetOutput(ctx, std::move(out), ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferSplit(InferenceContext& ctx) {
  const Shape& x = ctx.input_shapes[0];
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(ctx.attrs.Int("axis"), x.size(), "axis"));
  ASSIGN_OR_RETURN(std::vector<int64_t> sizes,
                   ListAttr(ctx, "sizes", {ctx.output_shapes.size()}, 1));
  const int64_t sum = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  if (sum != x[axis]) {
    return InvalidArgumentError(StrCat("attribute 'sizes' [", absl::StrJoin(sizes, ","),
                                       "] sums to ", sum, " but ", ctx.Input(0), " ",
                                       ShapeString(x), " has ", x[axis], " along axis ", axis));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    Shape out = x;
    out[axis] = sizes[i];
    SetOutput(ctx, std::move(out), ctx.input_dtypes[0], i);
  }
  return absl::OkStatus();
}

absl::Status InferSoftmax(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  const Shape& x = ctx.input_shapes[0];
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 1));
  ASSIGN_OR_RETURN(int axis, NormalizeAxis(ctx.attrs.Int("axis"), x.size(), "axis"));
  if (ctx.attrs.Bool("causal")) {
    RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 2));
    if (axis != static_cast<int>(x.size()) - 1 || x[x.size() - 1] != x[x.size() - 2]) {
      return InvalidArgumentError(StrCat("causal softmax runs over the last axis of square ",
                                         "[..., T, T] scores; ", ctx.Input(0), " is ",
                                         ShapeString(x), " with axis ", axis));
    }
  }
  SetOutput(ctx, x, ctx.input_dtypes[0]);
  return absl::OkStatus();
}

absl::Status InferEmbedding(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectInteger(ctx, 0));
  RETURN_IF_ERROR(ExpectFloating(ctx, 1));
  RETURN_IF_ERROR(ExpectRank(ctx, 1, 2));
  Shape out = ctx.input_shapes[0];
  out.push_back(ctx.input_shapes[1][1]);
  SetOutput(ctx, std::move(out), ctx.input_dtypes[1]);
  return absl::OkStatus();
}

absl::Status InferSoftmaxCrossEntropy(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  RETURN_IF_ERROR(ExpectInteger(ctx, 1));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 2));
  const Shape& logits = ctx.input_shapes[0];
  RETURN_IF_ERROR(ExpectShape(ctx, 1, Shape(logits.begin(), logits.end() - 1)));
  // The loss is float32 whatever the logits' dtype: the softmax is computed in float32.
  SetOutput(ctx, {}, proto::DTYPE_FLOAT32);
  return absl::OkStatus();
}

// PixelSoftmaxCrossEntropy: logits[N, C, d1, ...] with the classes on axis 1 (PyTorch's
// F.cross_entropy layout), labels[N, d1, ...].
absl::Status InferPixelSoftmaxCrossEntropy(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  RETURN_IF_ERROR(ExpectInteger(ctx, 1));
  RETURN_IF_ERROR(ExpectMinRank(ctx, 0, 2));
  Shape labels = ctx.input_shapes[0];
  labels.erase(labels.begin() + 1);
  RETURN_IF_ERROR(ExpectShape(ctx, 1, labels));
  SetOutput(ctx, {}, proto::DTYPE_FLOAT32);  // As SoftmaxCrossEntropy's.
  return absl::OkStatus();
}

// Cast: one floating input to attribute `to`, a proto::DType value, float32 or bfloat16 (the
// conversions mixed precision uses); rounding to bfloat16 is to nearest even, NaN stays NaN.
absl::Status InferCast(InferenceContext& ctx) {
  RETURN_IF_ERROR(ExpectFloating(ctx, 0));
  const int64_t to = ctx.attrs.Int("to");
  if (to != proto::DTYPE_FLOAT32 && to != proto::DTYPE_BFLOAT16) {
    return InvalidArgumentError(StrCat(
        "attribute 'to' is ", to, " (",
        proto::DType_IsValid(static_cast<int>(to)) ? DTypeName(static_cast<proto::DType>(to))
                                                   : "no DType",
        "), needs ", proto::DTYPE_FLOAT32, " (float32) or ", proto::DTYPE_BFLOAT16, " (bfloat16)"));
  }
  SetOutput(ctx, ctx.input_shapes[0], static_cast<proto::DType>(to));
  return absl::OkStatus();
}

// ---- The op set ---------------------------------------------------------------------------

OpSchema Unary(std::string name, std::string doc, InferFn infer = InferElementwise,
               std::vector<AttrSpec> attrs = {}) {
  OpSchema s;
  s.name = std::move(name);
  s.input_names = {"x"};
  s.output_names = {"y"};
  s.attrs = std::move(attrs);
  s.infer = std::move(infer);
  s.doc = std::move(doc);
  return s;
}

OpSchema Op(std::string name, std::vector<std::string> inputs, int optional,
            std::vector<AttrSpec> attrs, InferFn infer, std::string doc) {
  OpSchema s;
  s.name = std::move(name);
  s.input_names = std::move(inputs);
  s.num_optional_inputs = optional;
  s.output_names = {"y"};
  s.attrs = std::move(attrs);
  s.infer = std::move(infer);
  s.doc = std::move(doc);
  return s;
}

std::vector<AttrSpec> PoolAttrs(bool average) {
  std::vector<AttrSpec> attrs = {Required("kernel_size", AttrType::kInts),
                                 IntsDefault("stride", {}), IntsDefault("padding", {0, 0}),
                                 BoolDefault("ceil_mode", false)};
  if (average) attrs.push_back(BoolDefault("count_include_pad", true));
  return attrs;
}

}  // namespace

std::vector<OpSchema> BuildOpSet() {
  std::vector<OpSchema> ops;
  ops.push_back(Op("MatMul", {"a", "b", "bias"}, 1,
                   {BoolDefault("transpose_a", false), BoolDefault("transpose_b", false)},
                   InferMatMul,
                   "a[...,M,K] x b[...,K,N] (+ bias[N]); batch dims broadcast; Linear is "
                   "MatMul(x, weight[out,in], bias, transpose_b=true)"));
  ops.push_back(Op("Conv2D", {"x", "weight", "bias"}, 1,
                   {IntsDefault("stride", {1, 1}), IntsDefault("padding", {0, 0}),
                    IntsDefault("dilation", {1, 1}), IntDefault("groups", 1)},
                   InferConv2D,
                   "x[N,C,H,W] * weight[O,C/groups,kh,kw] (+ bias[O]); padding is [h,w] or "
                   "[top,left,bottom,right]"));
  ops.push_back(Op("ConvTranspose2D", {"x", "weight", "bias"}, 1,
                   {IntsDefault("stride", {1, 1}), IntsDefault("padding", {0, 0}),
                    IntsDefault("output_padding", {0, 0}), IntsDefault("dilation", {1, 1}),
                    IntDefault("groups", 1)},
                   InferConvTranspose2D,
                   "transposed convolution (PyTorch's ConvTranspose2d): x[N,C,H,W] with "
                   "weight[C,O/groups,kh,kw] (+ bias[O]); padding is [h,w] or "
                   "[top,left,bottom,right]; output_padding adds rows at the bottom and right"));
  ops.push_back(Op("BatchNorm", {"x", "weight", "bias", "running_mean", "running_var"}, 0,
                   {FloatDefault("epsilon", 1e-5), FloatDefault("momentum", 0.1)},
                   InferBatchNorm, "normalises x[N,C(,H,W)] per channel"));
  ops.push_back(Op("LayerNorm", {"x", "weight", "bias"}, 0, {FloatDefault("epsilon", 1e-5)},
                   InferLayerNorm, "normalises over the last dimension"));
  ops.push_back(Unary("ReLU", "max(x, 0)"));
  ops.push_back(Unary("ReLU6", "min(max(x, 0), 6)"));
  ops.push_back(Unary("HardSigmoid",
                      "max(0, min(1, alpha * x + beta)); the defaults are "
                      "PyTorch's Hardsigmoid (ONNX's default alpha is 0.2)",
                      InferFiniteAttrs({"alpha", "beta"}),
                      {FloatDefault("alpha", 1.0 / 6.0), FloatDefault("beta", 0.5)}));
  ops.push_back(Unary("HardSwish", "x * min(max(x + 3, 0), 6) / 6 (PyTorch's Hardswish)"));
  ops.push_back(Unary("LeakyReLU",
                      "x > 0 ? x : alpha * x; the gradient at 0 is alpha, as "
                      "PyTorch's",
                      InferFiniteAttrs({"alpha"}), {FloatDefault("alpha", 0.01)}));
  ops.push_back(Unary("Pow",
                      "x ^ exponent, a constant (PyTorch's pow(x, scalar), with its exact "
                      "forms at 0, 1, 2, 3, -1, -2, 0.5 and -0.5)",
                      InferFiniteAttrs({"exponent"}), {FloatDefault("exponent", 1.0)}));
  ops.push_back(Unary("ELU", "x > 0 ? x : alpha * (exp(x) - 1)", InferFiniteAttrs({"alpha"}),
                      {FloatDefault("alpha", 1.0)}));
  ops.push_back(Unary("SELU",
                      "gamma * (x > 0 ? x : alpha * (exp(x) - 1)); the defaults are "
                      "PyTorch's and ONNX's constants",
                      InferFiniteAttrs({"alpha", "gamma"}),
                      {FloatDefault("alpha", 1.6732632423543772848170429916717),
                       FloatDefault("gamma", 1.0507009873554804934193349852946)}));
  ops.push_back(Unary("Softplus",
                      "log(1 + exp(x)), and x where x > 20 (PyTorch's Softplus "
                      "at beta 1, threshold 20)"));
  ops.push_back(Unary("Sqrt", "sqrt(x)"));
  ops.push_back(Unary("Erf", "the error function erf(x)"));
  ops.push_back(Unary("Mish", "x * tanh(log(1 + exp(x)))"));
  ops.push_back(Unary("Sigmoid", "1 / (1 + exp(-x))"));
  ops.push_back(Unary("Tanh", "tanh(x)"));
  ops.push_back(Unary("GELU", "x * Phi(x); approximate 'tanh' as in GPT-2", InferGelu,
                      {StringDefault("approximate", "none")}));
  ops.push_back(Unary("Dropout", "zeroes elements with probability rate, scales the rest",
                      InferDropout, {FloatDefault("rate", 0.5)}));
  ops.push_back(Op("Add", {"a", "b"}, 0, {}, InferBinary, "a + b, numpy broadcasting"));
  ops.push_back(Op("Mul", {"a", "b"}, 0, {}, InferBinary, "a * b, numpy broadcasting"));
  ops.push_back(Op("Sub", {"a", "b"}, 0, {}, InferBinary, "a - b, numpy broadcasting"));
  ops.push_back(Op("Div", {"a", "b"}, 0, {}, InferBinary, "a / b, numpy broadcasting"));
  ops.push_back(Op("PReLU", {"x", "slope"}, 0, {}, InferPRelu,
                   "x if x > 0, else slope * x; slope (a parameter) broadcasts to x"));
  ops.push_back(Unary("MaxPool", "max over windows of x[N,C,H,W]", InferPool, PoolAttrs(false)));
  ops.push_back(Unary("AvgPool", "mean over windows of x[N,C,H,W]", InferPool, PoolAttrs(true)));
  ops.push_back(Unary("Resize",
                      "x[N,C,H,W] to [N,C,size[0],size[1]], nearest (floor of out * scale) or "
                      "bilinear (align_corners as PyTorch's); scale_h/scale_w are "
                      "F.interpolate's scale_factor, 0 for in/out",
                      InferResize,
                      {Required("size", AttrType::kInts), StringDefault("mode", "nearest"),
                       BoolDefault("align_corners", false), FloatDefault("scale_h", 0.0),
                       FloatDefault("scale_w", 0.0)}));
  ops.push_back(Unary("GlobalAvgPool", "x[N,C,H,W] -> mean over H,W as [N,C,1,1]",
                      InferGlobalAvgPool));
  ops.push_back(Unary("Flatten", "[d0..dk-1, dk..] -> [prod(d0..dk-1), prod(dk..)], k = axis",
                      InferFlatten, {IntDefault("axis", 1)}));
  ops.push_back(Unary("Reshape", "to attribute shape (one -1 is inferred)", InferReshape,
                      {Required("shape", AttrType::kInts)}));
  ops.push_back(Unary("Transpose", "permutes dims: out[i] = x.dim[perm[i]]", InferTranspose,
                      {Required("perm", AttrType::kInts)}));
  ops.push_back(Unary("Slice",
                      "x[start:end:step] along each of axes (negative axes count from the "
                      "end); needs 0 <= start < end <= dim for step >= 1, -1 <= end < start < "
                      "dim for step <= -1 (end -1 runs through element 0); empty steps are 1s",
                      InferSlice,
                      {Required("axes", AttrType::kInts), Required("starts", AttrType::kInts),
                       Required("ends", AttrType::kInts), IntsDefault("steps", {})}));
  ops.push_back(Unary("Expand",
                      "numpy broadcast of x to attribute shape (the exact output shape: "
                      "every value positive, x right-aligned, each x dim 1 or equal)",
                      InferExpand, {Required("shape", AttrType::kInts)}));
  OpSchema concat = Op("Concat", {"x"}, 0, {Required("axis", AttrType::kInt)}, InferConcat,
                       "joins inputs along axis");
  concat.variadic_inputs = true;
  ops.push_back(std::move(concat));
  OpSchema split = Unary("Split", "splits x along axis into pieces of the given sizes",
                         InferSplit,
                         {Required("axis", AttrType::kInt), Required("sizes", AttrType::kInts)});
  split.variadic_outputs = true;
  ops.push_back(std::move(split));
  ops.push_back(Unary("Softmax",
                      "softmax(scale * x) along axis; causal masks j > i over [..., T, T]",
                      InferSoftmax,
                      {IntDefault("axis", -1), FloatDefault("scale", 1.0),
                       BoolDefault("causal", false)}));
  for (const auto& [name, doc] : std::vector<std::pair<const char*, const char*>>{
           {"ReduceSum", "sum of x over axes"},
           {"ReduceMax",
            "max of x over axes; the gradient is shared evenly among ties (PyTorch's amax)"},
           {"ReduceMin",
            "min of x over axes; the gradient is shared evenly among ties (PyTorch's amin)"}}) {
    ops.push_back(Unary(name,
                        StrCat(doc,
                               "; axes in [-rank, rank), distinct, empty for all; keepdims "
                               "keeps each as size 1, else drops it"),
                        InferReduce, {IntsDefault("axes", {}), BoolDefault("keepdims", true)}));
  }
  ops.push_back(Op("Embedding", {"ids", "table"}, 0, {}, InferEmbedding,
                   "rows of table[V,D] at integer ids: ids.shape + [D]"));
  ops.push_back(Op("SoftmaxCrossEntropy", {"logits", "labels"}, 0, {}, InferSoftmaxCrossEntropy,
                   "mean cross entropy of logits[...,C] against integer labels[...]: a scalar"));
  ops.push_back(Unary("Cast",
                      "x converted to dtype `to` (a DType value: 1 float32, 3 bfloat16); "
                      "to bfloat16 rounds to nearest even, NaN stays NaN",
                      InferCast, {Required("to", AttrType::kInt)}));
  ops.push_back(Op("GroupNorm", {"x", "weight", "bias"}, 0,
                   {Required("num_groups", AttrType::kInt), FloatDefault("epsilon", 1e-5)},
                   InferGroupNorm,
                   "normalises x[N,C,...] per sample over each of num_groups groups of channels, "
                   "then weight[C] * . + bias[C] (PyTorch's GroupNorm; InstanceNorm is "
                   "num_groups = C)"));
  ops.push_back(Op("PixelSoftmaxCrossEntropy", {"logits", "labels"}, 0,
                   {IntDefault("ignore_index", -100)}, InferPixelSoftmaxCrossEntropy,
                   "mean cross entropy of logits[N,C,...] over the classes on axis 1 against "
                   "integer labels[N,...], pixels labelled ignore_index left out (PyTorch's "
                   "F.cross_entropy(logits, labels, ignore_index=...)): a scalar"));
  return ops;
}

}  // namespace headroom::graph
