// The CPU backend's kernels for every op oneDNN's convolution, pooling, batch norm and
// matmul primitives do not cover: the eltwise activations through oneDNN's eltwise
// primitive (but HardSigmoid and HardSwish, loops with PyTorch's formulas), everything else
// as plain loops; plus the optimizer steps and gradient sums.
//
// Every kernel honours the aliasing of kernel_args.h: an in-place output (or input
// gradient) is written only at the element just read, or after everything that reads the
// aliased tensor. Deterministic: loops run in parallel only over independent outputs, and
// every sum runs in a fixed order, so results do not depend on the OpenMP thread count.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "executor/dropout_mask.h"
#include "executor/optimizer_math.h"
#include "executor/strided_walk.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "util/bfloat16.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

using absl::StrCat;
using graph::Shape;
using graph::ShapeString;

// Loops over fewer elements than this stay on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;
// Columns per task where a parallel loop owns a block of columns and sums over rows.
constexpr int64_t kColumnBlock = 64;

// ---- Element types: float32, or bfloat16 as its bits --------------------------------------
// The loop kernels that take bfloat16 themselves (Dropout, Add, Mul, LayerNorm, Softmax,
// Embedding, SoftmaxCrossEntropy) are templates over the element type T of their
// activations: float, or uint16_t holding bfloat16 bits. Ld widens an element to float
// (exact) and St rounds a float into one (to nearest even), so a bfloat16 call computes in
// float32 (double where the float32 kernel sums in double) and rounds each result once,
// with no float32 copy of any tensor. On float they are plain loads and stores: the float32
// kernels compute bitwise as before.
inline float Ld(const float* p, int64_t i) { return p[i]; }
inline float Ld(const uint16_t* p, int64_t i) { return BFloat16ToFloat(p[i]); }
inline void St(float* p, int64_t i, float v) { p[i] = v; }
inline void St(uint16_t* p, int64_t i, float v) { p[i] = FloatToBFloat16(v); }

// Returns the data of `t` as elements of type T (float or uint16_t).
template <typename T>
T* Elems(const TensorView& t) {
  return static_cast<T*>(t.data);
}

// Returns body(T{}) for T the element type of `dtype`: uint16_t for bfloat16, else float.
template <typename Body>
absl::Status ForElement(proto::DType dtype, Body body) {
  if (dtype == proto::DTYPE_BFLOAT16) return body(uint16_t{});
  return body(float{});
}

// ---- Names, checks and small helpers ------------------------------------------------------

// Returns "input 'x'" for input i of `op` ("input 'x[2]'" for a variadic one).
std::string InputName(const std::string& op, size_t i) {
  const graph::OpSchema* s = graph::FindOp(op);
  if (s == nullptr || s->input_names.empty()) return StrCat("input ", i);
  if (s->variadic_inputs) return StrCat("input '", s->input_names[0], "[", i, "]'");
  if (i < s->input_names.size()) return StrCat("input '", s->input_names[i], "'");
  return StrCat("input ", i);
}

// Returns "output 'y'" for output i of `op` ("output 'y[1]'" for a variadic one).
std::string OutputName(const std::string& op, size_t i) {
  const graph::OpSchema* s = graph::FindOp(op);
  if (s == nullptr || s->output_names.empty()) return StrCat("output ", i);
  if (s->variadic_outputs) return StrCat("output '", s->output_names[0], "[", i, "]'");
  if (i < s->output_names.size()) return StrCat("output '", s->output_names[i], "'");
  return StrCat("output ", i);
}

// Returns InvalidArgument unless `t` (called `what` of `op`) holds float32.
absl::Status CheckFloat(const std::string& op, const std::string& what, const TensorView& t) {
  if (t.dtype == proto::DTYPE_FLOAT32) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has dtype ", graph::DTypeName(t.dtype),
                                           "; the CPU backend computes in float32 only"));
}

// Returns InvalidArgument unless `t` holds int32 or int64 indices.
absl::Status CheckIndices(const std::string& op, const std::string& what, const TensorView& t) {
  if (t.dtype == proto::DTYPE_INT32 || t.dtype == proto::DTYPE_INT64) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has dtype ", graph::DTypeName(t.dtype),
                                           ", needs int32 or int64"));
}

// Returns Internal if a tensor the op's gradient rule promises (or a forward needs) has no
// data: the executor broke its contract.
absl::Status NeedData(const std::string& op, const std::string& what, const TensorView& t) {
  if (t.present()) return absl::OkStatus();
  return absl::InternalError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                    " has no data, but the kernel reads it"));
}

// Returns InvalidArgument unless `t` has `n` elements.
absl::Status CheckElements(const std::string& op, const std::string& what, const TensorView& t,
                           int64_t n) {
  if (t.num_elements() == n) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has ", t.num_elements(), " elements, needs ", n));
}

// Checks that every view in `views` is float32, naming them by `name(i)`.
template <typename Name>
absl::Status CheckAllFloat(const std::string& op, const std::vector<TensorView>& views, Name name) {
  for (size_t i = 0; i < views.size(); ++i) {
    absl::Status s = CheckFloat(op, name(i), views[i]);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

// Returns the row-major strides of `shape`, in elements.
std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int d = static_cast<int>(shape.size()) - 2; d >= 0; --d) s[d] = s[d + 1] * shape[d + 1];
  return s;
}

int64_t Product(const Shape& shape, size_t begin, size_t end) {
  int64_t p = 1;
  for (size_t d = begin; d < end; ++d) p *= shape[d];
  return p;
}

// Returns `axis` in [0, rank) for a possibly negative axis.
int NormalizeAxis(int64_t axis, int rank) {
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Returns element i of an int32 or int64 tensor.
int64_t IndexAt(const TensorView& t, int64_t i) {
  return t.dtype == proto::DTYPE_INT32 ? t.i32()[i] : t.i64()[i];
}

// Sets every element of `t` (float32, or bfloat16: `value` rounded) to `value`.
void Fill(const TensorView& t, float value) {
  const int64_t n = t.num_elements();
  ForElement(t.dtype, [&](auto e) {
    using T = decltype(e);
    T* p = Elems<T>(t);
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) St(p, i, value);
    return absl::OkStatus();
  }).IgnoreError();
}

// Copies `src` to `dst` unless they are the same bytes (a view).
void CopyUnlessSame(const TensorView& dst, const TensorView& src) {
  if (dst.data != src.data) std::memcpy(dst.data, src.data, src.bytes());
}

// ---- Eltwise activations through oneDNN ---------------------------------------------------

struct EltwiseSpec {
  dnnl::algorithm algorithm;
  float alpha = 0;
  float beta = 0;
  // The backward reads y (the *_use_dst_for_bwd algorithms), not x.
  bool from_output = true;
};

absl::Status GetEltwiseSpec(const std::string& op, const graph::Attrs* attrs, EltwiseSpec* spec) {
  using A = dnnl::algorithm;
  if (op == "ReLU") {
    *spec = {A::eltwise_relu_use_dst_for_bwd, 0.f, 0.f, true};
  } else if (op == "ReLU6") {
    *spec = {A::eltwise_clip_v2_use_dst_for_bwd, 0.f, 6.f, true};
  } else if (op == "Sigmoid") {
    *spec = {A::eltwise_logistic_use_dst_for_bwd, 0.f, 0.f, true};
  } else if (op == "Tanh") {
    *spec = {A::eltwise_tanh_use_dst_for_bwd, 0.f, 0.f, true};
  } else if (op == "GELU") {
    const std::string& mode = attrs->String("approximate");
    if (mode != "none" && mode != "tanh") {
      return absl::InvalidArgumentError(
          StrCat("op 'GELU': attribute 'approximate' is '", mode, "', needs 'none' or 'tanh'"));
    }
    *spec = {mode == "none" ? A::eltwise_gelu_erf : A::eltwise_gelu_tanh, 0.f, 0.f, false};
  } else {
    return absl::InternalError(StrCat("op '", op, "' is not an eltwise op"));
  }
  return absl::OkStatus();
}

// The forward and backward primitives of one eltwise op over a flat [n] float32 or bfloat16
// tensor (bfloat16 computed in float32 inside oneDNN, rounded once), run with user
// scratchpads (in the node's scratch), each compiled on its first run.
struct EltwisePrimitives {
  EltwisePrimitives(const dnnl::engine& engine, const EltwiseSpec& spec, int64_t n,
                    proto::DType dtype)
      : md({n},
           dtype == proto::DTYPE_BFLOAT16 ? dnnl::memory::data_type::bf16
                                          : dnnl::memory::data_type::f32,
           dnnl::memory::format_tag::a),
        forward_pd(dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, spec.algorithm,
                                               md, spec.alpha, spec.beta),
                   UserScratchpad(), engine),
        backward_pd(dnnl::eltwise_backward::desc(spec.algorithm, md, md, spec.alpha, spec.beta),
                    UserScratchpad(), engine, forward_pd) {}

  dnnl::memory::desc md;
  dnnl::eltwise_forward::primitive_desc forward_pd;
  dnnl::eltwise_backward::primitive_desc backward_pd;
  std::optional<dnnl::eltwise_forward> forward;
  std::optional<dnnl::eltwise_backward> backward;
};

EltwisePrimitives& GetEltwise(CpuContext& ctx, const std::string& op, const EltwiseSpec& spec,
                              int64_t n, proto::DType dtype) {
  const std::string key = StrCat("eltwise:", op, ":", static_cast<int>(spec.algorithm), ":", n,
                                 dtype == proto::DTYPE_BFLOAT16 ? ":bf16" : "");
  return ctx.Cached<EltwisePrimitives>(
      key, [&] { return std::make_shared<EltwisePrimitives>(ctx.engine, spec, n, dtype); });
}

// Returns the dtype an eltwise call computes in: bfloat16 when `t` (x, or dx) is, else
// float32.
proto::DType EltwiseDType(const TensorView& t) {
  return t.dtype == proto::DTYPE_BFLOAT16 ? proto::DTYPE_BFLOAT16 : proto::DTYPE_FLOAT32;
}

// Returns InvalidArgument unless `t` has dtype `dtype`: float32 (CheckFloat), or bfloat16
// for a call on bfloat16 tensors (all of its tensors then bfloat16).
absl::Status CheckFloatOf(const std::string& op, const std::string& what, const TensorView& t,
                          proto::DType dtype) {
  if (dtype != proto::DTYPE_BFLOAT16) return CheckFloat(op, what, t);
  if (t.dtype == dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has dtype ", graph::DTypeName(t.dtype),
                                           ", needs bfloat16 as the other tensors"));
}

// Runs `prim` (built from `pd` on its first run) with `args` and its scratchpad, taken from
// `scratch` (`scratch_bytes` planned) or the context.
template <typename Prim, typename Pd>
absl::Status RunWithScratchpad(CpuContext& ctx, std::optional<Prim>& prim, const Pd& pd,
                               void* scratch, uint64_t scratch_bytes,
                               std::unordered_map<int, dnnl::memory> args) {
  const dnnl::memory::desc scratchpad = pd.scratchpad_desc();
  if (scratchpad.get_size() > 0) {
    ASSIGN_OR_RETURN(char* base, ctx.Scratch(scratch, scratch_bytes, scratchpad.get_size()));
    args[DNNL_ARG_SCRATCHPAD] = dnnl::memory(scratchpad, ctx.engine, base);
  }
  if (!prim.has_value()) prim.emplace(pd);
  prim->execute(ctx.stream, args);
  ctx.stream.wait();
  return absl::OkStatus();
}

// Checks a unary elementwise forward: x and y float32 (or, `dtype` bfloat16, bfloat16), y
// of x's size.
absl::Status CheckUnaryForward(const ForwardArgs& args, proto::DType dtype = proto::DTYPE_FLOAT32) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckFloatOf(args.op, "input 'x'", x, dtype));
  RETURN_IF_ERROR(CheckFloatOf(args.op, "output 'y'", y, dtype));
  return CheckElements(args.op, "output 'y'", y, x.num_elements());
}

// Returns true when a unary backward is done before computing anything: no gradient of x is
// wanted, or no gradient of y flows (then dx is zeroed).
absl::StatusOr<bool> UnaryBackwardIsTrivial(const BackwardArgs& args,
                                            proto::DType dtype = proto::DTYPE_FLOAT32) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return true;
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of input 'x'", dx, dtype));
  if (args.output_grads[0].present()) return false;
  std::memset(dx.data, 0, dx.bytes());  // 0.0 in float32 and bfloat16 alike.
  return true;
}

// Checks a unary elementwise backward whose derivative reads y (`from_output`) or x, and
// returns that tensor: it and dy must be float32 (or, `dtype` bfloat16, bfloat16) of dx's
// size.
absl::StatusOr<const TensorView*> UnaryBackwardData(const BackwardArgs& args, bool from_output,
                                                    proto::DType dtype = proto::DTYPE_FLOAT32) {
  const int64_t n = args.input_grads[0].num_elements();
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, dtype));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of output 'y'", dy, n));
  const TensorView& data = from_output ? args.outputs[0] : args.inputs[0];
  const char* data_name = from_output ? "output 'y'" : "input 'x'";
  RETURN_IF_ERROR(NeedData(args.op, data_name, data));
  RETURN_IF_ERROR(CheckFloatOf(args.op, data_name, data, dtype));
  RETURN_IF_ERROR(CheckElements(args.op, data_name, data, n));
  return &data;
}

absl::StatusOr<uint64_t> EltwiseForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  const proto::DType dtype = EltwiseDType(args.inputs[0]);
  RETURN_IF_ERROR(CheckUnaryForward(args, dtype));
  EltwiseSpec spec;
  RETURN_IF_ERROR(GetEltwiseSpec(args.op, args.attrs, &spec));
  return GetEltwise(ctx, args.op, spec, args.inputs[0].num_elements(), dtype)
      .forward_pd.scratchpad_desc()
      .get_size();
}

absl::Status EltwiseForward(CpuContext& ctx, const ForwardArgs& args) {
  const proto::DType dtype = EltwiseDType(args.inputs[0]);
  RETURN_IF_ERROR(CheckUnaryForward(args, dtype));
  EltwiseSpec spec;
  RETURN_IF_ERROR(GetEltwiseSpec(args.op, args.attrs, &spec));
  const int64_t n = args.inputs[0].num_elements();
  EltwisePrimitives& p = GetEltwise(ctx, args.op, spec, n, dtype);
  dnnl::memory src(p.md, ctx.engine, args.inputs[0].data);
  dnnl::memory dst(p.md, ctx.engine, args.outputs[0].data);
  return RunWithScratchpad(ctx, p.forward, p.forward_pd, args.scratch, args.scratch_bytes,
                           {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
}

absl::StatusOr<uint64_t> EltwiseBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present() || !args.output_grads[0].present()) return 0;
  EltwiseSpec spec;
  RETURN_IF_ERROR(GetEltwiseSpec(args.op, args.attrs, &spec));
  return GetEltwise(ctx, args.op, spec, dx.num_elements(), EltwiseDType(dx))
      .backward_pd.scratchpad_desc()
      .get_size();
}

absl::Status EltwiseBackward(CpuContext& ctx, const BackwardArgs& args) {
  const proto::DType dtype = EltwiseDType(args.input_grads[0]);
  ASSIGN_OR_RETURN(const bool trivial, UnaryBackwardIsTrivial(args, dtype));
  if (trivial) return absl::OkStatus();
  EltwiseSpec spec;
  RETURN_IF_ERROR(GetEltwiseSpec(args.op, args.attrs, &spec));
  ASSIGN_OR_RETURN(const TensorView* data, UnaryBackwardData(args, spec.from_output, dtype));
  const TensorView& dx = args.input_grads[0];
  EltwisePrimitives& p = GetEltwise(ctx, args.op, spec, dx.num_elements(), dtype);
  dnnl::memory data_mem(p.md, ctx.engine, data->data);
  dnnl::memory diff_dst(p.md, ctx.engine, args.output_grads[0].data);
  dnnl::memory diff_src(p.md, ctx.engine, dx.data);
  RETURN_IF_ERROR(RunWithScratchpad(ctx, p.backward, p.backward_pd, args.scratch,
                                    args.scratch_bytes,
                                    {{spec.from_output ? DNNL_ARG_DST : DNNL_ARG_SRC, data_mem},
                                     {DNNL_ARG_DIFF_DST, diff_dst},
                                     {DNNL_ARG_DIFF_SRC, diff_src}}));
  return absl::OkStatus();
}

// ---- Hard activations as loops --------------------------------------------------------------
// oneDNN 2.6 has no hardsigmoid, and its hardswish rounds differently from PyTorch's
// formula, so these are PyTorch's CPU formulas, operation for operation.

// max(0, min(1, alpha x + beta)); with alpha 1/6 and beta 1/2, PyTorch's hardsigmoid up to
// rounding. The backward reads y: dy * alpha where 0 < y < 1, else 0.
struct HardSigmoidFn {
  static constexpr bool kFromOutput = true;
  explicit HardSigmoidFn(const graph::Attrs& attrs)
      : alpha(static_cast<float>(attrs.Float("alpha"))),
        beta(static_cast<float>(attrs.Float("beta"))) {}
  float Forward(float x) const { return std::min(std::max(alpha * x + beta, 0.f), 1.f); }
  float Backward(float dy, float y) const { return y > 0.f && y < 1.f ? dy * alpha : 0.f; }
  float alpha, beta;
};

// PyTorch's hardswish and hardswish_backward; the backward reads x.
struct HardSwishFn {
  static constexpr bool kFromOutput = false;
  explicit HardSwishFn(const graph::Attrs&) {}
  float Forward(float x) const { return x * std::min(std::max(x + 3.f, 0.f), 6.f) / 6.f; }
  float Backward(float dy, float x) const {
    return x < -3.f ? 0.f : x <= 3.f ? dy * (x / 3.f + 0.5f) : dy;
  }
};

// ---- Activations from ONNX as loops -------------------------------------------------------
// PyTorch 1.13's CPU float formulas (aten's leaky_relu, elu, softplus, sqrt, erf, mish and
// their backwards), so that values and the gradients at kinks match it.

// aten's leaky_relu and leaky_relu_backward: the backward reads x, and at x == 0 is alpha dy.
// PyTorch 1.13's pow(x, scalar) on the CPU: exponent 0 fills 1, 1 copies, 0.5, -0.5 and -1
// are sqrt, 1 / sqrt and 1 / x, 2, 3 and -2 are products; others std::pow in float.
inline float TorchPow(float x, double c) {
  if (c == 0) return 1.f;
  if (c == 1) return x;
  if (c == 0.5) return std::sqrt(x);
  if (c == -0.5) return 1.f / std::sqrt(x);
  if (c == -1) return 1.f / x;
  if (c == 2) return x * x;
  if (c == 3) return x * x * x;
  if (c == -2) return 1.f / (x * x);
  return std::pow(x, static_cast<float>(c));
}

// y = x ^ c; dx = dy * (c * x ^ (c - 1)) (0 for c = 0), as PyTorch's pow_backward.
struct PowFn {
  static constexpr bool kFromOutput = false;
  explicit PowFn(const graph::Attrs& attrs) : c(attrs.Float("exponent")) {}
  float Forward(float x) const { return TorchPow(x, c); }
  float Backward(float dy, float x) const {
    return c == 0 ? 0.f : dy * (static_cast<float>(c) * TorchPow(x, c - 1));
  }
  double c;
};

struct LeakyReluFn {
  static constexpr bool kFromOutput = false;
  explicit LeakyReluFn(const graph::Attrs& attrs)
      : alpha(static_cast<float>(attrs.Float("alpha"))) {}
  float Forward(float x) const { return x > 0.f ? x : x * alpha; }
  float Backward(float dy, float x) const { return x > 0.f ? dy : dy * alpha; }
  float alpha;
};

// aten's elu and elu_backward (is_result false): scale (x > 0) or scale alpha (exp(x) - 1);
// ELU is scale 1, SELU scale gamma. The backward reads x, and at x == 0 is scale alpha dy.
struct EluFn {
  static constexpr bool kFromOutput = false;
  explicit EluFn(const graph::Attrs& attrs)
      : alpha(static_cast<float>(attrs.Float("alpha"))),
        scale(attrs.values().count("gamma") ? static_cast<float>(attrs.Float("gamma")) : 1.f),
        neg(alpha * scale) {}
  float Forward(float x) const { return x <= 0.f ? (std::exp(x) - 1.f) * neg : x * scale; }
  float Backward(float dy, float x) const { return x <= 0.f ? dy * neg * std::exp(x) : dy * scale; }
  float alpha, scale, neg;
};

// aten's softplus and softplus_backward at beta 1, threshold 20; the backward reads x.
struct SoftplusFn {
  static constexpr bool kFromOutput = false;
  explicit SoftplusFn(const graph::Attrs&) {}
  float Forward(float x) const { return x > 20.f ? x : std::log1p(std::exp(x)); }
  float Backward(float dy, float x) const {
    const float z = std::exp(x);
    return x > 20.f ? dy : dy * z / (z + 1.f);
  }
};

// sqrt; the backward reads y: dy / (2 y), infinite at 0 as PyTorch's.
struct SqrtFn {
  static constexpr bool kFromOutput = true;
  explicit SqrtFn(const graph::Attrs&) {}
  float Forward(float x) const { return std::sqrt(x); }
  float Backward(float dy, float y) const { return dy / (2.f * y); }
};

// erf; the backward reads x: 2 / sqrt(pi) exp(-x^2) dy.
struct ErfFn {
  static constexpr bool kFromOutput = false;
  explicit ErfFn(const graph::Attrs&) {}
  float Forward(float x) const { return std::erf(x); }
  float Backward(float dy, float x) const { return 1.1283791670955126f * std::exp(-(x * x)) * dy; }
};

// aten's mish and mish_backward; the backward reads x.
struct MishFn {
  static constexpr bool kFromOutput = false;
  explicit MishFn(const graph::Attrs&) {}
  float Forward(float x) const { return x * std::tanh(std::log1p(std::exp(x))); }
  float Backward(float dy, float x) const {
    const float sigmoid = 1.f / (1.f + std::exp(-x));
    const float tanh_softplus = std::tanh(std::log1p(std::exp(x)));
    return dy * (tanh_softplus + x * sigmoid * (1.f - tanh_softplus * tanh_softplus));
  }
};

// y = Fn.Forward(x) elementwise; y may be x.
template <typename Fn>
absl::Status PointwiseForward(CpuContext&, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckUnaryForward(args));
  const Fn fn(*args.attrs);
  const float* x = args.inputs[0].f32();
  float* y = args.outputs[0].f32();
  const int64_t n = args.inputs[0].num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) y[i] = fn.Forward(x[i]);
  return absl::OkStatus();
}

// dx = Fn.Backward(dy, y or x) elementwise; dx may be dy.
template <typename Fn>
absl::Status PointwiseBackward(CpuContext&, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const bool trivial, UnaryBackwardIsTrivial(args));
  if (trivial) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TensorView* data, UnaryBackwardData(args, Fn::kFromOutput));
  const Fn fn(*args.attrs);
  const float* v = data->f32();
  const float* dy = args.output_grads[0].f32();
  float* dx = args.input_grads[0].f32();
  const int64_t n = args.input_grads[0].num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) dx[i] = fn.Backward(dy[i], v[i]);
  return absl::OkStatus();
}

// ---- Dropout ------------------------------------------------------------------------------

absl::Status DropoutForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckUnaryForward(args, EltwiseDType(x)));
  const double rate = args.attrs->Float("rate");
  if (!(rate >= 0.0 && rate < 1.0)) {
    return absl::InvalidArgumentError(
        StrCat("op 'Dropout': attribute 'rate' is ", rate, ", needs [0, 1)"));
  }
  if (!args.training) {
    CopyUnlessSame(y, x);
    return absl::OkStatus();
  }
  if (args.saved.size() != 1 || !args.saved[0].present()) {
    return absl::InternalError("op 'Dropout': a training forward needs the mask in saved[0]");
  }
  const TensorView& mask = args.saved[0];
  RETURN_IF_ERROR(CheckElements(args.op, "saved mask", mask, x.num_elements()));
  if (graph::DTypeSize(mask.dtype) != 1) {
    return absl::InvalidArgumentError(StrCat("op 'Dropout': saved mask has dtype ",
                                             graph::DTypeName(mask.dtype), ", needs bool"));
  }
  // The mask of executor/dropout_mask.h, which the CUDA backend draws too.
  const uint64_t stream = DropoutStream(args.seed);
  const uint64_t threshold = DropoutKeepThreshold(rate);
  const float scale = DropoutScale(rate);
  uint8_t* keep = mask.u8();
  const int64_t n = x.num_elements();
  return ForElement(x.dtype, [&](auto e) {
    using T = decltype(e);
    const T* in = Elems<const T>(x);
    T* out = Elems<T>(y);
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) {
      const bool k = DropoutKeeps(stream, i, threshold);
      keep[i] = k ? 1 : 0;
      St(out, i, k ? Ld(in, i) * scale : 0.f);
    }
    return absl::OkStatus();
  });
}

absl::Status DropoutBackward(CpuContext&, const BackwardArgs& args) {
  const proto::DType dtype = EltwiseDType(args.input_grads[0]);
  ASSIGN_OR_RETURN(const bool trivial, UnaryBackwardIsTrivial(args, dtype));
  if (trivial) return absl::OkStatus();
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  if (args.saved.size() != 1) {
    return absl::InternalError("op 'Dropout': the backward needs the mask in saved[0]");
  }
  const TensorView& mask = args.saved[0];
  RETURN_IF_ERROR(NeedData(args.op, "saved mask", mask));
  RETURN_IF_ERROR(CheckElements(args.op, "saved mask", mask, dx.num_elements()));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of output 'y'", dy, dx.num_elements()));
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, dtype));
  const float scale = DropoutScale(args.attrs->Float("rate"));
  const uint8_t* keep = mask.u8();
  const int64_t n = dx.num_elements();
  return ForElement(dtype, [&](auto e) {
    using T = decltype(e);
    const T* g = Elems<const T>(dy);
    T* out = Elems<T>(dx);
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) St(out, i, keep[i] ? Ld(g, i) * scale : 0.f);
    return absl::OkStatus();
  });
}

// ---- Add and Mul with numpy broadcasting --------------------------------------------------

// Returns the strides of `in` (aligned to the right of `out`) in elements, 0 along the dims
// it is broadcast over.
std::vector<int64_t> BroadcastStrides(const Shape& in, const Shape& out) {
  std::vector<int64_t> s(out.size(), 0);
  const std::vector<int64_t> own = Strides(in);
  const size_t lead = out.size() - in.size();
  for (size_t d = 0; d < in.size(); ++d) s[lead + d] = in[d] == 1 ? 0 : own[d];
  return s;
}

// y[i] = f(a[i'], b[i'']) over the broadcast shape `out`, in float (each of a, b and y
// float or bfloat16 bits). y may alias a or b where that has out's size (then its index is
// i: each element is read just before it is written).
template <typename TA, typename TB, typename TY, typename F>
void BroadcastBinary(const Shape& out, const TA* a, const Shape& a_shape, const TB* b,
                     const Shape& b_shape, TY* y, F f) {
  const int64_t n = static_cast<int64_t>(graph::NumElements(out));
  if (a_shape == out && b_shape == out) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t i = 0; i < n; ++i) St(y, i, f(Ld(a, i), Ld(b, i)));
    return;
  }
  if (out.empty()) {
    St(y, 0, f(Ld(a, 0), Ld(b, 0)));
    return;
  }
  const std::vector<int64_t> sa = BroadcastStrides(a_shape, out);
  const std::vector<int64_t> sb = BroadcastStrides(b_shape, out);
  const int rank = static_cast<int>(out.size());
  const int64_t inner = out[rank - 1];
  const int64_t rows = n / inner;
  const int64_t ia = sa[rank - 1];
  const int64_t ib = sb[rank - 1];
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, oa = 0, ob = 0;
    for (int d = rank - 2; d >= 0; --d) {
      const int64_t idx = rem % out[d];
      rem /= out[d];
      oa += idx * sa[d];
      ob += idx * sb[d];
    }
    TY* yr = y + r * inner;
    for (int64_t k = 0; k < inner; ++k) St(yr, k, f(Ld(a, oa + k * ia), Ld(b, ob + k * ib)));
  }
}

// dst (shape `target`, broadcast to `out`) = src (shape `out`) summed over the broadcast
// dims, each element in a fixed order (double accumulation; each of src and dst float or
// bfloat16 bits). dst may equal src only when the shapes hold the same number of elements
// (then nothing is summed).
template <typename TS, typename TD>
void ReduceToShape(const TS* src, const Shape& out, TD* dst, const Shape& target) {
  const int64_t n = static_cast<int64_t>(graph::NumElements(out));
  const int64_t tn = static_cast<int64_t>(graph::NumElements(target));
  if (tn == n) {
    if constexpr (std::is_same_v<TS, TD>) {
      if (dst != src) std::memcpy(dst, src, n * sizeof(TS));
    } else {
      for (int64_t i = 0; i < n; ++i) St(dst, i, Ld(src, i));
    }
    return;
  }
  const int rank = static_cast<int>(out.size());
  Shape t(rank, 1);
  std::copy(target.begin(), target.end(), t.begin() + (rank - target.size()));
  const std::vector<int64_t> os = Strides(out);
  std::vector<int64_t> red_sizes, red_strides;
  for (int d = 0; d < rank; ++d) {
    if (t[d] == 1 && out[d] != 1) {
      red_sizes.push_back(out[d]);
      red_strides.push_back(os[d]);
    }
  }
  const int nred = static_cast<int>(red_sizes.size());
  const int64_t count = n / tn;
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t j = 0; j < tn; ++j) {
    int64_t rem = j, base = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t idx = rem % t[d];
      rem /= t[d];
      base += idx * os[d];
    }
    double sum = 0;
    for (int64_t q = 0; q < count; ++q) {
      int64_t qr = q, off = base;
      for (int e = nred - 1; e >= 0; --e) {
        off += (qr % red_sizes[e]) * red_strides[e];
        qr /= red_sizes[e];
      }
      sum += Ld(src, off);
    }
    St(dst, j, static_cast<float>(sum));
  }
}

// Checks a broadcasting binary op: a, b and y float32, or all three bfloat16 (Add and Mul).
absl::Status CheckBinary(const std::string& op, const std::vector<TensorView>& inputs,
                         const TensorView& y) {
  const proto::DType dtype = EltwiseDType(y);
  RETURN_IF_ERROR(CheckFloatOf(op, "input 'a'", inputs[0], dtype));
  RETURN_IF_ERROR(CheckFloatOf(op, "input 'b'", inputs[1], dtype));
  RETURN_IF_ERROR(CheckFloatOf(op, "output 'y'", y, dtype));
  const Shape& out = y.shape;
  for (int i = 0; i < 2; ++i) {
    const Shape& s = inputs[i].shape;
    bool fits = s.size() <= out.size();
    for (size_t d = 0; fits && d < s.size(); ++d) {
      const int64_t od = out[out.size() - s.size() + d];
      fits = s[d] == od || s[d] == 1;
    }
    if (!fits) {
      return absl::InvalidArgumentError(StrCat("op '", op, "': ", InputName(op, i), " ",
                                               ShapeString(s), " does not broadcast to output ",
                                               ShapeString(out)));
    }
  }
  return absl::OkStatus();
}

// y = f(a, b) elementwise with broadcasting: the forward of Add and Mul.
template <typename F>
absl::Status BinaryForward(const ForwardArgs& args, F f) {
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckBinary(args.op, args.inputs, y));
  return ForElement(y.dtype, [&](auto e) {
    using T = decltype(e);
    BroadcastBinary(y.shape, Elems<const T>(a), a.shape, Elems<const T>(b), b.shape, Elems<T>(y),
                    f);
    return absl::OkStatus();
  });
}

absl::Status AddForward(CpuContext&, const ForwardArgs& args) {
  return BinaryForward(args, [](float u, float v) { return u + v; });
}

absl::Status MulForward(CpuContext&, const ForwardArgs& args) {
  return BinaryForward(args, [](float u, float v) { return u * v; });
}

absl::Status SubForward(CpuContext&, const ForwardArgs& args) {
  return BinaryForward(args, [](float u, float v) { return u - v; });
}

absl::Status DivForward(CpuContext&, const ForwardArgs& args) {
  return BinaryForward(args, [](float u, float v) { return u / v; });
}

// Returns the order in which to write the two input gradients: the one that overwrites dy
// (if any) last, so the other still reads dy intact.
std::vector<int> BinaryGradOrder(const BackwardArgs& args) {
  if (args.input_grads[0].data == args.output_grads[0].data) return {1, 0};
  return {0, 1};
}

absl::Status AddBackward(CpuContext&, const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckBinary(args.op, args.inputs, args.outputs[0]));
  const TensorView& dy = args.output_grads[0];
  for (int i : BinaryGradOrder(args)) {
    const TensorView& d = args.input_grads[i];
    if (!d.present()) continue;
    RETURN_IF_ERROR(CheckElements(args.op, StrCat("gradient of ", InputName(args.op, i)), d,
                                  args.inputs[i].num_elements()));
    if (!dy.present()) {
      Fill(d, 0.f);
      continue;
    }
    RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, d.dtype));
    RETURN_IF_ERROR(ForElement(d.dtype, [&](auto e) {
      using T = decltype(e);
      ReduceToShape(Elems<const T>(dy), dy.shape, Elems<T>(d), args.inputs[i].shape);
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// A gradient of an input broadcast in the product (fewer elements than dy) is dy times the
// other input, summed down: that product is staged in the scratch, one at a time, in dy's
// dtype (bfloat16 products rounded once before the float sum, as PyTorch's bf16 mul does).
absl::StatusOr<uint64_t> MulBackwardScratch(CpuContext&, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) return 0;
  for (int i = 0; i < 2; ++i) {
    const TensorView& d = args.input_grads[i];
    if (d.present() && args.inputs[i].num_elements() != dy.num_elements()) return dy.bytes();
  }
  return 0;
}

absl::Status MulBackward(CpuContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckBinary(args.op, args.inputs, args.outputs[0]));
  const TensorView& dy = args.output_grads[0];
  const Shape& out = args.outputs[0].shape;
  for (int i : BinaryGradOrder(args)) {
    const TensorView& d = args.input_grads[i];
    if (!d.present()) continue;
    const TensorView& other = args.inputs[1 - i];
    RETURN_IF_ERROR(CheckElements(args.op, StrCat("gradient of ", InputName(args.op, i)), d,
                                  args.inputs[i].num_elements()));
    if (!dy.present()) {
      Fill(d, 0.f);
      continue;
    }
    RETURN_IF_ERROR(NeedData(args.op, InputName(args.op, 1 - i), other));
    RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, d.dtype));
    RETURN_IF_ERROR(ForElement(d.dtype, [&](auto e) -> absl::Status {
      using T = decltype(e);
      auto mul = [](float g, float v) { return g * v; };
      if (d.num_elements() == dy.num_elements()) {
        // Elementwise, each dy read just before the same element of d is written.
        BroadcastBinary(out, Elems<const T>(dy), out, Elems<const T>(other), other.shape,
                        Elems<T>(d), mul);
      } else {
        ASSIGN_OR_RETURN(char* scratch, ctx.Scratch(args.scratch, args.scratch_bytes, dy.bytes()));
        T* product = reinterpret_cast<T*>(scratch);
        BroadcastBinary(out, Elems<const T>(dy), out, Elems<const T>(other), other.shape, product,
                        mul);
        ReduceToShape(product, out, Elems<T>(d), args.inputs[i].shape);
      }
      return absl::OkStatus();
    }));
  }
  return absl::OkStatus();
}

// da = dy and db = -dy, each summed over its broadcast dims (negating the sum is exact, so
// this equals PyTorch's sum of -dy).
absl::Status SubBackward(CpuContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(AddBackward(ctx, args));
  const TensorView& db = args.input_grads[1];
  if (db.present() && args.output_grads[0].present()) {
    float* d = db.f32();
    const int64_t n = db.num_elements();
    for (int64_t i = 0; i < n; ++i) d[i] = -d[i];
  }
  return absl::OkStatus();
}

// Div's gradients go through the scratch (a dy-sized product) where an input is broadcast,
// and the divisor's always: its product reads a, b and dy before the gradient is written.
absl::StatusOr<uint64_t> DivBackwardScratch(CpuContext&, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) return 0;
  if (args.input_grads[1].present()) return dy.bytes();
  const TensorView& da = args.input_grads[0];
  return da.present() && da.num_elements() != dy.num_elements() ? dy.bytes() : 0;
}

// da = dy / b and db = -dy * ((a / b) / b), each summed over its broadcast dims: PyTorch
// 1.13's div_tensor_self_backward and div_tensor_other_backward, in its order of rounding.
absl::Status DivBackward(CpuContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckBinary(args.op, args.inputs, args.outputs[0]));
  const TensorView& dy = args.output_grads[0];
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const Shape& out = args.outputs[0].shape;
  auto div = [](float u, float v) { return u / v; };
  for (int i : BinaryGradOrder(args)) {
    const TensorView& d = args.input_grads[i];
    if (!d.present()) continue;
    RETURN_IF_ERROR(CheckElements(args.op, StrCat("gradient of ", InputName(args.op, i)), d,
                                  args.inputs[i].num_elements()));
    if (!dy.present()) {
      Fill(d, 0.f);
      continue;
    }
    RETURN_IF_ERROR(NeedData(args.op, InputName(args.op, 1), b));
    if (i == 0 && d.num_elements() == dy.num_elements()) {
      BroadcastBinary(out, dy.f32(), out, b.f32(), b.shape, d.f32(), div);
      continue;
    }
    ASSIGN_OR_RETURN(char* scratch, ctx.Scratch(args.scratch, args.scratch_bytes, dy.bytes()));
    float* t = reinterpret_cast<float*>(scratch);
    if (i == 0) {
      BroadcastBinary(out, dy.f32(), out, b.f32(), b.shape, t, div);
    } else {
      RETURN_IF_ERROR(NeedData(args.op, InputName(args.op, 0), a));
      BroadcastBinary(out, a.f32(), a.shape, b.f32(), b.shape, t, div);
      BroadcastBinary(out, t, out, b.f32(), b.shape, t, div);
      BroadcastBinary(out, dy.f32(), out, t, out, t, [](float g, float q) { return -g * q; });
    }
    ReduceToShape(t, out, d.f32(), args.inputs[i].shape);
  }
  return absl::OkStatus();
}

// ---- PReLU -------------------------------------------------------------------------------

// Calls f(i, j) for each flat index i of `out` and j, the index of `in` (broadcast to out)
// it reads.
template <typename F>
void ForEachBroadcast(const Shape& out, const Shape& in, F f) {
  const int64_t n = static_cast<int64_t>(graph::NumElements(out));
  if (out.empty()) {
    f(0, 0);
    return;
  }
  const std::vector<int64_t> si = BroadcastStrides(in, out);
  const int rank = static_cast<int>(out.size());
  const int64_t inner = out[rank - 1];
  const int64_t rows = n / inner;
  const int64_t step = si[rank - 1];
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, base = 0;
    for (int d = rank - 2; d >= 0; --d) {
      base += (rem % out[d]) * si[d];
      rem /= out[d];
    }
    for (int64_t k = 0; k < inner; ++k) f(r * inner + k, base + k * step);
  }
}

absl::Status CheckPRelu(const std::string& op, const std::vector<TensorView>& inputs) {
  RETURN_IF_ERROR(CheckFloat(op, "input 'x'", inputs[0]));
  RETURN_IF_ERROR(CheckFloat(op, "input 'slope'", inputs[1]));
  const Shape& x = inputs[0].shape;
  const Shape& s = inputs[1].shape;
  bool fits = s.size() <= x.size();
  for (size_t d = 0; fits && d < s.size(); ++d) {
    fits = s[d] == 1 || s[d] == x[x.size() - s.size() + d];
  }
  if (!fits) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': input 'slope' ", ShapeString(s),
                                             " does not broadcast to input 'x' ", ShapeString(x)));
  }
  return absl::OkStatus();
}

// y = x where x > 0, else slope * x (PyTorch's branch at 0: the slope's).
absl::Status PReluForward(CpuContext&, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckPRelu(args.op, args.inputs));
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckElements(args.op, "output 'y'", y, x.num_elements()));
  BroadcastBinary(x.shape, x.f32(), x.shape, args.inputs[1].f32(), args.inputs[1].shape, y.f32(),
                  [](float u, float w) { return u > 0 ? u : w * u; });
  return absl::OkStatus();
}

// The slope's gradient x dy (0 where x > 0) is staged over x's shape, then summed.
absl::StatusOr<uint64_t> PReluBackwardScratch(CpuContext&, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  return dy.present() && args.input_grads[1].present() ? dy.bytes() : 0;
}

// dx = dy where x > 0, else slope * dy; dslope = sum of x * dy where x <= 0, PyTorch 1.13's
// prelu backward. dslope first: dx may overwrite dy.
absl::Status PReluBackward(CpuContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckPRelu(args.op, args.inputs));
  const TensorView& x = args.inputs[0];
  const TensorView& slope = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  const TensorView& dx = args.input_grads[0];
  const TensorView& ds = args.input_grads[1];
  RETURN_IF_ERROR(NeedData(args.op, "input 'x'", x));
  if (ds.present()) {
    RETURN_IF_ERROR(CheckElements(args.op, "gradient of input 'slope'", ds, slope.num_elements()));
    if (!dy.present()) {
      Fill(ds, 0.f);
    } else {
      ASSIGN_OR_RETURN(char* scratch, ctx.Scratch(args.scratch, args.scratch_bytes, dy.bytes()));
      float* t = reinterpret_cast<float*>(scratch);
      BroadcastBinary(x.shape, x.f32(), x.shape, dy.f32(), x.shape, t,
                      [](float u, float g) { return u > 0 ? 0.f : u * g; });
      ReduceToShape(t, x.shape, ds.f32(), slope.shape);
    }
  }
  if (dx.present()) {
    RETURN_IF_ERROR(CheckElements(args.op, "gradient of input 'x'", dx, x.num_elements()));
    if (!dy.present()) {
      Fill(dx, 0.f);
      return absl::OkStatus();
    }
    RETURN_IF_ERROR(NeedData(args.op, "input 'slope'", slope));
    const float* xs = x.f32();
    const float* g = dy.f32();
    const float* w = slope.f32();
    float* d = dx.f32();
    ForEachBroadcast(x.shape, slope.shape,
                     [&](int64_t i, int64_t j) { d[i] = xs[i] > 0 ? g[i] : w[j] * g[i]; });
  }
  return absl::OkStatus();
}

// ---- LayerNorm ----------------------------------------------------------------------------

// Checks LayerNorm's inputs: x float32 or bfloat16, weight and bias float32.
absl::Status CheckLayerNorm(const std::string& op, const std::vector<TensorView>& inputs) {
  const TensorView& x = inputs[0];
  RETURN_IF_ERROR(CheckFloatOf(op, "input 'x'", x, EltwiseDType(x)));
  for (int i = 1; i < 3; ++i) RETURN_IF_ERROR(CheckFloat(op, InputName(op, i), inputs[i]));
  if (x.rank() < 1) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': input 'x' is a scalar"));
  }
  for (int i = 1; i < 3; ++i) {
    if (inputs[i].shape != Shape{x.dim(-1)}) {
      return absl::InvalidArgumentError(StrCat("op '", op, "': ", InputName(op, i), " has shape ",
                                               ShapeString(inputs[i].shape), ", needs [", x.dim(-1),
                                               "] for input 'x' ", ShapeString(x.shape)));
    }
  }
  return absl::OkStatus();
}

absl::Status LayerNormForward(CpuContext&, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckLayerNorm(args.op, args.inputs));
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckFloatOf(args.op, "output 'y'", y, x.dtype));
  const int64_t d = x.dim(-1);
  const int64_t rows = x.num_elements() / d;
  float* mean_out = nullptr;
  float* rstd_out = nullptr;
  if (args.training) {
    if (args.saved.size() != 2 || !args.saved[0].present() || !args.saved[1].present()) {
      return absl::InternalError("op 'LayerNorm': a training forward needs saved mean and rstd");
    }
    RETURN_IF_ERROR(CheckElements(args.op, "saved mean", args.saved[0], rows));
    RETURN_IF_ERROR(CheckElements(args.op, "saved rstd", args.saved[1], rows));
    mean_out = args.saved[0].f32();
    rstd_out = args.saved[1].f32();
  }
  const double eps = args.attrs->Float("epsilon");
  const float* w = args.inputs[1].f32();
  const float* b = args.inputs[2].f32();
  return ForElement(x.dtype, [&](auto e) {
    using T = decltype(e);
    const T* in = Elems<const T>(x);
    T* out = Elems<T>(y);
#pragma omp parallel for if (x.num_elements() >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * d;
      double sum = 0;
      for (int64_t k = 0; k < d; ++k) sum += Ld(xr, k);
      const double mean = sum / d;
      double sq = 0;
      for (int64_t k = 0; k < d; ++k) sq += (Ld(xr, k) - mean) * (Ld(xr, k) - mean);
      const float mean_f = static_cast<float>(mean);
      const float rstd_f = static_cast<float>(1.0 / std::sqrt(sq / d + eps));
      T* yr = out + r * d;  // May be xr: each element is read just before it is written.
      for (int64_t k = 0; k < d; ++k) St(yr, k, (Ld(xr, k) - mean_f) * rstd_f * w[k] + b[k]);
      if (mean_out != nullptr) {
        mean_out[r] = mean_f;
        rstd_out[r] = rstd_f;
      }
    }
    return absl::OkStatus();
  });
}

// LayerNorm's backward on x and dy of element type T (float or bfloat16 bits), `rows` rows
// of `d`: dx in T, dweight and dbias float32, every sum in double.
template <typename T>
void LayerNormBackwardOf(const BackwardArgs& args, const T* in, const T* g, int64_t rows,
                         int64_t d) {
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  const float* mean = args.saved[0].f32();
  const float* rstd = args.saved[1].f32();
  const int64_t n = rows * d;

  // Step 1: dx, row by row.
  if (dx.present()) {
    const float* w = args.inputs[1].f32();
    T* out = Elems<T>(dx);
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * d;
      const T* gr = g + r * d;
      double sum_g = 0, sum_gx = 0;
      for (int64_t k = 0; k < d; ++k) {
        const float gw = Ld(gr, k) * w[k];
        sum_g += gw;
        sum_gx += static_cast<double>(gw) * ((Ld(xr, k) - mean[r]) * rstd[r]);
      }
      const float mg = static_cast<float>(sum_g / d);
      const float mgx = static_cast<float>(sum_gx / d);
      T* dr = out + r * d;
      for (int64_t k = 0; k < d; ++k) {
        const float xhat = (Ld(xr, k) - mean[r]) * rstd[r];
        St(dr, k, rstd[r] * (Ld(gr, k) * w[k] - mg - xhat * mgx));
      }
    }
  }

  // Step 2: dweight and dbias, each column summed over the rows in order.
  if (dw.present() || db.present()) {
    float* dw_out = dw.present() ? dw.f32() : nullptr;
    float* db_out = db.present() ? db.f32() : nullptr;
    const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t c0 = blk * kColumnBlock;
      const int64_t c1 = std::min(d, c0 + kColumnBlock);
      double acc_w[kColumnBlock] = {0};
      double acc_b[kColumnBlock] = {0};
      for (int64_t r = 0; r < rows; ++r) {
        const T* xr = in + r * d;
        const T* gr = g + r * d;
        for (int64_t c = c0; c < c1; ++c) {
          acc_w[c - c0] += static_cast<double>(Ld(gr, c)) * ((Ld(xr, c) - mean[r]) * rstd[r]);
          acc_b[c - c0] += Ld(gr, c);
        }
      }
      for (int64_t c = c0; c < c1; ++c) {
        if (dw_out != nullptr) dw_out[c] = static_cast<float>(acc_w[c - c0]);
        if (db_out != nullptr) db_out[c] = static_cast<float>(acc_b[c - c0]);
      }
    }
  }
}

absl::Status LayerNormBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  const TensorView& dy = args.output_grads[0];
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(CheckFloatOf(args.op, "input 'x'", x, EltwiseDType(x)));
  if (dx.present()) RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of input 'x'", dx, x.dtype));
  for (int i = 1; i < 3; ++i) {
    const TensorView& g = args.input_grads[i];
    if (g.present()) {
      RETURN_IF_ERROR(CheckFloat(args.op, "gradient of " + InputName(args.op, i), g));
    }
  }
  const int64_t d = x.dim(-1);
  const int64_t rows = x.num_elements() / d;
  if (!dy.present()) {
    for (const TensorView* g : {&dx, &dw, &db}) {
      if (g->present()) Fill(*g, 0.f);
    }
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, x.dtype));
  RETURN_IF_ERROR(NeedData(args.op, "input 'x'", x));
  if (args.saved.size() != 2) {
    return absl::InternalError("op 'LayerNorm': the backward needs saved mean and rstd");
  }
  RETURN_IF_ERROR(NeedData(args.op, "saved mean", args.saved[0]));
  RETURN_IF_ERROR(NeedData(args.op, "saved rstd", args.saved[1]));
  RETURN_IF_ERROR(CheckElements(args.op, "saved mean", args.saved[0], rows));
  RETURN_IF_ERROR(CheckElements(args.op, "saved rstd", args.saved[1], rows));
  if (dx.present()) RETURN_IF_ERROR(NeedData(args.op, "input 'weight'", args.inputs[1]));
  return ForElement(x.dtype, [&](auto e) {
    using T = decltype(e);
    LayerNormBackwardOf(args, Elems<const T>(x), Elems<const T>(dy), rows, d);
    return absl::OkStatus();
  });
}

// ---- Views: Flatten, Reshape --------------------------------------------------------------

// Returns true when a data-movement backward (any dtype) is done before moving anything: no
// gradient of x is wanted, or no gradient of y flows (then dx is zeroed).
bool MoveBackwardIsTrivial(const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return true;
  if (args.output_grads[0].present()) return false;
  std::memset(dx.data, 0, dx.bytes());
  return true;
}

absl::Status ViewForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  if (x.bytes() != y.bytes()) {
    return absl::InvalidArgumentError(StrCat("op '", args.op, "': output 'y' ",
                                             ShapeString(y.shape), " does not hold input 'x' ",
                                             ShapeString(x.shape)));
  }
  CopyUnlessSame(y, x);
  return absl::OkStatus();
}

absl::Status ViewBackward(CpuContext&, const BackwardArgs& args) {
  if (MoveBackwardIsTrivial(args)) return absl::OkStatus();
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  if (dx.bytes() != dy.bytes()) {
    return absl::InvalidArgumentError(StrCat("op '", args.op, "': gradient of output 'y' ",
                                             ShapeString(dy.shape), " does not fit input 'x' ",
                                             ShapeString(dx.shape)));
  }
  CopyUnlessSame(dx, dy);
  return absl::OkStatus();
}

// ---- Strided copies: Transpose, Slice, Expand ------------------------------------------

// Copies between the elements of `strided` that `at` walks and the contiguous `dense` of
// shape at.dims: gather (strided -> dense) or scatter (dense -> strided). A scatter needs
// distinct elements at distinct offsets (no 0 strides).
template <typename T>
void CopyStridedTyped(T* strided, const StridedWalk& at, T* dense, bool gather) {
  const int rank = static_cast<int>(at.dims.size());
  const int64_t n = static_cast<int64_t>(graph::NumElements(at.dims));
  if (rank == 0) {
    if (gather) {
      dense[0] = strided[at.offset];
    } else {
      strided[at.offset] = dense[0];
    }
    return;
  }
  const int64_t inner = at.dims[rank - 1];
  const int64_t rows = n / inner;
  const int64_t is = at.strides[rank - 1];
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    int64_t rem = r, off = at.offset;
    for (int d = rank - 2; d >= 0; --d) {
      off += (rem % at.dims[d]) * at.strides[d];
      rem /= at.dims[d];
    }
    T* s = strided + off;
    T* d = dense + r * inner;
    if (gather) {
      for (int64_t k = 0; k < inner; ++k) d[k] = s[k * is];
    } else {
      for (int64_t k = 0; k < inner; ++k) s[k * is] = d[k];
    }
  }
}

// CopyStridedTyped for any element size of `dtype`.
absl::Status CopyStrided(const std::string& op, proto::DType dtype, void* strided,
                         const StridedWalk& at, void* dense, bool gather) {
  switch (graph::DTypeSize(dtype)) {
    case 1:
      CopyStridedTyped(static_cast<uint8_t*>(strided), at, static_cast<uint8_t*>(dense), gather);
      return absl::OkStatus();
    case 2:
      CopyStridedTyped(static_cast<uint16_t*>(strided), at, static_cast<uint16_t*>(dense), gather);
      return absl::OkStatus();
    case 4:
      CopyStridedTyped(static_cast<uint32_t*>(strided), at, static_cast<uint32_t*>(dense), gather);
      return absl::OkStatus();
    case 8:
      CopyStridedTyped(static_cast<uint64_t*>(strided), at, static_cast<uint64_t*>(dense), gather);
      return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      StrCat("op '", op, "': dtype ", graph::DTypeName(dtype), " is not supported"));
}

// dst = src with dims permuted: dst.dim(k) = src.dim(perm[k]). Any element size.
absl::Status Permute(const std::string& op, const TensorView& src, const std::vector<int64_t>& perm,
                     const TensorView& dst) {
  return CopyStrided(op, src.dtype, src.data, TransposeWalk(src.shape, perm), dst.data,
                     /*gather=*/true);
}

absl::Status CheckPerm(const std::string& op, const std::vector<int64_t>& perm, const TensorView& x,
                       const TensorView& y) {
  std::vector<bool> seen(x.rank(), false);
  bool valid = static_cast<int>(perm.size()) == x.rank() && x.rank() == y.rank();
  for (size_t k = 0; valid && k < perm.size(); ++k) {
    valid = perm[k] >= 0 && perm[k] < x.rank() && !seen[perm[k]] && y.shape[k] == x.shape[perm[k]];
    if (valid) seen[perm[k]] = true;
  }
  if (!valid) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': attribute 'perm' does not map ",
                                             "input 'x' ", ShapeString(x.shape), " to output 'y' ",
                                             ShapeString(y.shape)));
  }
  return absl::OkStatus();
}

absl::Status TransposeForward(CpuContext&, const ForwardArgs& args) {
  const std::vector<int64_t> perm = args.attrs->Ints("perm");
  RETURN_IF_ERROR(CheckPerm(args.op, perm, args.inputs[0], args.outputs[0]));
  return Permute(args.op, args.inputs[0], perm, args.outputs[0]);
}

absl::Status TransposeBackward(CpuContext&, const BackwardArgs& args) {
  if (MoveBackwardIsTrivial(args)) return absl::OkStatus();
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  const std::vector<int64_t> perm = args.attrs->Ints("perm");
  RETURN_IF_ERROR(CheckPerm(args.op, perm, args.inputs[0], args.outputs[0]));
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[perm[k]] = static_cast<int64_t>(k);
  return Permute(args.op, dy, inverse, dx);
}

// Returns `status` with "op '<op>': " in front of its message.
absl::Status InOp(const std::string& op, const absl::Status& status) {
  if (status.ok()) return status;
  return absl::Status(status.code(), StrCat("op '", op, "': ", status.message()));
}

// Returns InvalidArgument unless y has x's dtype (a data-movement op's output).
absl::Status CheckSameDtype(const std::string& op, const TensorView& x, const TensorView& y) {
  if (x.dtype == y.dtype) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': output 'y' has dtype ",
                                           graph::DTypeName(y.dtype), ", input 'x' ",
                                           graph::DTypeName(x.dtype)));
}

// Returns the walk over x (shape `x`) that the output (shape `y`) of a Slice or Expand
// node follows.
absl::StatusOr<StridedWalk> GatherWalk(const std::string& op, const graph::Attrs& attrs,
                                       const Shape& x, const Shape& y) {
  absl::StatusOr<StridedWalk> walk = op == "Slice" ? SliceWalk(attrs, x, y) : ExpandWalk(x, y);
  if (!walk.ok()) return InOp(op, walk.status());
  return walk;
}

// Slice and Expand: y = the elements of x their walk visits. Any dtype.
absl::Status GatherForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(const StridedWalk walk, GatherWalk(args.op, *args.attrs, x.shape, y.shape));
  RETURN_IF_ERROR(CheckSameDtype(args.op, x, y));
  return CopyStrided(args.op, x.dtype, x.data, walk, y.data, /*gather=*/true);
}

// dx = zeros, then dy scattered to the elements the forward took.
absl::Status SliceBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of input 'x'", dx));
  ASSIGN_OR_RETURN(const StridedWalk walk,
                   GatherWalk(args.op, *args.attrs, args.inputs[0].shape, args.outputs[0].shape));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of input 'x'", dx,
                                args.inputs[0].num_elements()));
  Fill(dx, 0.f);
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of output 'y'", dy));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of output 'y'", dy,
                                args.outputs[0].num_elements()));
  return CopyStrided(args.op, dx.dtype, dx.data, walk, dy.data, /*gather=*/false);
}

// dx = dy summed over the broadcast dims: Add's reduction.
absl::Status ExpandBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const Shape& x = args.inputs[0].shape;
  const Shape& y = args.outputs[0].shape;
  RETURN_IF_ERROR(GatherWalk(args.op, *args.attrs, x, y).status());
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of input 'x'", dx));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of input 'x'", dx,
                                static_cast<int64_t>(graph::NumElements(x))));
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) {
    Fill(dx, 0.f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of output 'y'", dy));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient of output 'y'", dy,
                                static_cast<int64_t>(graph::NumElements(y))));
  ReduceToShape(dy.f32(), y, dx.f32(), x);
  return absl::OkStatus();
}

// ---- Concat and Split ---------------------------------------------------------------------

// Pieces of `whole` along `axis`, as byte ranges: whole is [outer, sum(sizes) * inner];
// piece k covers [offset_k, offset_k + bytes_k) of each of the `outer` rows.
struct AxisPieces {
  int64_t outer = 1;
  int64_t whole_row_bytes = 0;
  std::vector<int64_t> offset;
  std::vector<int64_t> bytes;
};

absl::StatusOr<AxisPieces> PiecesAlong(const std::string& op, int64_t axis_attr,
                                       const TensorView& whole,
                                       const std::vector<TensorView>& pieces,
                                       const std::string& whole_name, bool pieces_are_inputs) {
  const int rank = whole.rank();
  if (axis_attr < -rank || axis_attr >= rank) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': attribute 'axis' is ", axis_attr,
                                             ", outside [", -rank, ", ", rank, ")"));
  }
  const int axis = NormalizeAxis(axis_attr, rank);
  AxisPieces p;
  p.outer = Product(whole.shape, 0, axis);
  const int64_t inner = Product(whole.shape, axis + 1, rank);
  const int64_t es = graph::DTypeSize(whole.dtype);
  int64_t total = 0;
  for (size_t k = 0; k < pieces.size(); ++k) {
    const TensorView& t = pieces[k];
    bool fits = t.rank() == rank && t.dtype == whole.dtype;
    for (int d = 0; fits && d < rank; ++d) fits = d == axis || t.shape[d] == whole.shape[d];
    if (!fits) {
      const std::string name = pieces_are_inputs ? InputName(op, k) : OutputName(op, k);
      return absl::InvalidArgumentError(
          StrCat("op '", op, "': ", name, " ", ShapeString(t.shape), " ", graph::DTypeName(t.dtype),
                 " is not a slice along axis ", axis, " of ", whole_name, " ",
                 ShapeString(whole.shape), " ", graph::DTypeName(whole.dtype)));
    }
    p.offset.push_back(total * inner * es);
    p.bytes.push_back(t.shape[axis] * inner * es);
    total += t.shape[axis];
  }
  if (total != whole.shape[axis]) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': the pieces sum to ", total,
                                             " along axis ", axis, " but ", whole_name, " ",
                                             ShapeString(whole.shape), " has ", whole.shape[axis]));
  }
  p.whole_row_bytes = whole.shape[axis] * inner * es;
  return p;
}

// Copies between `whole` and its pieces: gather (pieces -> whole) or scatter. An absent
// piece reads as zeros on gather and is skipped on scatter.
void CopyPieces(const AxisPieces& p, const TensorView& whole, const std::vector<TensorView>& pieces,
                bool gather) {
  char* w = static_cast<char*>(whole.data);
  const int64_t total_bytes = p.outer * p.whole_row_bytes;
#pragma omp parallel for if (total_bytes >= 4 * kParallelMin) schedule(static)
  for (int64_t o = 0; o < p.outer; ++o) {
    for (size_t k = 0; k < pieces.size(); ++k) {
      char* wp = w + o * p.whole_row_bytes + p.offset[k];
      char* pp = static_cast<char*>(pieces[k].data) + o * p.bytes[k];
      if (gather) {
        if (pieces[k].present()) {
          std::memcpy(wp, pp, p.bytes[k]);
        } else {
          std::memset(wp, 0, p.bytes[k]);
        }
      } else if (pieces[k].present()) {
        std::memcpy(pp, wp, p.bytes[k]);
      }
    }
  }
}

absl::Status ConcatForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& y = args.outputs[0];
  auto pieces = PiecesAlong(args.op, args.attrs->Int("axis"), y, args.inputs, "output 'y'",
                            /*pieces_are_inputs=*/true);
  if (!pieces.ok()) return pieces.status();
  for (size_t k = 0; k < args.inputs.size(); ++k) {
    RETURN_IF_ERROR(NeedData(args.op, InputName(args.op, k), args.inputs[k]));
  }
  CopyPieces(*pieces, y, args.inputs, /*gather=*/true);
  return absl::OkStatus();
}

absl::Status ConcatBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dy = args.output_grads[0];
  std::vector<TensorView> grads = args.input_grads;
  for (size_t k = 0; k < grads.size(); ++k) {
    grads[k].shape = args.inputs[k].shape;
    grads[k].dtype = args.inputs[k].dtype;
  }
  TensorView whole = dy;
  whole.shape = args.outputs[0].shape;
  auto pieces = PiecesAlong(args.op, args.attrs->Int("axis"), whole, grads,
                            "gradient of output 'y'", /*pieces_are_inputs=*/true);
  if (!pieces.ok()) return pieces.status();
  if (!dy.present()) {
    for (const TensorView& g : grads) {
      if (g.present()) std::memset(g.data, 0, g.bytes());
    }
    return absl::OkStatus();
  }
  CopyPieces(*pieces, dy, grads, /*gather=*/false);
  return absl::OkStatus();
}

absl::Status SplitForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  auto pieces = PiecesAlong(args.op, args.attrs->Int("axis"), x, args.outputs, "input 'x'",
                            /*pieces_are_inputs=*/false);
  if (!pieces.ok()) return pieces.status();
  CopyPieces(*pieces, x, args.outputs, /*gather=*/false);
  return absl::OkStatus();
}

absl::Status SplitBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  std::vector<TensorView> grads = args.output_grads;
  for (size_t k = 0; k < grads.size(); ++k) {
    grads[k].shape = args.outputs[k].shape;
    grads[k].dtype = args.outputs[k].dtype;
  }
  auto pieces = PiecesAlong(args.op, args.attrs->Int("axis"), dx, grads, "gradient of input 'x'",
                            /*pieces_are_inputs=*/false);
  if (!pieces.ok()) return pieces.status();
  CopyPieces(*pieces, dx, grads, /*gather=*/true);
  return absl::OkStatus();
}

// ---- Softmax ------------------------------------------------------------------------------

// The layout of a softmax over one axis: [outer, len, inner]; with `causal`, row o of the
// last axis (len == T) may see only its first (o % T) + 1 entries.
struct SoftmaxLayout {
  int64_t outer, len, inner;
  bool causal;
  float scale;
  int64_t Visible(int64_t o) const { return causal ? (o % len) + 1 : len; }
  // The lines softmax runs along, and where line `line` starts (its entries `inner` apart).
  int64_t Lines() const { return outer * inner; }
  int64_t Base(int64_t line) const { return line / inner * len * inner + line % inner; }
};

absl::StatusOr<SoftmaxLayout> GetSoftmaxLayout(const std::string& op, const graph::Attrs& attrs,
                                               const TensorView& x) {
  const int rank = x.rank();
  const int64_t axis_attr = attrs.Int("axis");
  if (rank < 1 || axis_attr < -rank || axis_attr >= rank) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': attribute 'axis' is ", axis_attr,
                                             " for input 'x' ", ShapeString(x.shape)));
  }
  const int axis = NormalizeAxis(axis_attr, rank);
  SoftmaxLayout l{Product(x.shape, 0, axis), x.shape[axis], Product(x.shape, axis + 1, rank),
                  attrs.Bool("causal"), static_cast<float>(attrs.Float("scale"))};
  if (l.causal && (rank < 2 || axis != rank - 1 || x.dim(-1) != x.dim(-2))) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': causal softmax runs over the last ",
                                             "axis of square [..., T, T] scores; input 'x' is ",
                                             ShapeString(x.shape), " with axis ", axis));
  }
  return l;
}

// Softmax along the lines of `l` on x and y of element type T (float or bfloat16 bits);
// y may be x. A bfloat16 y is written once, normalised (its exponentials are computed
// again rather than stored unnormalised, which would round twice).
template <typename T>
void SoftmaxForwardOf(const SoftmaxLayout& l, const T* in, T* out) {
  const int64_t lines = l.Lines();
#pragma omp parallel for if (lines * l.len >= kParallelMin) schedule(static)
  for (int64_t line = 0; line < lines; ++line) {
    const int64_t base = l.Base(line);
    const int64_t visible = l.Visible(line / l.inner);
    // Pass 1: the max; pass 2: exponentials and their sum (y may be x: each element is
    // read just before it is overwritten); pass 3: normalise.
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < visible; ++j) m = std::max(m, l.scale * Ld(in, base + j * l.inner));
    double sum = 0;
    for (int64_t j = 0; j < l.len; ++j) {
      const int64_t at = base + j * l.inner;
      const float e = j < visible ? std::exp(l.scale * Ld(in, at) - m) : 0.f;
      if constexpr (std::is_same_v<T, float>) {
        out[at] = e;
      } else if (j >= visible) {
        St(out, at, 0.f);
      }
      sum += e;
    }
    const double inv = 1.0 / sum;
    for (int64_t j = 0; j < visible; ++j) {
      const int64_t at = base + j * l.inner;
      if constexpr (std::is_same_v<T, float>) {
        out[at] = static_cast<float>(out[at] * inv);
      } else {
        St(out, at, static_cast<float>(std::exp(l.scale * Ld(in, at) - m) * inv));
      }
    }
  }
}

absl::Status SoftmaxForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckUnaryForward(args, EltwiseDType(x)));
  auto layout = GetSoftmaxLayout(args.op, *args.attrs, x);
  if (!layout.ok()) return layout.status();
  return ForElement(x.dtype, [&](auto e) {
    using T = decltype(e);
    SoftmaxForwardOf(*layout, Elems<const T>(x), Elems<T>(y));
    return absl::OkStatus();
  });
}

absl::Status SoftmaxBackward(CpuContext&, const BackwardArgs& args) {
  const proto::DType dtype = EltwiseDType(args.input_grads[0]);
  ASSIGN_OR_RETURN(const bool trivial, UnaryBackwardIsTrivial(args, dtype));
  if (trivial) return absl::OkStatus();
  ASSIGN_OR_RETURN(const TensorView* y, UnaryBackwardData(args, /*from_output=*/true, dtype));
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  auto layout = GetSoftmaxLayout(args.op, *args.attrs, *y);
  if (!layout.ok()) return layout.status();
  const SoftmaxLayout l = *layout;
  return ForElement(dtype, [&](auto e) {
    using T = decltype(e);
    const T* yv = Elems<const T>(*y);
    const T* g = Elems<const T>(dy);
    T* out = Elems<T>(dx);
    const int64_t lines = l.Lines();
#pragma omp parallel for if (y->num_elements() >= kParallelMin) schedule(static)
    for (int64_t line = 0; line < lines; ++line) {
      const int64_t base = l.Base(line);
      double dot = 0;
      for (int64_t j = 0; j < l.len; ++j) {
        const int64_t at = base + j * l.inner;
        dot += static_cast<double>(Ld(g, at)) * Ld(yv, at);
      }
      const float dot_f = static_cast<float>(dot);
      for (int64_t j = 0; j < l.len; ++j) {  // dx may be dy: read, then overwrite.
        const int64_t at = base + j * l.inner;
        St(out, at, l.scale * Ld(yv, at) * (Ld(g, at) - dot_f));
      }
    }
    return absl::OkStatus();
  });
}

// ---- Embedding ----------------------------------------------------------------------------

absl::Status CheckIdsInRange(const std::string& op, const std::string& what, const TensorView& ids,
                             int64_t limit, const std::string& of) {
  const int64_t n = ids.num_elements();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t id = IndexAt(ids, i);
    if (id < 0 || id >= limit) {
      return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(ids.shape),
                                               " holds ", id, " at flat index ", i,
                                               ", outside [0, ", limit, ") for ", of));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckEmbedding(const std::string& op, const TensorView& ids, const TensorView& table,
                            const TensorView& y) {
  RETURN_IF_ERROR(CheckIndices(op, "input 'ids'", ids));
  RETURN_IF_ERROR(CheckFloatOf(op, "input 'table'", table, EltwiseDType(table)));
  RETURN_IF_ERROR(CheckFloatOf(op, "output 'y'", y, table.dtype));
  if (table.rank() != 2) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': input 'table' has shape ",
                                             ShapeString(table.shape), ", needs [V, D]"));
  }
  return CheckElements(op, "output 'y'", y, ids.num_elements() * table.dim(1));
}

// Returns InvalidArgument unless every id names a row of the [V, D] table.
absl::Status CheckIdsFitTable(const std::string& op, const TensorView& ids,
                              const TensorView& table) {
  return CheckIdsInRange(op, "input 'ids'", ids, table.dim(0),
                         StrCat("input 'table' ", ShapeString(table.shape)));
}

absl::Status EmbeddingForward(CpuContext&, const ForwardArgs& args) {
  const TensorView& ids = args.inputs[0];
  const TensorView& table = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckEmbedding(args.op, ids, table, y));
  RETURN_IF_ERROR(CheckIdsFitTable(args.op, ids, table));
  const int64_t n = ids.num_elements();
  const int64_t row_bytes = table.dim(1) * graph::DTypeSize(table.dtype);
  const char* t = static_cast<const char*>(table.data);
  char* out = static_cast<char*>(y.data);
#pragma omp parallel for if (n * table.dim(1) >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(out + i * row_bytes, t + IndexAt(ids, i) * row_bytes, row_bytes);
  }
  return absl::OkStatus();
}

// A bfloat16 table's gradient sums each row's dy rows in float32 and rounds once: the ids'
// positions grouped by id (a counting sort: V + 1 offsets and n positions, int64) say which
// rows each table row sums, in position order.
absl::StatusOr<uint64_t> EmbeddingBackwardScratch(CpuContext&, const BackwardArgs& args) {
  const TensorView& dtable = args.input_grads[1];
  if (!dtable.present() || dtable.dtype != proto::DTYPE_BFLOAT16) return 0;
  return (args.inputs[1].dim(0) + 1 + args.inputs[0].num_elements()) * sizeof(int64_t);
}

// dtable (bfloat16) = the dy rows of each id summed in float32, in position order (as the
// float32 kernel sums them), rounded once; rows no id names are 0.
absl::Status EmbeddingBackwardBf16(CpuContext& ctx, const BackwardArgs& args) {
  const TensorView& ids = args.inputs[0];
  const TensorView& dtable = args.input_grads[1];
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of output 'y'", dy, proto::DTYPE_BFLOAT16));
  const int64_t n = ids.num_elements();
  const int64_t v = dtable.dim(0);
  const int64_t d = dtable.dim(1);
  ASSIGN_OR_RETURN(char* scratch,
                   ctx.Scratch(args.scratch, args.scratch_bytes, (v + 1 + n) * sizeof(int64_t)));
  int64_t* start =
      reinterpret_cast<int64_t*>(scratch);  // Row r's positions: [start[r], start[r+1]).
  int64_t* order = start + v + 1;
  std::fill(start, start + v + 1, 0);
  for (int64_t i = 0; i < n; ++i) ++start[IndexAt(ids, i) + 1];
  for (int64_t r = 0; r < v; ++r) start[r + 1] += start[r];
  for (int64_t i = 0; i < n; ++i) order[start[IndexAt(ids, i)]++] = i;
  for (int64_t r = v; r > 0; --r) start[r] = start[r - 1];  // Undo the advance.
  start[0] = 0;
  const uint16_t* g = Elems<const uint16_t>(dy);
  uint16_t* out = Elems<uint16_t>(dtable);
#pragma omp parallel for if (v * d >= kParallelMin) schedule(dynamic, 64)
  for (int64_t r = 0; r < v; ++r) {
    uint16_t* row = out + r * d;
    for (int64_t c = 0; c < d; ++c) {
      float acc = 0.f;
      for (int64_t q = start[r]; q < start[r + 1]; ++q) acc += Ld(g, order[q] * d + c);
      St(row, c, acc);
    }
  }
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(CpuContext& ctx, const BackwardArgs& args) {
  const TensorView& dtable = args.input_grads[1];
  if (!dtable.present()) return absl::OkStatus();
  const TensorView& ids = args.inputs[0];
  const TensorView& table = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(CheckEmbedding(args.op, ids, table, args.outputs[0]));
  RETURN_IF_ERROR(
      CheckElements(args.op, "gradient of input 'table'", dtable, table.num_elements()));
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of input 'table'", dtable, table.dtype));
  if (!dy.present()) {
    Fill(dtable, 0.f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(NeedData(args.op, "input 'ids'", ids));
  RETURN_IF_ERROR(CheckIdsFitTable(args.op, ids, table));
  if (dtable.dtype == proto::DTYPE_BFLOAT16) return EmbeddingBackwardBf16(ctx, args);
  Fill(dtable, 0.f);
  const int64_t n = ids.num_elements();
  const int64_t d = table.dim(1);
  const float* g = dy.f32();
  float* out = dtable.f32();
  // Each block of columns sums its rows in id order: deterministic for any thread count.
  const int64_t blocks = (d + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for if (n * d >= kParallelMin) schedule(static)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kColumnBlock;
    const int64_t c1 = std::min(d, c0 + kColumnBlock);
    for (int64_t i = 0; i < n; ++i) {
      float* row = out + IndexAt(ids, i) * d;
      const float* gr = g + i * d;
      for (int64_t c = c0; c < c1; ++c) row[c] += gr[c];
    }
  }
  return absl::OkStatus();
}

// ---- SoftmaxCrossEntropy ------------------------------------------------------------------

absl::Status CheckCrossEntropy(const std::string& op, const TensorView& logits,
                               const TensorView& labels) {
  RETURN_IF_ERROR(CheckFloatOf(op, "input 'logits'", logits, EltwiseDType(logits)));
  RETURN_IF_ERROR(CheckIndices(op, "input 'labels'", labels));
  if (logits.rank() < 1) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': input 'logits' is a scalar"));
  }
  return CheckElements(op, "input 'labels'", labels, logits.num_elements() / logits.dim(-1));
}

// Returns InvalidArgument unless every label names one of the classes of the logits.
absl::Status CheckLabelsFitClasses(const std::string& op, const TensorView& labels,
                                   const TensorView& logits) {
  const int64_t c = logits.dim(-1);
  return CheckIdsInRange(op, "input 'labels'", labels, c,
                         StrCat(c, " classes of input 'logits' ", ShapeString(logits.shape)));
}

// The largest of the `c` logits at `xr`, and the sum of exp(x - max) over them in double:
// the row's softmax is exp(x - max) / sum_exp.
struct RowExpSum {
  float max;
  double sum_exp;
};

template <typename T>
RowExpSum ScanRow(const T* xr, int64_t c) {
  float m;
  if constexpr (std::is_same_v<T, float>) {
    m = *std::max_element(xr, xr + c);
  } else {
    // Bits to float before comparing (std::max_element's first largest, NaN aside).
    m = Ld(xr, 0);
    for (int64_t k = 1; k < c; ++k) m = std::max(m, Ld(xr, k));
  }
  double sum = 0;
  for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(Ld(xr, k)) - m);
  return {m, sum};
}

// Each row's loss is summed in order after the parallel loop: one double per row.
absl::StatusOr<uint64_t> CrossEntropyForwardScratch(CpuContext&, const ForwardArgs& args) {
  const TensorView& logits = args.inputs[0];
  RETURN_IF_ERROR(CheckCrossEntropy(args.op, logits, args.inputs[1]));
  return logits.num_elements() / logits.dim(-1) * sizeof(double);
}

absl::Status CrossEntropyForward(CpuContext& ctx, const ForwardArgs& args) {
  const TensorView& logits = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckCrossEntropy(args.op, logits, labels));
  RETURN_IF_ERROR(CheckFloat(args.op, "output 'y'", y));
  RETURN_IF_ERROR(CheckElements(args.op, "output 'y'", y, 1));
  const int64_t c = logits.dim(-1);
  const int64_t rows = logits.num_elements() / c;
  RETURN_IF_ERROR(CheckLabelsFitClasses(args.op, labels, logits));
  ASSIGN_OR_RETURN(char* scratch,
                   ctx.Scratch(args.scratch, args.scratch_bytes, rows * sizeof(double)));
  double* loss = reinterpret_cast<double*>(scratch);
  ForElement(logits.dtype, [&](auto e) {
    using T = decltype(e);
    const T* in = Elems<const T>(logits);
#pragma omp parallel for if (logits.num_elements() >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * c;
      const RowExpSum row = ScanRow(xr, c);
      loss[r] = row.max + std::log(row.sum_exp) - Ld(xr, IndexAt(labels, r));
    }
    return absl::OkStatus();
  }).IgnoreError();  // The body cannot fail.
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) total += loss[r];
  y.f32()[0] = static_cast<float>(total / rows);
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dlogits = args.input_grads[0];
  if (!dlogits.present()) return absl::OkStatus();
  const TensorView& logits = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  RETURN_IF_ERROR(CheckCrossEntropy(args.op, logits, labels));
  RETURN_IF_ERROR(CheckFloatOf(args.op, "gradient of input 'logits'", dlogits, logits.dtype));
  RETURN_IF_ERROR(
      CheckElements(args.op, "gradient of input 'logits'", dlogits, logits.num_elements()));
  const TensorView& dloss = args.output_grads[0];
  if (!dloss.present()) {
    Fill(dlogits, 0.f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(NeedData(args.op, "input 'logits'", logits));
  RETURN_IF_ERROR(NeedData(args.op, "input 'labels'", labels));
  const int64_t c = logits.dim(-1);
  const int64_t rows = logits.num_elements() / c;
  RETURN_IF_ERROR(CheckLabelsFitClasses(args.op, labels, logits));
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of " + OutputName(args.op, 0), dloss));
  const double factor = static_cast<double>(dloss.f32()[0]) / rows;
  return ForElement(logits.dtype, [&](auto e) {
    using T = decltype(e);
    const T* in = Elems<const T>(logits);
    T* out = Elems<T>(dlogits);
#pragma omp parallel for if (logits.num_elements() >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const T* xr = in + r * c;
      const RowExpSum row = ScanRow(xr, c);
      const int64_t label = IndexAt(labels, r);
      T* dr = out + r * c;
      for (int64_t k = 0; k < c; ++k) {
        const double p = std::exp(static_cast<double>(Ld(xr, k)) - row.max) / row.sum_exp;
        St(dr, k, static_cast<float>((p - (k == label ? 1.0 : 0.0)) * factor));
      }
    }
    return absl::OkStatus();
  });
}

// ---- Kernel entry: argument counts, attributes, oneDNN errors -----------------------------

absl::Status CheckCounts(const std::string& op, const graph::Attrs* attrs, size_t num_inputs,
                         size_t num_outputs) {
  const graph::OpSchema* s = graph::FindOp(op);
  if (s == nullptr) return absl::InternalError(StrCat("op '", op, "' is not in the op set"));
  const size_t max_in = s->input_names.size();
  const size_t min_in = max_in - s->num_optional_inputs;
  const bool inputs_ok =
      s->variadic_inputs ? num_inputs >= min_in : num_inputs >= min_in && num_inputs <= max_in;
  const bool outputs_ok =
      s->variadic_outputs ? num_outputs >= 1 : num_outputs == s->output_names.size();
  if (!inputs_ok || !outputs_ok) {
    return absl::InvalidArgumentError(
        StrCat("op '", op, "': got ", num_inputs, " inputs and ", num_outputs, " outputs"));
  }
  if (!s->attrs.empty() && attrs == nullptr) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': no attributes given"));
  }
  return absl::OkStatus();
}

template <ForwardKernel kKernel>
absl::Status GuardedForward(CpuContext& ctx, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.attrs, args.inputs.size(), args.outputs.size()));
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    RETURN_IF_ERROR(NeedData(args.op, InputName(args.op, i), args.inputs[i]));
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    RETURN_IF_ERROR(NeedData(args.op, OutputName(args.op, i), args.outputs[i]));
  }
  try {
    return kKernel(ctx, args);
  } catch (const dnnl::error& e) {
    return absl::InternalError(StrCat("op '", args.op, "' forward: oneDNN failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        StrCat("op '", args.op, "' forward: out of host memory for a temporary"));
  }
}

template <BackwardKernel kKernel>
absl::Status GuardedBackward(CpuContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.attrs, args.inputs.size(), args.outputs.size()));
  if (args.input_grads.size() != args.inputs.size() ||
      args.output_grads.size() != args.outputs.size()) {
    return absl::InvalidArgumentError(StrCat(
        "op '", args.op, "' backward: got ", args.input_grads.size(), " input gradients for ",
        args.inputs.size(), " inputs and ", args.output_grads.size(), " output gradients for ",
        args.outputs.size(), " outputs"));
  }
  try {
    return kKernel(ctx, args);
  } catch (const dnnl::error& e) {
    return absl::InternalError(StrCat("op '", args.op, "' backward: oneDNN failed: ", e.what()));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        StrCat("op '", args.op, "' backward: out of host memory for a temporary"));
  }
}

// A scratch query guarded as its kernel is.
template <typename Args, absl::StatusOr<uint64_t> (*kScratch)(CpuContext&, const Args&)>
absl::StatusOr<uint64_t> GuardedScratch(CpuContext& ctx, const Args& args) {
  try {
    return kScratch(ctx, args);
  } catch (const dnnl::error& e) {
    return absl::InternalError(StrCat("op '", args.op, "' scratch: oneDNN failed: ", e.what()));
  }
}

template <ForwardKernel kForward, BackwardKernel kBackward, ForwardScratch kForwardScratch = nullptr,
          BackwardScratch kBackwardScratch = nullptr>
void Register(KernelTable* table, const char* op) {
  OpKernels k{&GuardedForward<kForward>, &GuardedBackward<kBackward>};
  if constexpr (kForwardScratch != nullptr) {
    k.forward_scratch = &GuardedScratch<ForwardArgs, kForwardScratch>;
  }
  if constexpr (kBackwardScratch != nullptr) {
    k.backward_scratch = &GuardedScratch<BackwardArgs, kBackwardScratch>;
  }
  (*table)[op] = k;
}

// ---- Optimizer steps ----------------------------------------------------------------------

absl::Status CheckUpdate(const UpdateArgs& args, size_t num_state) {
  const std::string what = StrCat("update '", args.op, "'");
  RETURN_IF_ERROR(CheckFloat(args.op, "parameter", args.param));
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient", args.grad));
  RETURN_IF_ERROR(NeedData(args.op, "parameter", args.param));
  RETURN_IF_ERROR(NeedData(args.op, "gradient", args.grad));
  RETURN_IF_ERROR(CheckElements(args.op, "gradient", args.grad, args.param.num_elements()));
  if (args.state.size() != num_state) {
    return absl::InvalidArgumentError(
        StrCat(what, ": got ", args.state.size(), " state tensors, needs ", num_state));
  }
  for (size_t i = 0; i < num_state; ++i) {
    const std::string name = StrCat("state ", i);
    RETURN_IF_ERROR(CheckFloat(args.op, name, args.state[i]));
    RETURN_IF_ERROR(NeedData(args.op, name, args.state[i]));
    RETURN_IF_ERROR(CheckElements(args.op, name, args.state[i], args.param.num_elements()));
  }
  if (args.step < 1) {
    return absl::InvalidArgumentError(StrCat(what, ": step is ", args.step, ", needs >= 1"));
  }
  return absl::OkStatus();
}

// torch.optim.SGD (dampening 0, not Nesterov): executor/optimizer_math.h.
absl::Status SgdMomentumUpdate(const UpdateArgs& args) {
  RETURN_IF_ERROR(CheckUpdate(args, 1));
  const SgdMomentumMath math(args.params, args.step);
  float* p = args.param.f32();
  const float* grad = args.grad.f32();
  float* buf = args.state[0].f32();
  const int64_t n = args.param.num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) math(i, p, grad, buf);
  return absl::OkStatus();
}

// torch.optim.Adam (not AMSGrad): executor/optimizer_math.h.
absl::Status AdamUpdate(const UpdateArgs& args) {
  RETURN_IF_ERROR(CheckUpdate(args, 2));
  const AdamMath math(args.params, args.step);
  float* p = args.param.f32();
  const float* grad = args.grad.f32();
  float* m = args.state[0].f32();
  float* v = args.state[1].f32();
  const int64_t n = args.param.num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) math(i, p, grad, m, v);
  return absl::OkStatus();
}

}  // namespace

void RegisterLoopKernels(KernelTable* table) {
  for (const char* op : {"ReLU", "ReLU6", "Sigmoid", "Tanh", "GELU"}) {
    Register<EltwiseForward, EltwiseBackward, EltwiseForwardScratch, EltwiseBackwardScratch>(
        table, op);
  }
  Register<PointwiseForward<HardSigmoidFn>, PointwiseBackward<HardSigmoidFn>>(table,
                                                                              "HardSigmoid");
  Register<PointwiseForward<HardSwishFn>, PointwiseBackward<HardSwishFn>>(table, "HardSwish");
  Register<PointwiseForward<LeakyReluFn>, PointwiseBackward<LeakyReluFn>>(table, "LeakyReLU");
  Register<PointwiseForward<PowFn>, PointwiseBackward<PowFn>>(table, "Pow");
  Register<PointwiseForward<EluFn>, PointwiseBackward<EluFn>>(table, "ELU");
  Register<PointwiseForward<EluFn>, PointwiseBackward<EluFn>>(table, "SELU");
  Register<PointwiseForward<SoftplusFn>, PointwiseBackward<SoftplusFn>>(table, "Softplus");
  Register<PointwiseForward<SqrtFn>, PointwiseBackward<SqrtFn>>(table, "Sqrt");
  Register<PointwiseForward<ErfFn>, PointwiseBackward<ErfFn>>(table, "Erf");
  Register<PointwiseForward<MishFn>, PointwiseBackward<MishFn>>(table, "Mish");
  Register<DropoutForward, DropoutBackward>(table, "Dropout");
  Register<AddForward, AddBackward>(table, "Add");
  Register<MulForward, MulBackward, nullptr, MulBackwardScratch>(table, "Mul");
  Register<SubForward, SubBackward>(table, "Sub");
  Register<DivForward, DivBackward, nullptr, DivBackwardScratch>(table, "Div");
  Register<PReluForward, PReluBackward, nullptr, PReluBackwardScratch>(table, "PReLU");
  Register<LayerNormForward, LayerNormBackward>(table, "LayerNorm");
  Register<ViewForward, ViewBackward>(table, "Flatten");
  Register<ViewForward, ViewBackward>(table, "Reshape");
  Register<TransposeForward, TransposeBackward>(table, "Transpose");
  Register<GatherForward, SliceBackward>(table, "Slice");
  Register<GatherForward, ExpandBackward>(table, "Expand");
  Register<ConcatForward, ConcatBackward>(table, "Concat");
  Register<SplitForward, SplitBackward>(table, "Split");
  Register<SoftmaxForward, SoftmaxBackward>(table, "Softmax");
  Register<EmbeddingForward, EmbeddingBackward, nullptr, EmbeddingBackwardScratch>(table,
                                                                                   "Embedding");
  Register<CrossEntropyForward, CrossEntropyBackward, CrossEntropyForwardScratch>(
      table, "SoftmaxCrossEntropy");
}

absl::Status RunUpdate(CpuContext&, const UpdateArgs& args) {
  if (args.op == "SgdMomentumUpdate") return SgdMomentumUpdate(args);
  if (args.op == "AdamUpdate") return AdamUpdate(args);
  return absl::UnimplementedError(StrCat("CPU backend: no optimizer step '", args.op, "'"));
}

absl::Status RunAccumulate(CpuContext&, const TensorView& out, const TensorView& a,
                           const TensorView& b) {
  const bool bf16 =
      out.dtype == proto::DTYPE_BFLOAT16 && a.dtype == out.dtype && b.dtype == out.dtype;
  for (const auto& [what, t] :
       {std::pair<const char*, const TensorView*>{"out", &out}, {"a", &a}, {"b", &b}}) {
    if (!bf16) RETURN_IF_ERROR(CheckFloat("Accumulate", what, *t));
    RETURN_IF_ERROR(NeedData("Accumulate", what, *t));
    RETURN_IF_ERROR(CheckElements("Accumulate", what, *t, out.num_elements()));
  }
  if (bf16) return AccumulateBf16(out, a, b);
  const float* x = a.f32();
  const float* y = b.f32();
  float* z = out.f32();
  const int64_t n = out.num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) z[i] = x[i] + y[i];
  return absl::OkStatus();
}

}  // namespace headroom::executor::cpu
