// The CPU backend's kernels for the ops oneDNN does best: Conv2D, ConvTranspose2D (as a
// convolution's data gradient), BatchNorm, MatMul, MaxPool,
// AvgPool and GlobalAvgPool, forward and backward, with PyTorch 1.13's semantics on float32
// NCHW tensors.
//
// Every oneDNN primitive descriptor (and the reorders around it) is built once per distinct
// op, shape and attribute set and kept in CpuContext::cache; the primitive itself (generated
// code) on its first run, so a scratch query compiles nothing. Convolutions let oneDNN pick
// its preferred (blocked) layouts and reorder from and to the plain user buffers through
// copies staged in the node's scratch; every primitive runs with a user scratchpad, also in
// the node's scratch (ScratchLayout says where each piece goes, for the query and the run
// alike). The other primitives run on the plain layouts directly. Where oneDNN has no primitive
// with the right semantics (max pool backward without a workspace, the PyTorch divisor of an
// include-padding average pool in ceil mode, global average pool, bias gradients) the kernel
// is a loop, parallel over independent outputs only, so every kernel is deterministic.
//
// BatchNorm saves the batch mean and the biased batch variance (what oneDNN's backward reads)
// as its two per-channel statistics.
//
// No exception leaves this file: each kernel entry converts dnnl::error (and any other
// std::exception) into absl::InternalError.

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "executor/cpu/cpu_context.h"
#include "executor/matmul_batches.h"
#include "oneapi/dnnl/dnnl.hpp"
#include "util/bfloat16.h"
#include "util/check.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

using dnnl::memory;
using Tag = dnnl::memory::format_tag;
using DT = dnnl::memory::data_type;

// ---- Shared helpers -------------------------------------------------------------------------

std::string ShapeStr(const graph::Shape& s) { return graph::ShapeString(s); }

// Returns InvalidArgument unless `t` has dtype `dtype` (float32 unless the kernel takes
// bfloat16: then x's) and rank `rank` (any rank for -1).
absl::Status CheckTensor(const std::string& op, const char* what, const TensorView& t,
                         int rank = -1, proto::DType dtype = proto::DTYPE_FLOAT32) {
  if (t.dtype != dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "CPU ", op, ": ", what, " ", ShapeStr(t.shape), " has dtype ", graph::DTypeName(t.dtype),
        dtype == proto::DTYPE_FLOAT32
            ? "; only float32 is supported"
            : absl::StrCat("; needs ", graph::DTypeName(dtype), " as input 'x'")));
  }
  if (rank >= 0 && t.rank() != rank) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": ", what, " ", ShapeStr(t.shape),
                                                   " has ", t.rank(), " dims, needs ", rank));
  }
  return absl::OkStatus();
}

absl::Status CheckCounts(const std::string& op, size_t inputs, size_t min_inputs,
                         size_t max_inputs, size_t outputs) {
  if (inputs < min_inputs || inputs > max_inputs || outputs < 1) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": got ", inputs, " inputs and ",
                                                   outputs, " outputs, needs ", min_inputs, " to ",
                                                   max_inputs, " inputs and 1 output"));
  }
  return absl::OkStatus();
}

// Returns InvalidArgument unless a backward has one input gradient per input.
absl::Status CheckGradCounts(const BackwardArgs& args) {
  if (args.input_grads.size() == args.inputs.size()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": ", args.input_grads.size(),
                                                 " input gradients for ", args.inputs.size(),
                                                 " inputs"));
}

// Runs `body` (returning absl::Status), turning any exception into InternalError.
template <typename Body>
absl::Status Guarded(const std::string& op, Body body) {
  try {
    return body();
  } catch (const dnnl::error& e) {
    return absl::InternalError(absl::StrCat("CPU ", op, ": oneDNN error ", e.status, ": ",
                                            e.what()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("CPU ", op, ": ", e.what()));
  }
}

// A backward whose output gradient does not flow: every present input gradient is zero.
bool ZeroGradsIfNoFlow(const BackwardArgs& args) {
  if (!args.output_grads.empty() && args.output_grads[0].present()) return false;
  for (const TensorView& g : args.input_grads) {
    if (g.present()) std::memset(g.data, 0, g.bytes());
  }
  return true;
}

memory::desc PlainDesc(const memory::dims& dims, Tag tag, DT dt = DT::f32) {
  return {dims, dt, tag};
}

// Returns the oneDNN data type of float32 or bfloat16 `dtype`.
DT DataTypeOf(proto::DType dtype) { return dtype == proto::DTYPE_BFLOAT16 ? DT::bf16 : DT::f32; }

// Returns a float32 or bfloat16 element as float (exact).
inline float Widen(float v) { return v; }
inline float Widen(uint16_t v) { return BFloat16ToFloat(v); }
// Stores a float32 sum as float32 or (rounded to nearest even) bfloat16.
inline void Narrow(double v, float* out) { *out = static_cast<float>(v); }
inline void Narrow(double v, uint16_t* out) { *out = FloatToBFloat16(static_cast<float>(v)); }

memory Mem(const memory::desc& md, const dnnl::engine& engine, const void* data) {
  return memory(md, engine, const_cast<void*>(data));
}

std::string DimsKey(const memory::dims& d) { return absl::StrJoin(d, ","); }

// ---- Scratch ----------------------------------------------------------------------------------

// Each piece of a call's scratch starts at a multiple of this (oneDNN aligns its own buffers so).
constexpr uint64_t kScratchAlignment = 64;

uint64_t AlignUp(uint64_t bytes) {
  return (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
}

// Where one kernel call's scratch goes: staged pieces, all live during the call, at
// increasing offsets; then one region that the scratchpads of the primitives the call runs
// one after another share. Built with the primitive descriptors, before anything runs.
class ScratchLayout {
 public:
  // Returns the offset of a new staged piece of `bytes`.
  uint64_t Stage(uint64_t bytes) {
    const uint64_t at = staged_bytes_;
    staged_bytes_ += AlignUp(bytes);
    return at;
  }
  // Makes the shared scratchpad region hold the scratchpad of a primitive built from `pd`.
  void Scratchpad(const dnnl::primitive_desc_base& pd) {
    scratchpad_bytes_ = std::max<uint64_t>(scratchpad_bytes_, pd.scratchpad_desc().get_size());
  }
  // REQUIRES: every piece is staged.
  uint64_t scratchpad_offset() const { return staged_bytes_; }
  // Returns the bytes of all of it.
  uint64_t bytes() const { return staged_bytes_ + AlignUp(scratchpad_bytes_); }

 private:
  uint64_t staged_bytes_ = 0;
  uint64_t scratchpad_bytes_ = 0;
};

// One call's scratch, laid out by a ScratchLayout; `base` holds at least layout.bytes().
class ScratchSpace {
 public:
  ScratchSpace(const dnnl::engine& engine, char* base, const ScratchLayout& layout)
      : engine_(engine), base_(base), layout_(&layout) {}

  void* At(uint64_t offset) const { return base_ + offset; }
  // Adds the scratchpad argument of a primitive built from `pd` to `args`, if it needs one.
  void AddScratchpad(const dnnl::primitive_desc_base& pd,
                     std::unordered_map<int, memory>& args) const {
    const memory::desc md = pd.scratchpad_desc();
    if (md.get_size() == 0) return;
    args[DNNL_ARG_SCRATCHPAD] = memory(md, engine_, base_ + layout_->scratchpad_offset());
  }

 private:
  dnnl::engine engine_;
  char* base_;
  const ScratchLayout* layout_;
};

// Returns the scratch of a call with `args` (ForwardArgs or BackwardArgs) whose need is
// `bytes`: its planned scratch, or the context's unplanned buffer (CpuContext::Scratch).
template <typename Args>
absl::StatusOr<char*> ScratchBase(CpuContext& ctx, const Args& args, uint64_t bytes) {
  return ctx.Scratch(args.scratch, args.scratch_bytes, bytes);
}

// Returns `prim`, first built from `pd` (which compiles code): a scratch query builds
// descriptors only, the first call the primitive.
template <typename Prim, typename Pd>
Prim& Compiled(std::optional<Prim>& prim, const Pd& pd) {
  if (!prim.has_value()) prim.emplace(pd);
  return *prim;
}

// Runs `prim` (built from `pd`) with `args` and its scratchpad from `scratch`.
template <typename Prim, typename Pd>
void Execute(dnnl::stream& stream, std::optional<Prim>& prim, const Pd& pd,
             const ScratchSpace& scratch, std::unordered_map<int, memory> args) {
  scratch.AddScratchpad(pd, args);
  Compiled(prim, pd).execute(stream, args);
}

// One argument of a primitive whose layout oneDNN chose: the plain layout of the user's
// buffer, the chosen one and, when they differ, a copy staged in the chosen layout (a piece
// of the call's scratch) with the reorder between the two. Not thread-safe.
class StagedArg {
 public:
  StagedArg(const dnnl::engine& engine, const memory::desc& plain, const memory::desc& chosen,
            bool is_output, ScratchLayout* layout)
      : engine_(engine), plain_(plain), chosen_(chosen), reorder_needed_(!(plain == chosen)) {
    if (!reorder_needed_) return;
    offset_ = layout->Stage(chosen_.get_size());
    reorder_pd_ = is_output
                      ? dnnl::reorder::primitive_desc(engine_, chosen_, engine_, plain_,
                                                      UserScratchpad())
                      : dnnl::reorder::primitive_desc(engine_, plain_, engine_, chosen_,
                                                      UserScratchpad());
    layout->Scratchpad(reorder_pd_);
  }

  // Returns the memory to pass as an input for the user buffer `data`, reordering it into
  // its staged copy first when the layouts differ.
  memory Input(dnnl::stream& stream, const ScratchSpace& scratch, const void* data) {
    memory user = Mem(plain_, engine_, data);
    if (!reorder_needed_) return user;
    memory staged = Mem(chosen_, engine_, scratch.At(offset_));
    Execute(stream, reorder_, reorder_pd_, scratch, {{DNNL_ARG_FROM, user}, {DNNL_ARG_TO, staged}});
    return staged;
  }

  // Returns the memory a primitive should write an output into; call Finish() afterwards.
  memory Output(const ScratchSpace& scratch, void* data) const {
    return Mem(reorder_needed_ ? chosen_ : plain_, engine_,
               reorder_needed_ ? scratch.At(offset_) : data);
  }

  // Copies a staged output into the user buffer `data` (nothing if the layouts agree).
  void Finish(dnnl::stream& stream, const ScratchSpace& scratch, void* data) {
    if (!reorder_needed_) return;
    Execute(stream, reorder_, reorder_pd_, scratch,
            {{DNNL_ARG_FROM, Mem(chosen_, engine_, scratch.At(offset_))},
             {DNNL_ARG_TO, Mem(plain_, engine_, data)}});
  }

 private:
  dnnl::engine engine_;
  memory::desc plain_;
  memory::desc chosen_;
  bool reorder_needed_;
  uint64_t offset_ = 0;
  dnnl::reorder::primitive_desc reorder_pd_;
  std::optional<dnnl::reorder> reorder_;
};

// ---- Conv2D ---------------------------------------------------------------------------------

// The shapes and attributes of one convolution, in oneDNN's terms.
struct ConvGeometry {
  memory::dims x, w, y;  // x NCHW, w OIHW (or GOIHW with groups), y NCHW.
  memory::dims strides, dilates, pad_l, pad_r;
  int64_t groups = 1;
  bool has_bias = false;
  // Of x, w, bias and y alike (and their gradients): f32, or bf16 with float32 accumulation.
  DT dt = DT::f32;

  std::string Key() const {
    return absl::StrCat("x", DimsKey(x), ":w", DimsKey(w), ":s", DimsKey(strides), ":d",
                        DimsKey(dilates), ":p", DimsKey(pad_l), ",", DimsKey(pad_r), ":b", has_bias,
                        dt == DT::bf16 ? ":bf16" : "");
  }
  memory::desc XDesc(Tag tag) const { return PlainDesc(x, tag, dt); }
  memory::desc YDesc(Tag tag) const { return PlainDesc(y, tag, dt); }
  memory::desc WDesc(Tag tag) const { return PlainDesc(w, tag, dt); }
  memory::desc WPlain() const { return PlainDesc(w, groups > 1 ? Tag::goihw : Tag::oihw, dt); }
  memory::desc BiasDesc() const {
    return has_bias ? PlainDesc({y[1]}, Tag::x, dt) : memory::desc();
  }
};

// Returns the geometry of a Conv2D node from its (forward) inputs, output and attributes:
// all float32, or all bfloat16.
absl::StatusOr<ConvGeometry> ConvGeometryOf(const std::string& op, const graph::Attrs& attrs,
                                            const std::vector<TensorView>& inputs,
                                            const TensorView& y) {
  RETURN_IF_ERROR(CheckCounts(op, inputs.size(), 2, 3, 1));
  const proto::DType dtype =
      inputs[0].dtype == proto::DTYPE_BFLOAT16 ? proto::DTYPE_BFLOAT16 : proto::DTYPE_FLOAT32;
  RETURN_IF_ERROR(CheckTensor(op, "input 'x'", inputs[0], 4, dtype));
  RETURN_IF_ERROR(CheckTensor(op, "input 'weight'", inputs[1], 4, dtype));
  if (inputs.size() == 3) RETURN_IF_ERROR(CheckTensor(op, "input 'bias'", inputs[2], 1, dtype));
  RETURN_IF_ERROR(CheckTensor(op, "output 'y'", y, 4, dtype));
  ConvGeometry g;
  g.dt = DataTypeOf(dtype);
  const graph::Shape& xs = inputs[0].shape;
  const graph::Shape& ws = inputs[1].shape;
  g.groups = attrs.Int("groups");
  g.has_bias = inputs.size() == 3;
  if (g.groups < 1 || xs[1] % g.groups != 0 || ws[0] % g.groups != 0 ||
      ws[1] * g.groups != xs[1]) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": x ", ShapeStr(xs), ", weight ",
                                                   ShapeStr(ws), " and groups ", g.groups,
                                                   " do not fit"));
  }
  g.x = {xs[0], xs[1], xs[2], xs[3]};
  g.y = {y.shape[0], y.shape[1], y.shape[2], y.shape[3]};
  if (g.groups > 1) {
    g.w = {g.groups, ws[0] / g.groups, ws[1], ws[2], ws[3]};
  } else {
    g.w = {ws[0], ws[1], ws[2], ws[3]};
  }
  const std::vector<int64_t> stride = attrs.Ints("stride");
  const std::vector<int64_t> dilation = attrs.Ints("dilation");
  std::vector<int64_t> pad = attrs.Ints("padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  if (stride.size() != 2 || dilation.size() != 2 || pad.size() != 4) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": stride, dilation, padding ",
                                                   "must have 2, 2 and 2 or 4 values"));
  }
  g.strides = {stride[0], stride[1]};
  g.dilates = {dilation[0] - 1, dilation[1] - 1};  // oneDNN counts the gaps.
  g.pad_l = {pad[0], pad[1]};
  g.pad_r = {pad[2], pad[3]};
  return g;
}

// The oneDNN convolution descriptor of `g`, layouts left to oneDNN.
dnnl::convolution_forward::desc ConvDesc(const ConvGeometry& g) {
  return {dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
          g.XDesc(Tag::any), g.WDesc(Tag::any), g.BiasDesc(), g.YDesc(Tag::any),
          g.strides, g.dilates, g.pad_l, g.pad_r};
}

struct ConvForwardPrims {
  ConvForwardPrims(const dnnl::engine& engine, const ConvGeometry& g)
      : pd(ConvDesc(g), UserScratchpad(), engine),
        src(engine, g.XDesc(Tag::nchw), pd.src_desc(), /*is_output=*/false, &layout),
        weights(engine, g.WPlain(), pd.weights_desc(), false, &layout),
        dst(engine, g.YDesc(Tag::nchw), pd.dst_desc(), /*is_output=*/true, &layout),
        bias(g.BiasDesc()) {
    layout.Scratchpad(pd);
  }

  dnnl::convolution_forward::primitive_desc pd;
  ScratchLayout layout;  // Before the staged arguments, which add to it.
  StagedArg src, weights, dst;
  memory::desc bias;
  std::optional<dnnl::convolution_forward> prim;
};

ConvForwardPrims& ConvForwardFor(CpuContext& ctx, const ConvGeometry& g) {
  return ctx.Cached<ConvForwardPrims>(absl::StrCat("Conv2D.fwd:", g.Key()), [&] {
    return std::make_shared<ConvForwardPrims>(ctx.engine, g);
  });
}

absl::StatusOr<uint64_t> ConvForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
      ConvGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  return ConvForwardFor(ctx, g).layout.bytes();
}

absl::Status ConvForward(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
      ConvGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  ConvForwardPrims& p = ConvForwardFor(ctx, g);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, p.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, p.layout);
  const TensorView& y = args.outputs[0];
  std::unordered_map<int, memory> exec_args = {
      {DNNL_ARG_SRC, p.src.Input(ctx.stream, scratch, args.inputs[0].data)},
      {DNNL_ARG_WEIGHTS, p.weights.Input(ctx.stream, scratch, args.inputs[1].data)},
      {DNNL_ARG_DST, p.dst.Output(scratch, y.data)}};
  if (g.has_bias) exec_args[DNNL_ARG_BIAS] = Mem(p.bias, ctx.engine, args.inputs[2].data);
  Execute(ctx.stream, p.prim, p.pd, scratch, exec_args);
  p.dst.Finish(ctx.stream, scratch, y.data);
  ctx.stream.wait();
  return absl::OkStatus();
}

// The oneDNN forward descriptor every backward primitive needs as a hint.
dnnl::convolution_forward::primitive_desc ConvHint(const dnnl::engine& engine,
                                                   const ConvGeometry& g) {
  return {ConvDesc(g), engine};
}

struct ConvBackwardDataPrims {
  ConvBackwardDataPrims(const dnnl::engine& engine, const ConvGeometry& g)
      : pd(dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct,
                                                 g.XDesc(Tag::any), g.WDesc(Tag::any),
                                                 g.YDesc(Tag::any), g.strides, g.dilates,
                                                 g.pad_l, g.pad_r),
           UserScratchpad(), engine, ConvHint(engine, g)),
        diff_dst(engine, g.YDesc(Tag::nchw), pd.diff_dst_desc(), false, &layout),
        weights(engine, g.WPlain(), pd.weights_desc(), false, &layout),
        diff_src(engine, g.XDesc(Tag::nchw), pd.diff_src_desc(), true, &layout) {
    layout.Scratchpad(pd);
  }

  dnnl::convolution_backward_data::primitive_desc pd;
  ScratchLayout layout;
  StagedArg diff_dst, weights, diff_src;
  std::optional<dnnl::convolution_backward_data> prim;
};

struct ConvBackwardWeightsPrims {
  ConvBackwardWeightsPrims(const dnnl::engine& engine, const ConvGeometry& g)
      : pd(dnnl::convolution_backward_weights::desc(dnnl::algorithm::convolution_direct,
                                                    g.XDesc(Tag::any), g.WDesc(Tag::any),
                                                    g.BiasDesc(), g.YDesc(Tag::any), g.strides,
                                                    g.dilates, g.pad_l, g.pad_r),
           UserScratchpad(), engine, ConvHint(engine, g)),
        src(engine, g.XDesc(Tag::nchw), pd.src_desc(), false, &layout),
        diff_dst(engine, g.YDesc(Tag::nchw), pd.diff_dst_desc(), false, &layout),
        diff_weights(engine, g.WPlain(), pd.diff_weights_desc(), true, &layout),
        bias(g.BiasDesc()),
        bias_offset(g.has_bias ? layout.Stage(bias.get_size()) : 0) {
    layout.Scratchpad(pd);
  }

  dnnl::convolution_backward_weights::primitive_desc pd;
  ScratchLayout layout;
  StagedArg src, diff_dst, diff_weights;
  memory::desc bias;
  uint64_t bias_offset;  // Where dbias goes when the bias needs no gradient.
  std::optional<dnnl::convolution_backward_weights> prim;
};

ConvBackwardDataPrims& ConvBackwardDataFor(CpuContext& ctx, const ConvGeometry& g) {
  return ctx.Cached<ConvBackwardDataPrims>(absl::StrCat("Conv2D.bwd_data:", g.Key()), [&] {
    return std::make_shared<ConvBackwardDataPrims>(ctx.engine, g);
  });
}

ConvBackwardWeightsPrims& ConvBackwardWeightsFor(CpuContext& ctx, const ConvGeometry& g) {
  return ctx.Cached<ConvBackwardWeightsPrims>(absl::StrCat("Conv2D.bwd_weights:", g.Key()), [&] {
    return std::make_shared<ConvBackwardWeightsPrims>(ctx.engine, g);
  });
}

// out[c] = sum of x[:, c, :, :] (x of NCHW dims `dims`, float32 or bfloat16 as uint16_t),
// accumulated in double: a convolution's dbias from dy (for when dweight, and so x, is not
// there), a synchronised batch norm's sum(x).
template <typename T>
void SumPerChannel(const memory::dims& dims, const T* x, T* out) {
  const int64_t n = dims[0], channels = dims[1], plane = dims[2] * dims[3];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* p = x + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) sum += Widen(p[j]);
    }
    Narrow(sum, &out[c]);
  }
}

// Returns the geometry of a Conv2D backward, checking its gradient counts.
absl::StatusOr<ConvGeometry> ConvBackwardGeometry(const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
      ConvGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  RETURN_IF_ERROR(CheckGradCounts(args));
  return g;
}

// Whether a backward's output gradient flows (else every input gradient is zero).
bool GradientFlows(const BackwardArgs& args) {
  return !args.output_grads.empty() && args.output_grads[0].present();
}

// The dx and dw phases run one after the other, so they share the scratch: it holds the
// larger of the two.
absl::StatusOr<uint64_t> ConvBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g, ConvBackwardGeometry(args));
  if (!GradientFlows(args)) return 0;
  uint64_t bytes = 0;
  if (args.input_grads[0].present()) bytes = ConvBackwardDataFor(ctx, g).layout.bytes();
  if (args.input_grads[1].present()) {
    bytes = std::max(bytes, ConvBackwardWeightsFor(ctx, g).layout.bytes());
  }
  return bytes;
}

absl::Status ConvBackward(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g, ConvBackwardGeometry(args));
  if (ZeroGradsIfNoFlow(args)) return absl::OkStatus();
  const void* dy = args.output_grads[0].data;
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const bool want_db = g.has_bias && args.input_grads[2].present();
  ASSIGN_OR_RETURN(const uint64_t scratch_bytes, ConvBackwardScratch(ctx, args));
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, scratch_bytes));

  // Step 1: dx = conv_transpose(dy, w).
  if (dx.present()) {
    ConvBackwardDataPrims& p = ConvBackwardDataFor(ctx, g);
    const ScratchSpace scratch(ctx.engine, base, p.layout);
    Execute(ctx.stream, p.prim, p.pd, scratch,
            {{DNNL_ARG_DIFF_DST, p.diff_dst.Input(ctx.stream, scratch, dy)},
             {DNNL_ARG_WEIGHTS, p.weights.Input(ctx.stream, scratch, args.inputs[1].data)},
             {DNNL_ARG_DIFF_SRC, p.diff_src.Output(scratch, dx.data)}});
    p.diff_src.Finish(ctx.stream, scratch, dx.data);
  }
  // Step 2: dw (and dbias, computed by the same primitive); dbias alone, without x, as a loop.
  if (!dw.present()) {
    if (want_db && g.dt == DT::bf16) {
      SumPerChannel(g.y, static_cast<const uint16_t*>(dy),
                    static_cast<uint16_t*>(args.input_grads[2].data));
    } else if (want_db) {
      SumPerChannel(g.y, static_cast<const float*>(dy), args.input_grads[2].f32());
    }
  } else {
    ConvBackwardWeightsPrims& p = ConvBackwardWeightsFor(ctx, g);
    const ScratchSpace scratch(ctx.engine, base, p.layout);
    std::unordered_map<int, memory> exec_args = {
        {DNNL_ARG_SRC, p.src.Input(ctx.stream, scratch, args.inputs[0].data)},
        {DNNL_ARG_DIFF_DST, p.diff_dst.Input(ctx.stream, scratch, dy)},
        {DNNL_ARG_DIFF_WEIGHTS, p.diff_weights.Output(scratch, dw.data)}};
    if (g.has_bias) {
      exec_args[DNNL_ARG_DIFF_BIAS] =
          Mem(p.bias, ctx.engine,
              want_db ? args.input_grads[2].data : scratch.At(p.bias_offset));
    }
    Execute(ctx.stream, p.prim, p.pd, scratch, exec_args);
    p.diff_weights.Finish(ctx.stream, scratch, dw.data);
  }
  ctx.stream.wait();
  return absl::OkStatus();
}

// ---- ConvTranspose2D ------------------------------------------------------------------------

// A transposed convolution is the data gradient of the convolution that maps its output's
// shape to its input's: y = conv_backward_data(x, w), dx = conv(dy, w) and dw =
// conv_backward_weights(dy, x), all with that convolution's geometry (its x is our y, its y
// our x; PyTorch's weight [C_in, C_out/groups, kh, kw] is that convolution's [O, I/groups,
// kh, kw]). Output padding extends the bottom and right: the convolution's right padding is
// pad_end - output_padding, negative where it exceeds the padding (as PyTorch's oneDNN path
// passes it). The bias is added (and its gradient summed) by a loop.
absl::StatusOr<ConvGeometry> ConvTransposeGeometryOf(const std::string& op,
                                                     const graph::Attrs& attrs,
                                                     const std::vector<TensorView>& inputs,
                                                     const TensorView& y) {
  RETURN_IF_ERROR(CheckCounts(op, inputs.size(), 2, 3, 1));
  RETURN_IF_ERROR(CheckTensor(op, "input 'x'", inputs[0], 4));
  RETURN_IF_ERROR(CheckTensor(op, "input 'weight'", inputs[1], 4));
  if (inputs.size() == 3) RETURN_IF_ERROR(CheckTensor(op, "input 'bias'", inputs[2], 1));
  RETURN_IF_ERROR(CheckTensor(op, "output 'y'", y, 4));
  ConvGeometry g;
  const graph::Shape& xs = inputs[0].shape;
  const graph::Shape& ws = inputs[1].shape;
  g.groups = attrs.Int("groups");
  if (g.groups < 1 || ws[0] != xs[1] || xs[1] % g.groups != 0 || ws[1] * g.groups != y.shape[1]) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": x ", ShapeStr(xs), ", weight ",
                                                   ShapeStr(ws), ", y ", ShapeStr(y.shape),
                                                   " and groups ", g.groups, " do not fit"));
  }
  g.x = {y.shape[0], y.shape[1], y.shape[2], y.shape[3]};
  g.y = {xs[0], xs[1], xs[2], xs[3]};
  if (g.groups > 1) {
    g.w = {g.groups, ws[0] / g.groups, ws[1], ws[2], ws[3]};
  } else {
    g.w = {ws[0], ws[1], ws[2], ws[3]};
  }
  const std::vector<int64_t> stride = attrs.Ints("stride");
  const std::vector<int64_t> dilation = attrs.Ints("dilation");
  const std::vector<int64_t> out_pad = attrs.Ints("output_padding");
  std::vector<int64_t> pad = attrs.Ints("padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  if (stride.size() != 2 || dilation.size() != 2 || pad.size() != 4 || out_pad.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": stride, dilation, ",
                                                   "output_padding, padding must have 2, 2, 2 ",
                                                   "and 2 or 4 values"));
  }
  if (out_pad[0] >= stride[0] || out_pad[1] >= stride[1]) {
    // oneDNN needs right padding above -stride; PyTorch allows output padding up to the
    // dilation, but then rows past the last window would need a convolution of their own.
    return absl::UnimplementedError(
        absl::StrCat("CPU ", op, ": output_padding [", absl::StrJoin(out_pad, ","),
                     "] not below the stride [", absl::StrJoin(stride, ","), "] is not supported"));
  }
  g.strides = {stride[0], stride[1]};
  g.dilates = {dilation[0] - 1, dilation[1] - 1};
  g.pad_l = {pad[0], pad[1]};
  g.pad_r = {pad[2] - out_pad[0], pad[3] - out_pad[1]};
  return g;
}

// y[n, c] += bias[c] over each plane of y (dims `y`).
void AddChannelBias(const memory::dims& y, const float* bias, float* out) {
  const int64_t planes = y[0] * y[1], channels = y[1], plane = y[2] * y[3];
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    const float b = bias[p % channels];
    float* row = out + p * plane;
    for (int64_t j = 0; j < plane; ++j) row[j] += b;
  }
}

absl::StatusOr<uint64_t> ConvTransposeForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
                   ConvTransposeGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  return ConvBackwardDataFor(ctx, g).layout.bytes();
}

absl::Status ConvTransposeForward(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
                   ConvTransposeGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  ConvBackwardDataPrims& p = ConvBackwardDataFor(ctx, g);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, p.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, p.layout);
  const TensorView& y = args.outputs[0];
  Execute(ctx.stream, p.prim, p.pd, scratch,
          {{DNNL_ARG_DIFF_DST, p.diff_dst.Input(ctx.stream, scratch, args.inputs[0].data)},
           {DNNL_ARG_WEIGHTS, p.weights.Input(ctx.stream, scratch, args.inputs[1].data)},
           {DNNL_ARG_DIFF_SRC, p.diff_src.Output(scratch, y.data)}});
  p.diff_src.Finish(ctx.stream, scratch, y.data);
  ctx.stream.wait();
  if (args.inputs.size() == 3) AddChannelBias(g.x, args.inputs[2].f32(), y.f32());
  return absl::OkStatus();
}

absl::StatusOr<ConvGeometry> ConvTransposeBackwardGeometry(const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g,
                   ConvTransposeGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  RETURN_IF_ERROR(CheckGradCounts(args));
  return g;
}

// The dx and dw phases run one after the other and share the scratch.
absl::StatusOr<uint64_t> ConvTransposeBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g, ConvTransposeBackwardGeometry(args));
  if (!GradientFlows(args)) return 0;
  uint64_t bytes = 0;
  if (args.input_grads[0].present()) bytes = ConvForwardFor(ctx, g).layout.bytes();
  if (args.input_grads[1].present()) {
    bytes = std::max(bytes, ConvBackwardWeightsFor(ctx, g).layout.bytes());
  }
  return bytes;
}

absl::Status ConvTransposeBackward(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const ConvGeometry g, ConvTransposeBackwardGeometry(args));
  if (ZeroGradsIfNoFlow(args)) return absl::OkStatus();
  const void* dy = args.output_grads[0].data;
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  ASSIGN_OR_RETURN(const uint64_t scratch_bytes, ConvTransposeBackwardScratch(ctx, args));
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, scratch_bytes));

  // Step 1: dx = conv(dy, w).
  if (dx.present()) {
    ConvForwardPrims& p = ConvForwardFor(ctx, g);
    const ScratchSpace scratch(ctx.engine, base, p.layout);
    Execute(ctx.stream, p.prim, p.pd, scratch,
            {{DNNL_ARG_SRC, p.src.Input(ctx.stream, scratch, dy)},
             {DNNL_ARG_WEIGHTS, p.weights.Input(ctx.stream, scratch, args.inputs[1].data)},
             {DNNL_ARG_DST, p.dst.Output(scratch, dx.data)}});
    p.dst.Finish(ctx.stream, scratch, dx.data);
  }
  // Step 2: dw = conv_backward_weights(dy, x): the convolution's input is our output.
  if (dw.present()) {
    ConvBackwardWeightsPrims& p = ConvBackwardWeightsFor(ctx, g);
    const ScratchSpace scratch(ctx.engine, base, p.layout);
    Execute(ctx.stream, p.prim, p.pd, scratch,
            {{DNNL_ARG_SRC, p.src.Input(ctx.stream, scratch, dy)},
             {DNNL_ARG_DIFF_DST, p.diff_dst.Input(ctx.stream, scratch, args.inputs[0].data)},
             {DNNL_ARG_DIFF_WEIGHTS, p.diff_weights.Output(scratch, dw.data)}});
    p.diff_weights.Finish(ctx.stream, scratch, dw.data);
  }
  ctx.stream.wait();
  // Step 3: dbias sums dy over N, H and W.
  if (args.input_grads.size() == 3 && args.input_grads[2].present()) {
    SumPerChannel(g.x, static_cast<const float*>(dy), args.input_grads[2].f32());
  }
  return absl::OkStatus();
}

// ---- BatchNorm ------------------------------------------------------------------------------

// Returns float32, or bfloat16 where `t` (a batch norm's or pool's x) is: the dtype its
// data tensors share. Per-channel tensors (weight, bias, statistics) are float32 always.
proto::DType DataDType(const TensorView& t) {
  return t.dtype == proto::DTYPE_BFLOAT16 ? proto::DTYPE_BFLOAT16 : proto::DTYPE_FLOAT32;
}

// x as oneDNN sees it: [N,C] becomes [N,C,1,1]. x is float32 or bfloat16.
absl::StatusOr<memory::dims> BatchNormDims(const std::string& op, const TensorView& x) {
  RETURN_IF_ERROR(CheckTensor(op, "input 'x'", x, -1, DataDType(x)));
  if (x.rank() == 2) return memory::dims{x.dim(0), x.dim(1), 1, 1};
  if (x.rank() == 4) return memory::dims{x.dim(0), x.dim(1), x.dim(2), x.dim(3)};
  return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": input 'x' ", ShapeStr(x.shape),
                                                 " needs 2 (N,C) or 4 (N,C,H,W) dims"));
}

absl::Status CheckChannels(const std::string& op, const char* what, const TensorView& t,
                           int64_t channels) {
  RETURN_IF_ERROR(CheckTensor(op, what, t, 1));
  if (t.dim(0) != channels) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": ", what, " ", ShapeStr(t.shape),
                                                   " needs [", channels, "]"));
  }
  return absl::OkStatus();
}

const dnnl::normalization_flags kScaleShift =
    dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;

// What the BatchNorm forward and backward primitives are built on: x's [N, C, H, W]
// descriptor (float32 or bfloat16 `dt`: oneDNN computes bfloat16 data in float32, with
// float32 scale, shift and statistics), a per-channel float32 one, and the layout of the
// node's scratch.
struct BatchNormDescs {
  BatchNormDescs(const memory::dims& dims, DT dt)
      : data(PlainDesc(dims, Tag::nchw, dt)), channel(PlainDesc({dims[1]}, Tag::x)) {}
  // Returns the offset of a new per-channel float buffer staged in the scratch.
  uint64_t StageChannel() { return layout.Stage(channel.get_size()); }

  memory::desc data, channel;
  ScratchLayout layout;
};

// Training computes the batch statistics, unless `given` (a re-forward normalising with the
// forward's); inference reads the running ones.
struct BatchNormForwardPrims : BatchNormDescs {
  BatchNormForwardPrims(const dnnl::engine& engine, const memory::dims& dims, DT dt, float epsilon,
                        bool training, bool given)
      : BatchNormDescs(dims, dt),
        pd(dnnl::batch_normalization_forward::desc(
               training ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference,
               data, epsilon,
               training && !given ? kScaleShift
                                  : kScaleShift | dnnl::normalization_flags::use_global_stats),
           UserScratchpad(), engine),
        mean_offset(StageChannel()),
        var_offset(StageChannel()) {
    layout.Scratchpad(pd);
  }

  dnnl::batch_normalization_forward::primitive_desc pd;
  // Batch statistics when there is nowhere to save them.
  uint64_t mean_offset, var_offset;
  std::optional<dnnl::batch_normalization_forward> prim;
};

// Returns InvalidArgument unless a BatchNorm forward's tensors fit x's channels `dims[1]`.
absl::Status CheckBatchNormForward(const ForwardArgs& args, const memory::dims& dims) {
  const std::string& op = args.op;
  const int64_t channels = dims[1];
  const char* names[] = {"input 'x'", "input 'weight'", "input 'bias'", "input 'running_mean'",
                         "input 'running_var'"};
  for (size_t i = 1; i < args.inputs.size(); ++i) {
    RETURN_IF_ERROR(CheckChannels(op, names[i], args.inputs[i], channels));
  }
  RETURN_IF_ERROR(CheckTensor(op, "output 'y'", args.outputs[0], -1, DataDType(args.inputs[0])));
  if (args.training && args.saved.size() >= 2) {
    RETURN_IF_ERROR(CheckChannels(op, "saved mean", args.saved[0], channels));
    RETURN_IF_ERROR(CheckChannels(op, "saved variance", args.saved[1], channels));
  }
  if (!args.training || args.running.empty()) return absl::OkStatus();
  if (args.running.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": got ", args.running.size(),
                                                   " running statistics, needs 2"));
  }
  for (const TensorView& r : args.running) {
    RETURN_IF_ERROR(CheckChannels(op, "running statistic", r, channels));
  }
  if (dims[0] * dims[2] * dims[3] < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", op, ": input 'x' ", ShapeStr(args.inputs[0].shape),
                     " has 1 value per channel; training needs more than 1 (as PyTorch)"));
  }
  return absl::OkStatus();
}

// PyTorch's running statistics: r = (1 - momentum) r + momentum batch_stat, where the running
// variance takes the unbiased batch variance (M / (M - 1) times the biased one).
void UpdateRunningStats(float momentum, int64_t per_channel, int64_t channels,
                        const float* batch_mean, const float* batch_var, float* running_mean,
                        float* running_var) {
  const float unbias = static_cast<float>(per_channel) / static_cast<float>(per_channel - 1);
  for (int64_t c = 0; c < channels; ++c) {
    running_mean[c] = (1 - momentum) * running_mean[c] + momentum * batch_mean[c];
    running_var[c] = (1 - momentum) * running_var[c] + momentum * batch_var[c] * unbias;
  }
}

// ---- BatchNorm synchronised across data-parallel ranks (--sync-batchnorm) ----
//
// The statistics are the global batch's: per channel, count and sum(x) are summed over the
// ranks (the global mean), then sum((x - mean)^2) (the global biased variance: two passes,
// as exact as one process's variance, where sum and sum of squares in one pass would
// cancel). Each rank accumulates its own part in double. The backward sums count, sum(dy)
// and sum(dy * xhat) over the ranks. Loops parallel over channels only: deterministic.

// Returns InvalidArgument unless a synchronised BatchNorm has its two saved statistics.
absl::Status CheckSyncSaved(const std::string& op, size_t saved) {
  if (saved >= 2) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("CPU ", op,
                   ": a batch norm synchronised across ranks needs its saved mean "
                   "and variance (got ",
                   saved, " saved tensors)"));
}

// Fills mean and var (biased) with the global batch's statistics of x [N, C, plane].
absl::Status GlobalBatchStatistics(const ForwardArgs& args, const memory::dims& dims, float* mean,
                                   float* var, double* count) {
  const int64_t n = dims[0], channels = dims[1], plane = dims[2] * dims[3];
  const float* x = args.inputs[0].f32();
  // Step 1: sum(x) per channel and this rank's count, summed over the ranks.
  std::vector<float> sums(channels + 1);
  SumPerChannel(dims, x, sums.data());
  sums[channels] = static_cast<float>(n * plane);
  RETURN_IF_ERROR(args.sync_statistics(sums.data(), sums.size(), "count and sum(x)"));
  *count = sums[channels];
  if (!(*count >= 2)) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": the global batch has ",
                                                   *count, " values per channel; needs 2"));
  }
  for (int64_t c = 0; c < channels; ++c) mean[c] = static_cast<float>(sums[c] / *count);
    // Step 2: sum((x - mean)^2) per channel, summed over the ranks.
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    double m2 = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* xp = x + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) {
        const double d = static_cast<double>(xp[j]) - mean[c];
        m2 += d * d;
      }
    }
    sums[c] = static_cast<float>(m2);
  }
  RETURN_IF_ERROR(args.sync_statistics(sums.data(), channels, "sum((x - mean)^2)"));
  for (int64_t c = 0; c < channels; ++c) var[c] = static_cast<float>(sums[c] / *count);
  return absl::OkStatus();
}

// The forward of a synchronised BatchNorm in training (or its re-forward with the
// statistics given): y = (x - mean) * weight / sqrt(var + epsilon) + bias.
absl::Status SyncBatchNormForward(const ForwardArgs& args, const memory::dims& dims) {
  RETURN_IF_ERROR(CheckSyncSaved(args.op, args.saved.size()));
  float* mean = args.saved[0].f32();
  float* var = args.saved[1].f32();
  if (!args.saved_statistics_given) {
    double count = 0;
    RETURN_IF_ERROR(GlobalBatchStatistics(args, dims, mean, var, &count));
    // The running statistics, once per step, with the unbiased variance over the global
    // count (as PyTorch's SyncBatchNorm and one process at the global batch).
    if (!args.running.empty()) {
      UpdateRunningStats(static_cast<float>(args.attrs->Float("momentum")),
                         static_cast<int64_t>(std::llround(count)), dims[1], mean, var,
                         args.running[0].f32(), args.running[1].f32());
    }
  }
  const double epsilon = static_cast<float>(args.attrs->Float("epsilon"));
  const int64_t n = dims[0], channels = dims[1], plane = dims[2] * dims[3];
  const float* x = args.inputs[0].f32();
  const float* weight = args.inputs[1].f32();
  const float* bias = args.inputs[2].f32();
  float* y = args.outputs[0].f32();  // may be x: each element is read before it is written
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    const float scale =
        static_cast<float>(weight[c] / std::sqrt(static_cast<double>(var[c]) + epsilon));
    for (int64_t i = 0; i < n; ++i) {
      const float* xp = x + (i * channels + c) * plane;
      float* yp = y + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) yp[j] = (xp[j] - mean[c]) * scale + bias[c];
    }
  }
  return absl::OkStatus();
}

// The backward of a synchronised BatchNorm where dx is computed: dweight and dbias are this
// rank's sums; dx = weight / sqrt(var + epsilon) * (dy - mean(dy) - xhat * mean(dy * xhat)),
// the means over the global batch.
absl::Status SyncBatchNormBackward(const BackwardArgs& args, const memory::dims& dims,
                                   float epsilon) {
  const int64_t n = dims[0], channels = dims[1], plane = dims[2] * dims[3];
  if (!args.inputs[1].present()) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": dx needs input 'weight'"));
  }
  const float* x = args.inputs[0].f32();
  const float* weight = args.inputs[1].f32();
  const float* mean = args.saved[0].f32();
  const float* var = args.saved[1].f32();
  const float* dy = args.output_grads[0].f32();
  float* dweight = args.input_grads[1].present() ? args.input_grads[1].f32() : nullptr;
  float* dbias = args.input_grads[2].present() ? args.input_grads[2].f32() : nullptr;
  // Step 1: this rank's sum(dy) and sum(dy * xhat) per channel, and its count.
  std::vector<float> sums(2 * channels + 1);
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[c]) + epsilon);
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float* xp = x + (i * channels + c) * plane;
      const float* dyp = dy + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) {
        sum_dy += dyp[j];
        sum_dy_xhat += static_cast<double>(dyp[j]) * (xp[j] - mean[c]);
      }
    }
    sum_dy_xhat *= inv_std;
    sums[c] = static_cast<float>(sum_dy);
    sums[channels + c] = static_cast<float>(sum_dy_xhat);
    if (dweight != nullptr) dweight[c] = static_cast<float>(sum_dy_xhat);
    if (dbias != nullptr) dbias[c] = static_cast<float>(sum_dy);
  }
  sums[2 * channels] = static_cast<float>(n * plane);
  // Step 2: summed over the ranks.
  RETURN_IF_ERROR(args.sync_statistics(sums.data(), sums.size(), "sum(dy) and sum(dy * xhat)"));
  const double count = sums[2 * channels];
  // Step 3: dx (dy may alias dx: each element is read before it is written).
  float* dx = args.input_grads[0].f32();
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[c]) + epsilon);
    const float mean_dy = static_cast<float>(sums[c] / count);
    const float mean_dy_xhat = static_cast<float>(sums[channels + c] / count);
    const float k = static_cast<float>(weight[c] * inv_std);
    const float m = mean[c], s = static_cast<float>(inv_std);
    for (int64_t i = 0; i < n; ++i) {
      const float* xp = x + (i * channels + c) * plane;
      const float* dyp = dy + (i * channels + c) * plane;
      float* dxp = dx + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) {
        const float xhat = (xp[j] - m) * s;
        dxp[j] = k * (dyp[j] - mean_dy - xhat * mean_dy_xhat);
      }
    }
  }
  return absl::OkStatus();
}

// Returns the dims of a BatchNorm forward's x after checking its tensors.
absl::StatusOr<memory::dims> BatchNormForwardDims(const ForwardArgs& args) {
  // Training reads x, weight and bias; inference also the running statistics (inputs 3, 4).
  RETURN_IF_ERROR(CheckCounts(args.op, args.inputs.size(), args.training ? 3 : 5, 5,
                              args.outputs.size()));
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormDims(args.op, args.inputs[0]));
  RETURN_IF_ERROR(CheckBatchNormForward(args, dims));
  return dims;
}

BatchNormForwardPrims& BatchNormForwardFor(CpuContext& ctx, const ForwardArgs& args,
                                           const memory::dims& dims, bool given) {
  const float epsilon = static_cast<float>(args.attrs->Float("epsilon"));
  const DT dt = DataTypeOf(args.inputs[0].dtype);
  return ctx.Cached<BatchNormForwardPrims>(
      absl::StrCat("BatchNorm.fwd:", DimsKey(dims), ":e", epsilon, ":t", args.training, ":g", given,
                   ":dt", static_cast<int>(dt)),
      [&] {
        return std::make_shared<BatchNormForwardPrims>(ctx.engine, dims, dt, epsilon, args.training,
                                                       given);
      });
}

// In training, the larger of the forward's and its re-forward's with the statistics given:
// a reversible block's rebuild runs in the forward's planned scratch size.
absl::StatusOr<uint64_t> BatchNormForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormForwardDims(args));
  const uint64_t bytes = BatchNormForwardFor(ctx, args, dims, false).layout.bytes();
  if (!args.training) return bytes;
  return std::max(bytes, BatchNormForwardFor(ctx, args, dims, true).layout.bytes());
}

absl::Status BatchNormForward(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormForwardDims(args));
  if (args.training && args.sync_statistics) return SyncBatchNormForward(args, dims);
  const bool given = args.training && args.saved_statistics_given;
  if (given && args.saved.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("CPU ", args.op, ": statistics given but ", args.saved.size(),
                     " saved tensors; needs the saved mean and variance"));
  }
  BatchNormForwardPrims& p = BatchNormForwardFor(ctx, args, dims, given);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, p.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, p.layout);

  // Step 1: where the statistics come from (inference, given) or go (training).
  memory mean = Mem(p.channel, ctx.engine, scratch.At(p.mean_offset));
  memory var = Mem(p.channel, ctx.engine, scratch.At(p.var_offset));
  if (args.training && args.saved.size() >= 2) {
    mean = Mem(p.channel, ctx.engine, args.saved[0].data);
    var = Mem(p.channel, ctx.engine, args.saved[1].data);
  } else if (!args.training) {
    mean = Mem(p.channel, ctx.engine, args.inputs[3].data);
    var = Mem(p.channel, ctx.engine, args.inputs[4].data);
  }
  // Step 2: normalise; src may equal dst (oneDNN's batch normalization runs in place).
  Execute(ctx.stream, p.prim, p.pd, scratch,
          {{DNNL_ARG_SRC, Mem(p.data, ctx.engine, args.inputs[0].data)},
           {DNNL_ARG_DST, Mem(p.data, ctx.engine, args.outputs[0].data)},
           {DNNL_ARG_SCALE, Mem(p.channel, ctx.engine, args.inputs[1].data)},
           {DNNL_ARG_SHIFT, Mem(p.channel, ctx.engine, args.inputs[2].data)},
           {DNNL_ARG_MEAN, mean},
           {DNNL_ARG_VARIANCE, var}});
  ctx.stream.wait();
  // Step 3: the running statistics, once per step (never in a re-forward).
  if (args.training && !given && !args.running.empty()) {
    UpdateRunningStats(static_cast<float>(args.attrs->Float("momentum")),
                       dims[0] * dims[2] * dims[3], dims[1],
                       static_cast<const float*>(mean.get_data_handle()),
                       static_cast<const float*>(var.get_data_handle()), args.running[0].f32(),
                       args.running[1].f32());
  }
  return absl::OkStatus();
}

struct BatchNormBackwardPrims : BatchNormDescs {
  BatchNormBackwardPrims(const dnnl::engine& engine, const memory::dims& dims, DT dt, float epsilon)
      : BatchNormDescs(dims, dt),
        pd(dnnl::batch_normalization_backward::desc(dnnl::prop_kind::backward, data, data, epsilon,
                                                    kScaleShift),
           UserScratchpad(), engine,
           dnnl::batch_normalization_forward::primitive_desc(
               dnnl::batch_normalization_forward::desc(dnnl::prop_kind::forward_training, data,
                                                       epsilon, kScaleShift),
               engine)),
        diff_scale_offset(StageChannel()),
        diff_shift_offset(StageChannel()),
        unused_shift_offset(StageChannel()) {
    layout.Scratchpad(pd);
  }

  dnnl::batch_normalization_backward::primitive_desc pd;
  // For parameters that need no gradient.
  uint64_t diff_scale_offset, diff_shift_offset;
  // oneDNN 2.6's backward lists the shift among its arguments but never reads it (the
  // gradient does not depend on the bias, which the backward is not given); zeroed anyway.
  uint64_t unused_shift_offset;
  std::optional<dnnl::batch_normalization_backward> prim;
};

// dweight and dbias alone (no dx, so no weight): per channel, sums over N, H, W in double;
// x and dy float32 or bfloat16 (T float or uint16_t).
template <typename T>
void BatchNormParamGrads(const memory::dims& dims, float epsilon, const T* x, const T* dy,
                         const float* mean, const float* var, float* dweight, float* dbias) {
  const int64_t n = dims[0], channels = dims[1], plane = dims[2] * dims[3];
#pragma omp parallel for schedule(static)
  for (int64_t c = 0; c < channels; ++c) {
    double sum_dy = 0, sum_dy_xhat = 0;
    for (int64_t i = 0; i < n; ++i) {
      const T* xp = x + (i * channels + c) * plane;
      const T* dyp = dy + (i * channels + c) * plane;
      for (int64_t j = 0; j < plane; ++j) {
        sum_dy += Widen(dyp[j]);
        sum_dy_xhat += static_cast<double>(Widen(dyp[j])) * (Widen(xp[j]) - mean[c]);
      }
    }
    const double inv_std = 1.0 / std::sqrt(static_cast<double>(var[c]) + epsilon);
    if (dweight != nullptr) dweight[c] = static_cast<float>(sum_dy_xhat * inv_std);
    if (dbias != nullptr) dbias[c] = static_cast<float>(sum_dy);
  }
}

// Returns the dims of a BatchNorm backward's x after checking its tensors.
absl::StatusOr<memory::dims> BatchNormBackwardDims(const BackwardArgs& args) {
  const std::string& op = args.op;
  if (args.inputs.size() < 3 || args.input_grads.size() != args.inputs.size() ||
      args.saved.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": backward got ",
                                                   args.inputs.size(), " inputs, ",
                                                   args.input_grads.size(), " input gradients, ",
                                                   args.saved.size(), " saved; needs 3, 3, 2"));
  }
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormDims(op, args.inputs[0]));
  for (const TensorView& s : args.saved) {
    RETURN_IF_ERROR(CheckChannels(op, "saved statistic", s, dims[1]));
  }
  return dims;
}

BatchNormBackwardPrims& BatchNormBackwardFor(CpuContext& ctx, const memory::dims& dims, DT dt,
                                             float epsilon) {
  return ctx.Cached<BatchNormBackwardPrims>(
      absl::StrCat("BatchNorm.bwd:", DimsKey(dims), ":e", epsilon, ":dt", static_cast<int>(dt)),
      [&] { return std::make_shared<BatchNormBackwardPrims>(ctx.engine, dims, dt, epsilon); });
}

// Only dx needs oneDNN's primitive (and scratch); dweight and dbias alone are a loop.
absl::StatusOr<uint64_t> BatchNormBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormBackwardDims(args));
  if (!GradientFlows(args) || !args.input_grads[0].present()) return 0;
  const float epsilon = static_cast<float>(args.attrs->Float("epsilon"));
  return BatchNormBackwardFor(ctx, dims, DataTypeOf(args.inputs[0].dtype), epsilon).layout.bytes();
}

absl::Status BatchNormBackward(CpuContext& ctx, const BackwardArgs& args) {
  const std::string& op = args.op;
  ASSIGN_OR_RETURN(const memory::dims dims, BatchNormBackwardDims(args));
  if (ZeroGradsIfNoFlow(args)) return absl::OkStatus();
  const float epsilon = static_cast<float>(args.attrs->Float("epsilon"));
  const TensorView& dx = args.input_grads[0];
  const TensorView& dweight = args.input_grads[1];
  const TensorView& dbias = args.input_grads[2];
  const proto::DType dtype = DataDType(args.inputs[0]);
  const TensorView& dyv = args.output_grads[0];
  RETURN_IF_ERROR(CheckTensor(op, "gradient of output 'y'", dyv, -1, dtype));
  if (dx.present()) RETURN_IF_ERROR(CheckTensor(op, "gradient of input 'x'", dx, -1, dtype));
  const void* dy = dyv.data;

  if (!dx.present()) {
    if (dtype == proto::DTYPE_BFLOAT16) {
      BatchNormParamGrads(dims, epsilon, static_cast<const uint16_t*>(args.inputs[0].data),
                          static_cast<const uint16_t*>(dy), args.saved[0].f32(),
                          args.saved[1].f32(), dweight.f32(), dbias.f32());
    } else {
      BatchNormParamGrads(dims, epsilon, args.inputs[0].f32(), static_cast<const float*>(dy),
                          args.saved[0].f32(), args.saved[1].f32(), dweight.f32(), dbias.f32());
    }
    return absl::OkStatus();
  }
  if (args.sync_statistics) return SyncBatchNormBackward(args, dims, epsilon);
  if (!args.inputs[1].present()) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": dx needs input 'weight'"));
  }
  BatchNormBackwardPrims& p = BatchNormBackwardFor(ctx, dims, DataTypeOf(dtype), epsilon);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, p.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, p.layout);
  std::memset(scratch.At(p.unused_shift_offset), 0, p.channel.get_size());
  auto channel = [&](const TensorView& t, uint64_t fallback) {
    return Mem(p.channel, ctx.engine, t.present() ? t.data : scratch.At(fallback));
  };
  Execute(ctx.stream, p.prim, p.pd, scratch,
          {{DNNL_ARG_SRC, Mem(p.data, ctx.engine, args.inputs[0].data)},
           {DNNL_ARG_MEAN, Mem(p.channel, ctx.engine, args.saved[0].data)},
           {DNNL_ARG_VARIANCE, Mem(p.channel, ctx.engine, args.saved[1].data)},
           {DNNL_ARG_DIFF_DST, Mem(p.data, ctx.engine, dy)},
           {DNNL_ARG_SCALE, Mem(p.channel, ctx.engine, args.inputs[1].data)},
           {DNNL_ARG_SHIFT, Mem(p.channel, ctx.engine, scratch.At(p.unused_shift_offset))},
           {DNNL_ARG_DIFF_SRC, Mem(p.data, ctx.engine, dx.data)},
           {DNNL_ARG_DIFF_SCALE, channel(dweight, p.diff_scale_offset)},
           {DNNL_ARG_DIFF_SHIFT, channel(dbias, p.diff_shift_offset)}});
  ctx.stream.wait();
  return absl::OkStatus();
}

// ---- MatMul ---------------------------------------------------------------------------------

// One operand of a (batched) matrix product: a [batch, rows, cols] view with strides in
// elements, of float32 or bfloat16 elements. batch 1 broadcasts against the other operand's
// batch.
struct MatView {
  const void* data = nullptr;
  int64_t batch = 1, rows = 0, cols = 0;
  int64_t batch_stride = 0, row_stride = 0, col_stride = 1;
  DT dt = DT::f32;

  // Returns a row-major [batch, rows, cols] view of `data`.
  static MatView Plain(const void* data, int64_t batch, int64_t rows, int64_t cols,
                       DT dt = DT::f32) {
    return {data, batch, rows, cols, rows * cols, cols, 1, dt};
  }
  // Returns the same data seen as [batch, cols, rows].
  MatView T() const { return {data, batch, cols, rows, batch_stride, col_stride, row_stride, dt}; }
  memory::desc Desc() const {
    return memory::desc({batch, rows, cols}, dt,
                        memory::dims{batch_stride, row_stride, col_stride});
  }
  std::string Key() const {
    return absl::StrCat(batch, "x", rows, "x", cols, "/", batch_stride, ",", row_stride, ",",
                        col_stride, dt == DT::bf16 ? ":bf16" : "");
  }
};

// Returns `data` advanced by `elements` elements of type `dt`.
const void* Advance(const void* data, int64_t elements, DT dt) {
  return static_cast<const char*>(data) + elements * (dt == DT::bf16 ? 2 : 4);
}

struct MatMulPrims {
  MatMulPrims(const dnnl::engine& engine, const memory::desc& a, const memory::desc& b,
              const memory::desc& bias, const memory::desc& c)
      : pd(dnnl::matmul::desc(a, b, bias, c), UserScratchpad(), engine) {}
  dnnl::matmul::primitive_desc pd;
  std::optional<dnnl::matmul> prim;
};

// One product c[batch, a.rows, b.cols] (row-major) = a x b (+ bias[b.cols] on every row).
// Its primitive depends on the operands' shapes and strides, not their data.
struct GemmCall {
  MatView a, b;
  bool bias = false;

  // c and the bias have the operands' dtype (bfloat16 products accumulate in float32).
  MatView Out(void* c) const {
    return MatView::Plain(c, std::max(a.batch, b.batch), a.rows, b.cols, a.dt);
  }
  memory::desc BiasDesc() const {
    return bias ? PlainDesc({1, 1, b.cols}, Tag::abc, a.dt) : memory::desc();
  }
};

MatMulPrims& GemmFor(CpuContext& ctx, const GemmCall& call) {
  CHECK(call.a.cols == call.b.rows &&
        (call.a.batch == call.b.batch || call.a.batch == 1 || call.b.batch == 1))
      << call.a.Key() << " x " << call.b.Key();
  return ctx.Cached<MatMulPrims>(
      absl::StrCat("MatMul.gemm:", call.a.Key(), ":", call.b.Key(), ":", call.bias), [&] {
        return std::make_shared<MatMulPrims>(ctx.engine, call.a.Desc(), call.b.Desc(),
                                             call.BiasDesc(), call.Out(nullptr).Desc());
      });
}

// Runs `call`, writing c, with its scratchpad in `scratch`.
void Gemm(CpuContext& ctx, const GemmCall& call, const void* bias, void* c,
          const ScratchSpace& scratch) {
  MatMulPrims& p = GemmFor(ctx, call);
  std::unordered_map<int, memory> exec_args = {
      {DNNL_ARG_SRC, Mem(call.a.Desc(), ctx.engine, call.a.data)},
      {DNNL_ARG_WEIGHTS, Mem(call.b.Desc(), ctx.engine, call.b.data)},
      {DNNL_ARG_DST, Mem(call.Out(c).Desc(), ctx.engine, c)}};
  if (call.bias) exec_args[DNNL_ARG_BIAS] = Mem(call.BiasDesc(), ctx.engine, bias);
  Execute(ctx.stream, p.prim, p.pd, scratch, exec_args);
  ctx.stream.wait();
}

// The shapes of one MatMul in the two layouts the kernels support.
struct MatMulGeometry {
  bool ta = false, tb = false;
  // a is [batch, ...] with batch = prod(a's leading dims); b is [b_batch, ...] with b_batch
  // either batch (identical batch dims) or 1 (b is 2-D, or its batch dims are all 1).
  int64_t batch = 1, b_batch = 1;
  int64_t m = 0, k = 0, n = 0;
  // Of a, b, bias and y alike (and their gradients).
  DT dt = DT::f32;

  // a as the logical [batch, M, K] operand.
  MatView A(const void* a) const {
    return ta ? MatView::Plain(a, batch, k, m, dt).T() : MatView::Plain(a, batch, m, k, dt);
  }
  // b as the logical [b_batch, K, N] operand.
  MatView B(const void* b) const {
    return tb ? MatView::Plain(b, b_batch, n, k, dt).T() : MatView::Plain(b, b_batch, k, n, dt);
  }
  // a's rows may be stacked into one [batch*M, K] matrix when b is shared and a not transposed.
  bool Collapsible() const { return b_batch == 1 && !ta; }

  // Any other broadcast of batch dims ([B,1,M,K] x [1,H,K,N], [M,K] x [B,K,N]): one product
  // per output matrix, pairing a's and b's matrices as numpy does (a_batch_count and
  // b_batch_count matrices each).
  std::optional<MatMulBatches> pairs;
  int64_t a_batch_count = 1, b_batch_count = 1;

  // Returns the number of output matrices.
  int64_t out_batch() const { return pairs.has_value() ? pairs->size() : batch; }
  // a's matrix i as a logical [1, M, K] operand.
  MatView AOne(const void* a, int64_t i) const {
    const void* at = Advance(a, i * m * k, dt);
    return ta ? MatView::Plain(at, 1, k, m, dt).T() : MatView::Plain(at, 1, m, k, dt);
  }
  // b's matrix i as a logical [1, K, N] operand.
  MatView BOne(const void* b, int64_t i) const {
    const void* at = Advance(b, i * k * n, dt);
    return tb ? MatView::Plain(at, 1, n, k, dt).T() : MatView::Plain(at, 1, k, n, dt);
  }
};

absl::StatusOr<MatMulGeometry> MatMulGeometryOf(const std::string& op, const graph::Attrs& attrs,
                                                const std::vector<TensorView>& inputs,
                                                const TensorView& y) {
  RETURN_IF_ERROR(CheckCounts(op, inputs.size(), 2, 3, 1));
  const TensorView& a = inputs[0];
  const TensorView& b = inputs[1];
  // All float32, or all bfloat16.
  const proto::DType dtype =
      a.dtype == proto::DTYPE_BFLOAT16 ? proto::DTYPE_BFLOAT16 : proto::DTYPE_FLOAT32;
  RETURN_IF_ERROR(CheckTensor(op, "input 'a'", a, -1, dtype));
  RETURN_IF_ERROR(CheckTensor(op, "input 'b'", b, -1, dtype));
  RETURN_IF_ERROR(CheckTensor(op, "output 'y'", y, -1, dtype));
  if (inputs.size() == 3) RETURN_IF_ERROR(CheckTensor(op, "input 'bias'", inputs[2], 1, dtype));
  if (a.rank() < 2 || b.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": a ", ShapeStr(a.shape), " and b ",
                                                   ShapeStr(b.shape), " need at least 2 dims"));
  }
  MatMulGeometry g;
  g.dt = DataTypeOf(dtype);
  g.ta = attrs.Bool("transpose_a");
  g.tb = attrs.Bool("transpose_b");
  g.m = g.ta ? a.dim(-1) : a.dim(-2);
  g.k = g.ta ? a.dim(-2) : a.dim(-1);
  const int64_t kb = g.tb ? b.dim(-1) : b.dim(-2);
  g.n = g.tb ? b.dim(-2) : b.dim(-1);
  if (g.k != kb) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": a ", ShapeStr(a.shape), " and b ",
                                                   ShapeStr(b.shape), " have inner dims ", g.k,
                                                   " and ", kb));
  }
  const graph::Shape a_batch(a.shape.begin(), a.shape.end() - 2);
  const graph::Shape b_batch(b.shape.begin(), b.shape.end() - 2);
  for (int64_t d : a_batch) g.batch *= d;
  const bool b_one_matrix = std::all_of(b_batch.begin(), b_batch.end(),
                                        [](int64_t d) { return d == 1; });
  graph::Shape out = a_batch;
  if (b_one_matrix) {
    // b is 2-D, or [1, ..., 1, K, N]: one matrix for every batch of a. Its extra unit batch
    // dims, if it has more than a, lead the output.
    g.b_batch = 1;
    if (b_batch.size() > a_batch.size()) {
      out.insert(out.begin(), b_batch.size() - a_batch.size(), 1);
    }
  } else if (b_batch == a_batch) {
    g.b_batch = g.batch;
  } else {
    absl::StatusOr<MatMulBatches> pairs = BroadcastMatMulBatches(a_batch, b_batch);
    if (!pairs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": a ", ShapeStr(a.shape), " x b ",
                                                     ShapeStr(b.shape), ": ",
                                                     pairs.status().message()));
    }
    g.a_batch_count = g.batch;
    for (int64_t d : b_batch) g.b_batch_count *= d;
    out = pairs->dims;
    g.pairs = *std::move(pairs);
  }
  out.push_back(g.m);
  out.push_back(g.n);
  if (y.shape != out) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": output ", ShapeStr(y.shape),
                                                   " should be ", ShapeStr(out)));
  }
  if (inputs.size() == 3 && inputs[2].dim(0) != g.n) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": bias ",
                                                   ShapeStr(inputs[2].shape), " needs [", g.n,
                                                   "]"));
  }
  return g;
}

// The product of a MatMul forward.
GemmCall MatMulForwardCall(const MatMulGeometry& g, const ForwardArgs& args) {
  MatView a = g.A(args.inputs[0].data);
  if (g.Collapsible()) a = MatView::Plain(a.data, 1, g.batch * g.m, g.k, g.dt);
  return {a, g.B(args.inputs[1].data), args.inputs.size() == 3};
}

// The product of one output matrix of a broadcast MatMul forward (the same primitive for
// every i).
GemmCall BroadcastForwardCall(const MatMulGeometry& g, const ForwardArgs& args, int64_t i) {
  return {g.AOne(args.inputs[0].data, g.pairs->a_of[i]),
          g.BOne(args.inputs[1].data, g.pairs->b_of[i]), args.inputs.size() == 3};
}

absl::StatusOr<uint64_t> MatMulForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const MatMulGeometry g,
      MatMulGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  ScratchLayout layout;
  layout.Scratchpad(
      GemmFor(ctx, g.pairs ? BroadcastForwardCall(g, args, 0) : MatMulForwardCall(g, args)).pd);
  return layout.bytes();
}

absl::Status MatMulForward(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const MatMulGeometry g,
      MatMulGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  if (g.pairs) {
    // One product per output matrix, in order.
    ScratchLayout layout;
    layout.Scratchpad(GemmFor(ctx, BroadcastForwardCall(g, args, 0)).pd);
    ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, layout.bytes()));
    const ScratchSpace scratch(ctx.engine, base, layout);
    const void* bias = args.inputs.size() == 3 ? args.inputs[2].data : nullptr;
    for (int64_t i = 0; i < g.pairs->size(); ++i) {
      Gemm(ctx, BroadcastForwardCall(g, args, i), bias,
           const_cast<void*>(Advance(args.outputs[0].data, i * g.m * g.n, g.dt)), scratch);
    }
    return absl::OkStatus();
  }
  const GemmCall call = MatMulForwardCall(g, args);
  ScratchLayout layout;
  layout.Scratchpad(GemmFor(ctx, call).pd);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, layout.bytes()));
  const void* bias = call.bias ? args.inputs[2].data : nullptr;
  Gemm(ctx, call, bias, args.outputs[0].data, ScratchSpace(ctx.engine, base, layout));
  return absl::OkStatus();
}

// Writes a row-major copy of the [batch, rows, cols] view `v` to `out`. REQUIRES: float32
// (bfloat16 MatMuls that need it are staged: MatMulTakesBf16).
void Densify(const MatView& v, float* out) {
  CHECK(v.dt == DT::f32);
  const float* data = static_cast<const float*>(v.data);
  const int64_t total_rows = v.batch * v.rows;
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < total_rows; ++r) {
    const float* src = data + (r / v.rows) * v.batch_stride + (r % v.rows) * v.row_stride;
    for (int64_t c = 0; c < v.cols; ++c) out[r * v.cols + c] = src[c * v.col_stride];
  }
}

// out[c] = sum over rows of m[rows, cols] (row-major, float32 or bfloat16 as uint16_t), in
// a fixed order.
template <typename T>
void SumRows(const T* m, int64_t rows, int64_t cols, T* out) {
  constexpr int64_t kChunk = 64;
  const int64_t chunks = (cols + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static)
  for (int64_t chunk = 0; chunk < chunks; ++chunk) {
    const int64_t begin = chunk * kChunk, end = std::min(cols, begin + kChunk);
    double acc[kChunk] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = m + r * cols;
      for (int64_t c = begin; c < end; ++c) acc[c - begin] += Widen(row[c]);
    }
    for (int64_t c = begin; c < end; ++c) Narrow(acc[c - begin], &out[c]);
  }
}

// The products of a MatMul backward and their scratch: a row-major copy of a transposed a
// (when db sums over a's batch) staged before the region the products' scratchpads share.
struct MatMulBackwardPlan {
  // da = dy b^T, or (transpose_a) da^T = b dy^T; written row-major either way.
  std::optional<GemmCall> da;
  // db = a^T dy, or (transpose_b) db^T = dy^T a; summed over a's batch when b is 2-D.
  std::optional<GemmCall> db;
  // a's view to copy row-major first, whose copy db's a-operand then reads.
  std::optional<MatView> densify;
  uint64_t densify_offset = 0;
  ScratchLayout layout;
};

absl::StatusOr<MatMulGeometry> MatMulBackwardGeometry(const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const MatMulGeometry g,
      MatMulGeometryOf(args.op, *args.attrs, args.inputs, args.outputs.at(0)));
  RETURN_IF_ERROR(CheckGradCounts(args));
  return g;
}

MatMulBackwardPlan PlanMatMulBackward(CpuContext& ctx, const MatMulGeometry& g,
                                      const BackwardArgs& args) {
  MatMulBackwardPlan plan;
  const void* dy = args.output_grads[0].data;
  // dy as [batch, M, N]; with a shared 2-D b also stacked as [1, batch*M, N].
  const MatView dy_v = MatView::Plain(dy, g.batch, g.m, g.n, g.dt);
  const MatView dy_stacked = MatView::Plain(dy, 1, g.batch * g.m, g.n, g.dt);
  if (args.input_grads[0].present()) {
    const MatView b = g.B(args.inputs[1].data);
    if (g.ta) {
      plan.da = GemmCall{b, dy_v.T()};  // [K,N] x [N,M] per batch.
    } else if (g.Collapsible()) {
      plan.da = GemmCall{dy_stacked, b.T()};
    } else {
      plan.da = GemmCall{dy_v, b.T()};
    }
  }
  if (args.input_grads[1].present()) {
    MatView a = g.A(args.inputs[0].data);
    MatView dy_for_b = dy_v;
    if (g.b_batch == 1 && g.batch > 1) {
      // Sum over a's batch by folding it into the inner dimension, which needs a's logical
      // [M,K] rows contiguous: a transposed a is copied first.
      if (g.ta) {
        plan.densify = a;
        plan.densify_offset = plan.layout.Stage(a.batch * a.rows * a.cols * sizeof(float));
      }
      a = MatView::Plain(a.data, 1, g.batch * g.m, g.k, g.dt);
      dy_for_b = dy_stacked;
    }
    plan.db = g.tb ? GemmCall{dy_for_b.T(), a} : GemmCall{a.T(), dy_for_b};
  }
  for (const std::optional<GemmCall>* call : {&plan.da, &plan.db}) {
    if (call->has_value()) plan.layout.Scratchpad(GemmFor(ctx, **call).pd);
  }
  return plan;
}

// The backward of a broadcast MatMul: for each output matrix i, da's matrix a_of[i] gets
// dy_i b_{b_of[i]}^T (transpose_a: b dy_i^T) and db's matrix b_of[i] gets a_{a_of[i]}^T dy_i
// (transpose_b: dy_i^T a), each product staged in scratch and summed into its matrix in the
// order of i, as PyTorch sums the gradient of an expanded operand over its broadcast dims.
struct BroadcastBackwardPlan {
  uint64_t product_offset = 0;  // One staged product matrix (the larger of da's and db's).
  ScratchLayout layout;
};

// Returns the da product for output matrix i, written row-major as a's matrix is stored.
GemmCall BroadcastDaCall(const MatMulGeometry& g, const BackwardArgs& args, int64_t i) {
  const MatView dy = MatView::Plain(args.output_grads[0].f32() + i * g.m * g.n, 1, g.m, g.n);
  const MatView b = g.BOne(args.inputs[1].f32(), g.pairs->b_of[i]);
  return g.ta ? GemmCall{b, dy.T()} : GemmCall{dy, b.T()};
}

// Returns the db product for output matrix i, written row-major as b's matrix is stored.
GemmCall BroadcastDbCall(const MatMulGeometry& g, const BackwardArgs& args, int64_t i) {
  const MatView dy = MatView::Plain(args.output_grads[0].f32() + i * g.m * g.n, 1, g.m, g.n);
  const MatView a = g.AOne(args.inputs[0].f32(), g.pairs->a_of[i]);
  return g.tb ? GemmCall{dy.T(), a} : GemmCall{a.T(), dy};
}

BroadcastBackwardPlan PlanBroadcastBackward(CpuContext& ctx, const MatMulGeometry& g,
                                            const BackwardArgs& args) {
  BroadcastBackwardPlan plan;
  plan.product_offset = plan.layout.Stage(std::max(g.m * g.k, g.k * g.n) * sizeof(float));
  if (args.input_grads[0].present())
    plan.layout.Scratchpad(GemmFor(ctx, BroadcastDaCall(g, args, 0)).pd);
  if (args.input_grads[1].present())
    plan.layout.Scratchpad(GemmFor(ctx, BroadcastDbCall(g, args, 0)).pd);
  return plan;
}

// d[matrix of_[i]] = sum over i of product(i), in the order of i; matrices no i uses are 0.
template <typename Call>
void SumProducts(CpuContext& ctx, const ScratchSpace& scratch, float* staged, float* d,
                 int64_t matrices, int64_t size, const std::vector<int64_t>& of, Call call) {
  std::fill(d, d + matrices * size, 0.f);
  for (size_t i = 0; i < of.size(); ++i) {
    Gemm(ctx, call(static_cast<int64_t>(i)), nullptr, staged, scratch);
    float* target = d + of[i] * size;
    for (int64_t e = 0; e < size; ++e) target[e] += staged[e];
  }
}

absl::Status BroadcastMatMulBackward(CpuContext& ctx, const MatMulGeometry& g,
                                     const BackwardArgs& args) {
  BroadcastBackwardPlan plan = PlanBroadcastBackward(ctx, g, args);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, plan.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, plan.layout);
  float* staged = static_cast<float*>(scratch.At(plan.product_offset));
  if (args.input_grads[0].present()) {
    SumProducts(ctx, scratch, staged, args.input_grads[0].f32(), g.a_batch_count, g.m * g.k,
                g.pairs->a_of, [&](int64_t i) { return BroadcastDaCall(g, args, i); });
  }
  if (args.input_grads[1].present()) {
    SumProducts(ctx, scratch, staged, args.input_grads[1].f32(), g.b_batch_count, g.k * g.n,
                g.pairs->b_of, [&](int64_t i) { return BroadcastDbCall(g, args, i); });
  }
  if (args.input_grads.size() == 3 && args.input_grads[2].present()) {
    SumRows(args.output_grads[0].f32(), g.out_batch() * g.m, g.n, args.input_grads[2].f32());
  }
  return absl::OkStatus();
}

absl::StatusOr<uint64_t> MatMulBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const MatMulGeometry g, MatMulBackwardGeometry(args));
  if (!GradientFlows(args)) return 0;
  if (g.pairs) return PlanBroadcastBackward(ctx, g, args).layout.bytes();
  return PlanMatMulBackward(ctx, g, args).layout.bytes();
}

absl::Status MatMulBackward(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const MatMulGeometry g, MatMulBackwardGeometry(args));
  if (ZeroGradsIfNoFlow(args)) return absl::OkStatus();
  if (g.pairs) return BroadcastMatMulBackward(ctx, g, args);
  MatMulBackwardPlan plan = PlanMatMulBackward(ctx, g, args);
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, plan.layout.bytes()));
  const ScratchSpace scratch(ctx.engine, base, plan.layout);
  if (plan.da.has_value()) Gemm(ctx, *plan.da, nullptr, args.input_grads[0].data, scratch);
  if (plan.db.has_value()) {
    if (plan.densify.has_value()) {
      float* rows = static_cast<float*>(scratch.At(plan.densify_offset));
      Densify(*plan.densify, rows);
      (g.tb ? plan.db->b : plan.db->a).data = rows;
    }
    Gemm(ctx, *plan.db, nullptr, args.input_grads[1].data, scratch);
  }
  // Step 3: dbias = sum of dy over every row.
  if (args.input_grads.size() == 3 && args.input_grads[2].present()) {
    if (g.dt == DT::bf16) {
      SumRows(static_cast<const uint16_t*>(args.output_grads[0].data), g.batch * g.m, g.n,
              static_cast<uint16_t*>(args.input_grads[2].data));
    } else {
      SumRows(args.output_grads[0].f32(), g.batch * g.m, g.n, args.input_grads[2].f32());
    }
  }
  return absl::OkStatus();
}

// ---- MaxPool, AvgPool -------------------------------------------------------------------------

// One pooling node's shapes and windows. pad_r_onednn is the right/bottom padding oneDNN
// needs to produce PyTorch's output size (ceil_mode's overhang included).
struct PoolGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  memory::dims kernel, strides, pad_l, pad_r, pad_r_onednn;
  bool count_include_pad = true;
  DT dt = DT::f32;  // x's and y's (float32 or bfloat16).

  // Whether a window reaches past pad_r into ceil_mode's overhang.
  bool HasOverhang() const { return pad_r_onednn != pad_r; }
  std::string Key() const {
    return absl::StrCat(n, "x", c, "x", h, "x", w, "->", oh, "x", ow, ":k", DimsKey(kernel), ":s",
                        DimsKey(strides), ":p", DimsKey(pad_l), ",", DimsKey(pad_r_onednn), ":dt",
                        static_cast<int>(dt));
  }
  memory::desc XDesc() const { return PlainDesc({n, c, h, w}, Tag::nchw, dt); }
  memory::desc YDesc() const { return PlainDesc({n, c, oh, ow}, Tag::nchw, dt); }
};

absl::StatusOr<PoolGeometry> PoolGeometryOf(const std::string& op, const graph::Attrs& attrs,
                                            const TensorView& x, const TensorView& y) {
  RETURN_IF_ERROR(CheckTensor(op, "input 'x'", x, 4, DataDType(x)));
  RETURN_IF_ERROR(CheckTensor(op, "output 'y'", y, 4, DataDType(x)));
  PoolGeometry g;
  g.dt = DataTypeOf(x.dtype);
  g.n = x.dim(0), g.c = x.dim(1), g.h = x.dim(2), g.w = x.dim(3);
  g.oh = y.dim(2), g.ow = y.dim(3);
  const std::vector<int64_t> kernel = attrs.Ints("kernel_size");
  std::vector<int64_t> stride = attrs.Ints("stride");
  if (stride.empty()) stride = kernel;
  std::vector<int64_t> pad = attrs.Ints("padding");
  if (pad.size() == 2) pad = {pad[0], pad[1], pad[0], pad[1]};
  if (kernel.size() != 2 || stride.size() != 2 || pad.size() != 4 || y.dim(0) != g.n ||
      y.dim(1) != g.c) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", op, ": x ", ShapeStr(x.shape), ", y ",
                                                   ShapeStr(y.shape), ", kernel_size [",
                                                   absl::StrJoin(kernel, ","), "] do not fit"));
  }
  if (op == "AvgPool") g.count_include_pad = attrs.Bool("count_include_pad");
  g.kernel = {kernel[0], kernel[1]};
  g.strides = {stride[0], stride[1]};
  g.pad_l = {pad[0], pad[1]};
  g.pad_r = {pad[2], pad[3]};
  g.pad_r_onednn = g.pad_r;
  const int64_t in[2] = {g.h, g.w}, out[2] = {g.oh, g.ow};
  for (int d = 0; d < 2; ++d) {
    const int64_t floor_out = (in[d] + pad[d] + pad[d + 2] - kernel[d]) / stride[d] + 1;
    if (floor_out != out[d]) {
      // ceil_mode: widen the end padding just enough to fit the last (partial) window.
      g.pad_r_onednn[d] = (out[d] - 1) * stride[d] + kernel[d] - in[d] - pad[d];
    }
  }
  return g;
}

struct PoolForwardPrims {
  PoolForwardPrims(const dnnl::engine& engine, const PoolGeometry& g, dnnl::algorithm alg)
      : pd(dnnl::pooling_forward::desc(dnnl::prop_kind::forward_inference, alg, g.XDesc(),
                                       g.YDesc(), g.strides, g.kernel, g.pad_l, g.pad_r_onednn),
           UserScratchpad(), engine) {
    layout.Scratchpad(pd);
  }
  dnnl::pooling_forward::primitive_desc pd;
  ScratchLayout layout;
  std::optional<dnnl::pooling_forward> prim;
};

// PyTorch's average-pool window for output index `o` along one dim: [begin, end) clipped to
// the input, and the divisor's extent along this dim.
struct Window {
  int64_t begin, end, divisor;
};

// Returns the input window of output `o` along spatial dim `dim` (0: height, 1: width).
Window AvgWindow(const PoolGeometry& g, int dim, int64_t o) {
  const int64_t in = dim == 0 ? g.h : g.w;
  int64_t begin = o * g.strides[dim] - g.pad_l[dim];
  int64_t end = std::min(begin + g.kernel[dim], in + g.pad_r[dim]);
  const int64_t padded_extent = end - begin;
  begin = std::max<int64_t>(begin, 0);
  end = std::min(end, in);
  return {begin, end, g.count_include_pad ? padded_extent : end - begin};
}

// AvgPool forward as a loop: PyTorch's divisor, which counts padding but not ceil_mode's
// overhang (oneDNN's include-padding average counts both). T: float or bfloat16 bits,
// summed in float.
template <typename T>
void AvgPoolLoopForward(const PoolGeometry& g, const T* x, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    const T* xp = x + plane * g.h * g.w;
    T* yp = y + plane * g.oh * g.ow;
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const Window wh = AvgWindow(g, 0, oh);
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const Window ww = AvgWindow(g, 1, ow);
        float sum = 0;
        for (int64_t i = wh.begin; i < wh.end; ++i) {
          for (int64_t j = ww.begin; j < ww.end; ++j) sum += Widen(xp[i * g.w + j]);
        }
        Narrow(sum / static_cast<float>(wh.divisor * ww.divisor), yp + oh * g.ow + ow);
      }
    }
  }
}

// Returns the pooling primitive of a forward, or nullptr where a loop computes it (an
// include-padding average with ceil_mode's overhang, whose divisor oneDNN counts otherwise).
absl::StatusOr<PoolForwardPrims*> PoolForwardFor(CpuContext& ctx, const ForwardArgs& args,
                                                 const PoolGeometry& g) {
  const bool max = args.op == "MaxPool";
  if (!max && g.count_include_pad && g.HasOverhang()) return nullptr;
  const dnnl::algorithm alg = max                   ? dnnl::algorithm::pooling_max
                              : g.count_include_pad ? dnnl::algorithm::pooling_avg_include_padding
                                                    : dnnl::algorithm::pooling_avg_exclude_padding;
  return &ctx.Cached<PoolForwardPrims>(
      absl::StrCat(args.op, ".fwd:", g.Key(), ":", g.count_include_pad),
      [&] { return std::make_shared<PoolForwardPrims>(ctx.engine, g, alg); });
}

absl::StatusOr<PoolGeometry> PoolForwardGeometry(const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.inputs.size(), 1, 1, args.outputs.size()));
  return PoolGeometryOf(args.op, *args.attrs, args.inputs[0], args.outputs[0]);
}

absl::StatusOr<uint64_t> PoolForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const PoolGeometry g, PoolForwardGeometry(args));
  ASSIGN_OR_RETURN(PoolForwardPrims* p, PoolForwardFor(ctx, args, g));
  return p == nullptr ? 0 : p->layout.bytes();
}

absl::Status PoolForward(CpuContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const PoolGeometry g, PoolForwardGeometry(args));
  ASSIGN_OR_RETURN(PoolForwardPrims* p, PoolForwardFor(ctx, args, g));
  if (p == nullptr) {
    if (g.dt == DT::bf16) {
      AvgPoolLoopForward(g, static_cast<const uint16_t*>(args.inputs[0].data),
                         static_cast<uint16_t*>(args.outputs[0].data));
    } else {
      AvgPoolLoopForward(g, args.inputs[0].f32(), args.outputs[0].f32());
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, p->layout.bytes()));
  Execute(ctx.stream, p->prim, p->pd, ScratchSpace(ctx.engine, base, p->layout),
          {{DNNL_ARG_SRC, Mem(g.XDesc(), ctx.engine, args.inputs[0].data)},
           {DNNL_ARG_DST, Mem(g.YDesc(), ctx.engine, args.outputs[0].data)}});
  ctx.stream.wait();
  return absl::OkStatus();
}

// Where a pool backward accumulates each plane of dx: in dx itself (float32), or, for a
// bfloat16 dx, in a float32 plane of the scratch per thread (PoolBackwardScratch), rounded
// into dx once the plane is done.
template <typename T>
struct PlaneAccumulator {
  PlaneAccumulator(const PoolGeometry& g, T* dx, float* planes) : g(g), dx(dx), planes(planes) {}
  // Returns the zeroed float32 plane `plane` of dx accumulates in.
  float* Begin(int64_t plane) const {
    float* acc;
    if constexpr (std::is_same_v<T, float>) {
      acc = dx + plane * g.h * g.w;
    } else {
      acc = planes + static_cast<int64_t>(omp_get_thread_num()) * g.h * g.w;
    }
    std::fill(acc, acc + g.h * g.w, 0.0f);
    return acc;
  }
  // Stores the accumulated plane into dx.
  void End(int64_t plane, const float* acc) const {
    if constexpr (!std::is_same_v<T, float>) {
      T* out = dx + plane * g.h * g.w;
      for (int64_t i = 0; i < g.h * g.w; ++i) Narrow(acc[i], out + i);
    }
  }
  const PoolGeometry& g;
  T* dx;
  float* planes;
};

// MaxPool backward without a workspace: each output's gradient goes to the first position of
// its window (row-major) where x equals y; overlapping windows accumulate (in float32).
template <typename T>
void MaxPoolLoopBackward(const PoolGeometry& g, const T* x, const T* y, const T* dy,
                         const PlaneAccumulator<T>& dx) {
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    const T* xp = x + plane * g.h * g.w;
    const T* yp = y + plane * g.oh * g.ow;
    const T* dyp = dy + plane * g.oh * g.ow;
    float* dxp = dx.Begin(plane);
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const int64_t h0 = oh * g.strides[0] - g.pad_l[0];
      const int64_t h_begin = std::max<int64_t>(h0, 0), h_end = std::min(h0 + g.kernel[0], g.h);
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const int64_t w0 = ow * g.strides[1] - g.pad_l[1];
        const int64_t w_begin = std::max<int64_t>(w0, 0);
        const int64_t w_end = std::min(w0 + g.kernel[1], g.w);
        const float target = Widen(yp[oh * g.ow + ow]);
        const bool nan = std::isnan(target);
        int64_t found = -1;
        for (int64_t i = h_begin; i < h_end && found < 0; ++i) {
          for (int64_t j = w_begin; j < w_end; ++j) {
            const float v = Widen(xp[i * g.w + j]);
            if (v == target || (nan && std::isnan(v))) {
              found = i * g.w + j;
              break;
            }
          }
        }
        if (found >= 0) dxp[found] += Widen(dyp[oh * g.ow + ow]);
      }
    }
    dx.End(plane, dxp);
  }
}

// AvgPool backward: each output's gradient spread over its window with PyTorch's divisor.
// Each plane is one thread's, so overlapping windows accumulate in a fixed order.
template <typename T>
void AvgPoolLoopBackward(const PoolGeometry& g, const T* dy, const PlaneAccumulator<T>& dx) {
#pragma omp parallel for schedule(static)
  for (int64_t plane = 0; plane < g.n * g.c; ++plane) {
    const T* dyp = dy + plane * g.oh * g.ow;
    float* dxp = dx.Begin(plane);
    for (int64_t oh = 0; oh < g.oh; ++oh) {
      const Window wh = AvgWindow(g, 0, oh);
      for (int64_t ow = 0; ow < g.ow; ++ow) {
        const Window ww = AvgWindow(g, 1, ow);
        const float share =
            Widen(dyp[oh * g.ow + ow]) / static_cast<float>(wh.divisor * ww.divisor);
        for (int64_t i = wh.begin; i < wh.end; ++i) {
          for (int64_t j = ww.begin; j < ww.end; ++j) dxp[i * g.w + j] += share;
        }
      }
    }
    dx.End(plane, dxp);
  }
}

// A bfloat16 backward accumulates each plane in float32: one h x w plane per thread.
absl::StatusOr<uint64_t> PoolBackwardScratch(CpuContext&, const BackwardArgs& args) {
  if (args.inputs.size() != 1 || args.outputs.size() != 1 || args.input_grads.size() != 1) {
    return 0;  // The kernel reports the error.
  }
  const TensorView& x = args.inputs[0];
  if (x.dtype != proto::DTYPE_BFLOAT16 || x.rank() != 4) return 0;
  return static_cast<uint64_t>(omp_get_max_threads()) * x.dim(2) * x.dim(3) * sizeof(float);
}

// The pool backward on elements of type T (float or bfloat16 bits).
template <typename T>
absl::Status PoolBackwardOf(CpuContext& ctx, const BackwardArgs& args, const PoolGeometry& g) {
  float* planes = nullptr;
  if constexpr (!std::is_same_v<T, float>) {
    ASSIGN_OR_RETURN(const uint64_t bytes, PoolBackwardScratch(ctx, args));
    ASSIGN_OR_RETURN(char* base, ScratchBase(ctx, args, bytes));
    planes = reinterpret_cast<float*>(base);
  }
  const PlaneAccumulator<T> dx(g, static_cast<T*>(args.input_grads[0].data), planes);
  const T* dy = static_cast<const T*>(args.output_grads[0].data);
  if (args.op == "MaxPool") {
    if (!args.inputs[0].present() || !args.outputs[0].present()) {
      return absl::InvalidArgumentError("CPU MaxPool: backward needs x and y");
    }
    MaxPoolLoopBackward(g, static_cast<const T*>(args.inputs[0].data),
                        static_cast<const T*>(args.outputs[0].data), dy, dx);
  } else {
    AvgPoolLoopBackward(g, dy, dx);
  }
  return absl::OkStatus();
}

absl::Status PoolBackward(CpuContext& ctx, const BackwardArgs& args) {
  if (args.inputs.size() != 1 || args.outputs.size() != 1 || args.input_grads.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": backward needs 1 input, ",
                                                   "1 output and 1 input gradient"));
  }
  ASSIGN_OR_RETURN(const PoolGeometry g,
                   PoolGeometryOf(args.op, *args.attrs, args.inputs[0], args.outputs[0]));
  if (ZeroGradsIfNoFlow(args) || !args.input_grads[0].present()) return absl::OkStatus();
  const proto::DType dtype = DataDType(args.inputs[0]);
  RETURN_IF_ERROR(CheckTensor(args.op, "gradient of output 'y'", args.output_grads[0], 4, dtype));
  RETURN_IF_ERROR(CheckTensor(args.op, "gradient of input 'x'", args.input_grads[0], 4, dtype));
  if (dtype == proto::DTYPE_BFLOAT16) return PoolBackwardOf<uint16_t>(ctx, args, g);
  return PoolBackwardOf<float>(ctx, args, g);
}

// ---- GlobalAvgPool ----------------------------------------------------------------------------

// y[p] = the mean of plane p of x (`size` elements), summed in double; T float or bfloat16
// bits.
template <typename T>
void GlobalAvgPoolLoop(const T* x, int64_t planes, int64_t size, T* y) {
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < size; ++i) sum += Widen(x[p * size + i]);
    Narrow(static_cast<float>(sum / static_cast<double>(size)), y + p);
  }
}

// dx = dy / size over each plane; T float or bfloat16 bits.
template <typename T>
void GlobalAvgPoolLoopBackward(const T* dy, int64_t planes, int64_t size, T* dx) {
  const float divisor = static_cast<float>(size);
#pragma omp parallel for schedule(static)
  for (int64_t p = 0; p < planes; ++p) {
    T g;
    Narrow(Widen(dy[p]) / divisor, &g);
    std::fill(dx + p * size, dx + (p + 1) * size, g);
  }
}

absl::Status GlobalAvgPoolForward(CpuContext&, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.inputs.size(), 1, 1, args.outputs.size()));
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(CheckTensor(args.op, "input 'x'", x, 4, DataDType(x)));
  RETURN_IF_ERROR(CheckTensor(args.op, "output 'y'", args.outputs[0], -1, DataDType(x)));
  const int64_t planes = x.dim(0) * x.dim(1), size = x.dim(2) * x.dim(3);
  if (x.dtype == proto::DTYPE_BFLOAT16) {
    GlobalAvgPoolLoop(static_cast<const uint16_t*>(x.data), planes, size,
                      static_cast<uint16_t*>(args.outputs[0].data));
  } else {
    GlobalAvgPoolLoop(x.f32(), planes, size, args.outputs[0].f32());
  }
  return absl::OkStatus();
}

absl::Status GlobalAvgPoolBackward(CpuContext&, const BackwardArgs& args) {
  if (args.inputs.size() != 1 || args.input_grads.size() != 1) {
    return absl::InvalidArgumentError("CPU GlobalAvgPool: backward needs 1 input gradient");
  }
  const TensorView& x = args.inputs[0];
  const proto::DType dtype = DataDType(x);
  RETURN_IF_ERROR(CheckTensor(args.op, "input 'x'", x, 4, dtype));
  if (ZeroGradsIfNoFlow(args) || !args.input_grads[0].present()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckTensor(args.op, "gradient of output 'y'", args.output_grads[0], -1, dtype));
  RETURN_IF_ERROR(CheckTensor(args.op, "gradient of input 'x'", args.input_grads[0], 4, dtype));
  const int64_t planes = x.dim(0) * x.dim(1), size = x.dim(2) * x.dim(3);
  if (dtype == proto::DTYPE_BFLOAT16) {
    GlobalAvgPoolLoopBackward(static_cast<const uint16_t*>(args.output_grads[0].data), planes, size,
                              static_cast<uint16_t*>(args.input_grads[0].data));
  } else {
    GlobalAvgPoolLoopBackward(args.output_grads[0].f32(), planes, size, args.input_grads[0].f32());
  }
  return absl::OkStatus();
}

// ---- Entry points -----------------------------------------------------------------------------

template <absl::Status (*Kernel)(CpuContext&, const ForwardArgs&)>
absl::Status GuardedForward(CpuContext& ctx, const ForwardArgs& args) {
  if (args.attrs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": no attributes"));
  }
  return Guarded(args.op, [&] { return Kernel(ctx, args); });
}

template <absl::Status (*Kernel)(CpuContext&, const BackwardArgs&)>
absl::Status GuardedBackward(CpuContext& ctx, const BackwardArgs& args) {
  if (args.attrs == nullptr || args.outputs.empty() || args.output_grads.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op,
                                                   ": backward without attributes or outputs"));
  }
  return Guarded(args.op, [&] { return Kernel(ctx, args); });
}

// Runs `body` (returning absl::StatusOr<uint64_t>), turning any exception (oneDNN finding no
// primitive for the arguments) into InternalError.
template <typename Body>
absl::StatusOr<uint64_t> GuardedBytes(const std::string& op, Body body) {
  absl::StatusOr<uint64_t> bytes = 0;
  absl::Status status = Guarded(op, [&] {
    bytes = body();
    return bytes.status();
  });
  if (!status.ok()) return status;
  return bytes;
}

template <absl::StatusOr<uint64_t> (*Scratch)(CpuContext&, const ForwardArgs&)>
absl::StatusOr<uint64_t> GuardedForwardScratch(CpuContext& ctx, const ForwardArgs& args) {
  if (args.attrs == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op, ": no attributes"));
  }
  return GuardedBytes(args.op, [&] { return Scratch(ctx, args); });
}

template <absl::StatusOr<uint64_t> (*Scratch)(CpuContext&, const BackwardArgs&)>
absl::StatusOr<uint64_t> GuardedBackwardScratch(CpuContext& ctx, const BackwardArgs& args) {
  if (args.attrs == nullptr || args.outputs.empty() || args.output_grads.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("CPU ", args.op,
                                                   ": backward without attributes or outputs"));
  }
  return GuardedBytes(args.op, [&] { return Scratch(ctx, args); });
}

}  // namespace

bool MatMulBackwardTakesBf16(const BackwardArgs& args) {
  if (args.attrs == nullptr || args.outputs.empty()) return true;
  const absl::StatusOr<MatMulGeometry> g =
      MatMulGeometryOf(args.op, *args.attrs, args.inputs, args.outputs[0]);
  if (!g.ok()) return true;  // The kernel reports the error.
  const bool db_densifies = args.input_grads.size() > 1 && args.input_grads[1].present() && g->ta &&
                            g->b_batch == 1 && g->batch > 1;
  return !g->pairs.has_value() && !db_densifies;
}

void RegisterDnnlKernels(KernelTable* table) {
  (*table)["Conv2D"] = {GuardedForward<ConvForward>, GuardedBackward<ConvBackward>,
                        GuardedForwardScratch<ConvForwardScratch>,
                        GuardedBackwardScratch<ConvBackwardScratch>};
  (*table)["ConvTranspose2D"] = {GuardedForward<ConvTransposeForward>,
                                 GuardedBackward<ConvTransposeBackward>,
                                 GuardedForwardScratch<ConvTransposeForwardScratch>,
                                 GuardedBackwardScratch<ConvTransposeBackwardScratch>};
  (*table)["BatchNorm"] = {GuardedForward<BatchNormForward>, GuardedBackward<BatchNormBackward>,
                           GuardedForwardScratch<BatchNormForwardScratch>,
                           GuardedBackwardScratch<BatchNormBackwardScratch>};
  (*table)["MatMul"] = {GuardedForward<MatMulForward>, GuardedBackward<MatMulBackward>,
                        GuardedForwardScratch<MatMulForwardScratch>,
                        GuardedBackwardScratch<MatMulBackwardScratch>};
  for (const char* pool : {"MaxPool", "AvgPool"}) {
    (*table)[pool] = {GuardedForward<PoolForward>, GuardedBackward<PoolBackward>,
                      GuardedForwardScratch<PoolForwardScratch>,
                      GuardedBackwardScratch<PoolBackwardScratch>};
  }
  (*table)["GlobalAvgPool"] = {GuardedForward<GlobalAvgPoolForward>,
                               GuardedBackward<GlobalAvgPoolBackward>};
}

}  // namespace headroom::executor::cpu
