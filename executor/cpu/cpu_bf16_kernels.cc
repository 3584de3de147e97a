// The CPU backend's bfloat16 side (--precision bf16): the Cast kernels, and the dispatch that
// decides how a node holding a bfloat16 tensor runs.
//
// Three ways, by op (Bf16PathOf):
//  - direct: the op's own kernel takes bfloat16 (Cast; the data-movement ops, which copy
//    bytes of any dtype; Conv2D and MatMul, whose oneDNN primitives run on bf16 memory with
//    float32 accumulation; ReLU and GELU on oneDNN's bf16 eltwise primitives; Add, Mul,
//    Dropout, LayerNorm, Softmax, Embedding and SoftmaxCrossEntropy, loops that widen each
//    element as they read it, compute in float32 (double where the float32 kernel sums in
//    double; LayerNorm's weight, bias, statistics and their gradients and the loss stay
//    float32) and round each result once, with no float32 copy of any tensor); BatchNorm,
//    MaxPool and AvgPool forward on oneDNN's bf16 primitives (float32 statistics, scale and
//    shift; BatchNorm's backward too), the pools' backwards and GlobalAvgPool as loops (a
//    float32 plane per thread accumulates a bfloat16 pool gradient). MatMul's backward is
//    staged where its operands broadcast batch dims pairwise or db sums a transposed a over
//    a's batch; Add and Mul where their tensors mix dtypes; LayerNorm and BatchNorm where a
//    parameter or running statistic is bfloat16; BatchNorm synchronised across ranks.
//  - staged: the op's float32 kernel runs on float32 copies of its bfloat16 tensors, staged
//    in the node's scratch: each bfloat16 input (and, in a backward, the forward's tensors
//    and the output gradient) is widened exactly into float32, the float32 kernel computes,
//    and each bfloat16 output (input gradient) is rounded to nearest even once. So a staged
//    op computes as "load bf16 as float, compute in float, store rounded" with the float32
//    kernel's own accumulation (batch and layer statistics, softmax, reductions), and its
//    float32 tensors (norm weights, saved statistics, the loss) pass through untouched. The
//    copies are declared through the scratch query like every other kernel temporary.
//  - none: a bfloat16 tensor reaching any other op is InvalidArgument naming the op and the
//    tensor; nothing is converted silently.
// Float32 calls never come here: they run their kernel as before, bitwise unchanged.

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "util/bfloat16.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

using absl::StrCat;

constexpr proto::DType kBf16 = proto::DTYPE_BFLOAT16;
constexpr proto::DType kF32 = proto::DTYPE_FLOAT32;

// Below this many elements a conversion runs on one thread.
constexpr int64_t kParallelMin = 1 << 15;
// Each staged copy starts at a multiple of this, as oneDNN aligns its buffers.
constexpr uint64_t kAlignment = 64;

uint64_t AlignUp(uint64_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

// ---- Conversions ------------------------------------------------------------------------------

void WidenBf16(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = BFloat16ToFloat(in[i]);
}

void NarrowToBf16(const float* in, uint16_t* out, int64_t n) {
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) out[i] = FloatToBFloat16(in[i]);
}

// Converts `in` into `out` (same element count; float32 or bfloat16 each); a copy where the
// dtypes agree (nothing where they are the same bytes).
void Convert(const TensorView& in, const TensorView& out) {
  const int64_t n = in.num_elements();
  if (in.dtype == out.dtype) {
    if (in.data != out.data) std::memmove(out.data, in.data, in.bytes());
  } else if (in.dtype == kBf16) {
    WidenBf16(static_cast<const uint16_t*>(in.data), out.f32(), n);
  } else {
    NarrowToBf16(in.f32(), static_cast<uint16_t*>(out.data), n);
  }
}

// ---- Cast -------------------------------------------------------------------------------------

bool CastDType(proto::DType d) { return d == kF32 || d == kBf16; }

// Returns InvalidArgument unless `t` (called `what`) is float32 or bfloat16 with `n` elements.
absl::Status CheckCastTensor(const char* what, const TensorView& t, int64_t n) {
  if (!CastDType(t.dtype)) {
    return absl::InvalidArgumentError(StrCat("op 'Cast': ", what, " ", graph::ShapeString(t.shape),
                                             " has dtype ", graph::DTypeName(t.dtype),
                                             "; Cast converts between float32 and bfloat16"));
  }
  if (t.num_elements() != n) {
    return absl::InvalidArgumentError(
        StrCat("op 'Cast': ", what, " ", graph::ShapeString(t.shape), " needs ", n, " elements"));
  }
  if (!t.present()) {
    return absl::InvalidArgumentError(StrCat("op 'Cast': ", what, " has no data"));
  }
  return absl::OkStatus();
}

// Returns the attribute 'to' after checking that it names float32 or bfloat16.
absl::StatusOr<proto::DType> CastTarget(const graph::Attrs* attrs) {
  if (attrs == nullptr || attrs->values().count("to") == 0 ||
      attrs->values().at("to").value_case() != proto::AttrValue::kI) {
    return absl::InvalidArgumentError("op 'Cast': needs the int attribute 'to'");
  }
  const int64_t to = attrs->Int("to");
  if (!proto::DType_IsValid(static_cast<int>(to)) || !CastDType(static_cast<proto::DType>(to))) {
    return absl::InvalidArgumentError(StrCat("op 'Cast': attribute 'to' is ", to,
                                             "; needs float32 (", static_cast<int>(kF32),
                                             ") or bfloat16 (", static_cast<int>(kBf16), ")"));
  }
  return static_cast<proto::DType>(to);
}

// y = x in dtype `to` (rounded to nearest even into bfloat16, exact into float32).
absl::Status CastForward(CpuContext&, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const proto::DType to, CastTarget(args.attrs));
  if (args.inputs.size() != 1 || args.outputs.size() != 1) {
    return absl::InvalidArgumentError(StrCat("op 'Cast': got ", args.inputs.size(), " inputs and ",
                                             args.outputs.size(), " outputs, needs 1 and 1"));
  }
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckCastTensor("input 'x'", x, x.num_elements()));
  RETURN_IF_ERROR(CheckCastTensor("output 'y'", y, x.num_elements()));
  if (y.dtype != to) {
    return absl::InvalidArgumentError(StrCat("op 'Cast': output 'y' has dtype ",
                                             graph::DTypeName(y.dtype), " but 'to' is ",
                                             graph::DTypeName(to)));
  }
  Convert(x, y);
  return absl::OkStatus();
}

// dx = dy in x's dtype: a parameter's bfloat16 gradient becomes the float32 one its update
// reads.
absl::Status CastBackward(CpuContext&, const BackwardArgs& args) {
  if (args.inputs.size() != 1 || args.input_grads.size() != 1 || args.output_grads.size() != 1) {
    return absl::InvalidArgumentError(StrCat(
        "op 'Cast' backward: got ", args.inputs.size(), " inputs, ", args.input_grads.size(),
        " input gradients and ", args.output_grads.size(), " output gradients, needs 1 of each"));
  }
  const TensorView& dx = args.input_grads[0];
  const TensorView& dy = args.output_grads[0];
  if (!dx.present()) return absl::OkStatus();
  RETURN_IF_ERROR(CheckCastTensor("gradient of input 'x'", dx, dx.num_elements()));
  if (dx.dtype != args.inputs[0].dtype) {
    return absl::InvalidArgumentError(StrCat("op 'Cast' backward: gradient of input 'x' has dtype ",
                                             graph::DTypeName(dx.dtype), ", input 'x' ",
                                             graph::DTypeName(args.inputs[0].dtype)));
  }
  if (!dy.present()) {
    std::memset(dx.data, 0, dx.bytes());
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckCastTensor("gradient of output 'y'", dy, dx.num_elements()));
  Convert(dy, dx);
  return absl::OkStatus();
}

// ---- Which ops take bfloat16, and how ---------------------------------------------------------

enum class Bf16Path { kNone, kDirect, kStaged };

Bf16Path Bf16PathOf(const std::string& op) {
  // Kernels that take bfloat16 themselves.
  static const auto* direct = new absl::flat_hash_set<std::string>{
      // Conversions and data movement.
      "Cast", "Flatten", "Reshape", "Transpose", "Split", "Slice", "Expand", "Concat",
      // oneDNN's bf16 primitives.
      "Conv2D", "MatMul", "ReLU", "GELU", "BatchNorm", "MaxPool", "AvgPool",
      // Loops widening each element as they read it.
      "Add", "Mul", "Dropout", "Softmax", "LayerNorm", "Embedding", "SoftmaxCrossEntropy",
      "GlobalAvgPool"};
  // Float32 kernels run on float32 copies (the mixed-precision op set's other ops).
  static const auto* staged = new absl::flat_hash_set<std::string>{"GroupNorm"};
  if (direct->contains(op)) return Bf16Path::kDirect;
  if (staged->contains(op)) return Bf16Path::kStaged;
  return Bf16Path::kNone;
}

// Returns the name of tensor `i` of `op`'s `role` ("inputs", "outputs") from its schema, for
// errors: "input 'x'", or "input 2" where the schema does not say.
std::string TensorName(const std::string& op, const char* role, size_t i) {
  const graph::OpSchema* s = graph::FindOp(op);
  const bool input = std::strcmp(role, "input") == 0;
  if (s != nullptr) {
    const std::vector<std::string>& names = input ? s->input_names : s->output_names;
    if (i < names.size()) return StrCat(role, " '", names[i], "'");
  }
  return StrCat(role, " ", i);
}

// Every tensor view of a call with whether the kernel reads it (load) and writes it (store).
struct ViewRef {
  const TensorView* view;
  std::string what;  // For errors: "input 'x'", "gradient of output 'y'".
  bool load, store;
};

std::vector<ViewRef> ViewsOf(const ForwardArgs& args) {
  std::vector<ViewRef> views;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    views.push_back({&args.inputs[i], TensorName(args.op, "input", i), true, false});
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    views.push_back({&args.outputs[i], TensorName(args.op, "output", i), false, true});
  }
  // A re-forward may read saved state the executor copied in; a forward writes it.
  for (size_t i = 0; i < args.saved.size(); ++i) {
    views.push_back({&args.saved[i], StrCat("saved tensor ", i), true, true});
  }
  for (size_t i = 0; i < args.running.size(); ++i) {
    views.push_back({&args.running[i], StrCat("running statistic ", i), true, true});
  }
  return views;
}

std::vector<ViewRef> ViewsOf(const BackwardArgs& args) {
  std::vector<ViewRef> views;
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    views.push_back({&args.inputs[i], TensorName(args.op, "input", i), true, false});
  }
  for (size_t i = 0; i < args.outputs.size(); ++i) {
    views.push_back({&args.outputs[i], TensorName(args.op, "output", i), true, false});
  }
  for (size_t i = 0; i < args.saved.size(); ++i) {
    views.push_back({&args.saved[i], StrCat("saved tensor ", i), true, false});
  }
  for (size_t i = 0; i < args.output_grads.size(); ++i) {
    views.push_back(
        {&args.output_grads[i], "gradient of " + TensorName(args.op, "output", i), true, false});
  }
  for (size_t i = 0; i < args.input_grads.size(); ++i) {
    views.push_back(
        {&args.input_grads[i], "gradient of " + TensorName(args.op, "input", i), false, true});
  }
  return views;
}

// Returns the first bfloat16 view of `views`, or nullptr.
const ViewRef* FirstBf16(const std::vector<ViewRef>& views) {
  for (const ViewRef& v : views) {
    if (v.view->dtype == kBf16) return &v;
  }
  return nullptr;
}

// Returns mutable pointers to the views of `args`, in the order of ViewsOf().
std::vector<TensorView*> MutableViews(ForwardArgs& args) {
  std::vector<TensorView*> v;
  for (auto* list : {&args.inputs, &args.outputs, &args.saved, &args.running}) {
    for (TensorView& t : *list) v.push_back(&t);
  }
  return v;
}

std::vector<TensorView*> MutableViews(BackwardArgs& args) {
  std::vector<TensorView*> v;
  for (auto* list :
       {&args.inputs, &args.outputs, &args.saved, &args.output_grads, &args.input_grads}) {
    for (TensorView& t : *list) v.push_back(&t);
  }
  return v;
}

// The float32 twin of a call with bfloat16 views: the same arguments with every bfloat16
// view turned float32, each present one with a staged copy at `offsets[i]` of the scratch
// (in the order of ViewsOf()); the float32 kernel's own scratch follows them. Data are left
// as given (a query's placeholders) until the run points them into the scratch.
template <typename Args>
struct StagedCall {
  explicit StagedCall(const Args& original)
      : args(original), views(ViewsOf(original)), twins(MutableViews(args)) {
    offsets.assign(views.size(), 0);
    for (size_t i = 0; i < views.size(); ++i) {
      if (views[i].view->dtype != kBf16) continue;
      twins[i]->dtype = kF32;
      if (!views[i].view->present()) continue;
      offsets[i] = staged_bytes;
      staged_bytes += AlignUp(views[i].view->num_elements() * sizeof(float));
    }
  }
  StagedCall(const StagedCall&) = delete;
  StagedCall& operator=(const StagedCall&) = delete;

  Args args;
  std::vector<ViewRef> views;      // The original call's views.
  std::vector<TensorView*> twins;  // args' view for each of `views`.
  std::vector<uint64_t> offsets;
  uint64_t staged_bytes = 0;
};

// Returns whether an Add or Mul call mixes dtypes among a, b and y (a bfloat16 activation
// beside a float32 tensor): its kernel takes all three in one dtype.
bool MixedBinary(const std::string& op, const std::vector<TensorView>& inputs,
                 const std::vector<TensorView>& outputs) {
  if (op != "Add" && op != "Mul") return false;
  if (inputs.size() != 2 || outputs.size() != 1) return false;  // The kernel's error.
  return inputs[0].dtype != outputs[0].dtype || inputs[1].dtype != outputs[0].dtype;
}

// Returns whether a LayerNorm or BatchNorm call has a bfloat16 weight, bias or running
// statistic: their kernels take those in float32 only (the policy's mix).
bool Bf16NormParameters(const std::string& op, const std::vector<TensorView>& inputs) {
  if (op != "LayerNorm" && op != "BatchNorm") return false;
  for (size_t i = 1; i < inputs.size(); ++i) {
    if (inputs[i].dtype == kBf16) return true;
  }
  return false;
}

// Returns whether a call is a BatchNorm synchronised across data-parallel ranks, whose
// loops run on float32 only.
template <typename Args>
bool SyncBatchNorm(const Args& args) {
  return args.op == "BatchNorm" && static_cast<bool>(args.sync_statistics);
}

// Returns whether a call of a direct op is staged all the same: MatMul's backward where its
// kernel does not take bfloat16 (MatMulBackwardTakesBf16); Add and Mul mixing dtypes, and
// LayerNorm with bfloat16 parameters, which their kernels do not take.
bool StagedAnyway(const ForwardArgs& args) {
  return MixedBinary(args.op, args.inputs, args.outputs) ||
         Bf16NormParameters(args.op, args.inputs) || SyncBatchNorm(args);
}
bool StagedAnyway(const BackwardArgs& args) {
  return (args.op == "MatMul" && !MatMulBackwardTakesBf16(args)) ||
         MixedBinary(args.op, args.inputs, args.outputs) ||
         Bf16NormParameters(args.op, args.inputs) || SyncBatchNorm(args);
}

// Returns InvalidArgument naming op and tensor when `args` holds a bfloat16 view and `op` has
// no bfloat16 kernel; else the path its call takes (kNone: no bfloat16 view at all).
template <typename Args>
absl::StatusOr<Bf16Path> PathOfCall(const Args& args) {
  const std::vector<ViewRef> views = ViewsOf(args);
  const ViewRef* bf16 = FirstBf16(views);
  if (bf16 == nullptr) return Bf16Path::kNone;
  if (StagedAnyway(args)) return Bf16Path::kStaged;
  const Bf16Path path = Bf16PathOf(args.op);
  if (path == Bf16Path::kNone) {
    return absl::InvalidArgumentError(
        StrCat("op '", args.op, "': ", bf16->what, " ", graph::ShapeString(bf16->view->shape),
               " is bfloat16, and the CPU backend has no bfloat16 ", "kernel for ", args.op));
  }
  return path;
}

template <typename Args, typename Scratch>
absl::StatusOr<uint64_t> StagedScratch(CpuContext& ctx, Scratch inner, const Args& args) {
  StagedCall<Args> call(args);
  uint64_t inner_bytes = 0;
  if (inner != nullptr) {
    ASSIGN_OR_RETURN(inner_bytes, inner(ctx, call.args));
  }
  return call.staged_bytes + inner_bytes;
}

template <typename Args, typename Scratch, typename Kernel>
absl::Status RunStaged(CpuContext& ctx, Scratch inner_scratch, Kernel kernel, const Args& args) {
  StagedCall<Args> call(args);
  uint64_t inner_bytes = 0;
  if (inner_scratch != nullptr) {
    ASSIGN_OR_RETURN(inner_bytes, inner_scratch(ctx, call.args));
  }
  ASSIGN_OR_RETURN(char* base,
                   ctx.Scratch(args.scratch, args.scratch_bytes, call.staged_bytes + inner_bytes));
  // Step 1: point each bfloat16 view at its float32 copy; widen those the kernel reads.
  for (size_t i = 0; i < call.views.size(); ++i) {
    const TensorView& original = *call.views[i].view;
    if (original.dtype != kBf16 || !original.present()) continue;
    call.twins[i]->data = base + call.offsets[i];
    if (call.views[i].load) Convert(original, *call.twins[i]);
  }
  call.args.scratch = inner_bytes > 0 ? base + call.staged_bytes : nullptr;
  call.args.scratch_bytes = inner_bytes;
  // Step 2: the float32 kernel.
  RETURN_IF_ERROR(kernel(ctx, call.args));
  // Step 3: round what it wrote into the bfloat16 tensors.
  for (size_t i = 0; i < call.views.size(); ++i) {
    const TensorView& original = *call.views[i].view;
    if (original.dtype != kBf16 || !original.present() || !call.views[i].store) continue;
    Convert(*call.twins[i], original);
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterBf16Kernels(KernelTable* table) { (*table)["Cast"] = {&CastForward, &CastBackward}; }

absl::StatusOr<uint64_t> ForwardScratchOf(CpuContext& ctx, const OpKernels& k,
                                          const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const Bf16Path path, PathOfCall(args));
  if (path == Bf16Path::kStaged) return StagedScratch(ctx, k.forward_scratch, args);
  return k.forward_scratch == nullptr ? 0 : k.forward_scratch(ctx, args);
}

absl::StatusOr<uint64_t> BackwardScratchOf(CpuContext& ctx, const OpKernels& k,
                                           const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const Bf16Path path, PathOfCall(args));
  if (path == Bf16Path::kStaged) return StagedScratch(ctx, k.backward_scratch, args);
  return k.backward_scratch == nullptr ? 0 : k.backward_scratch(ctx, args);
}

absl::Status RunForward(CpuContext& ctx, const OpKernels& k, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const Bf16Path path, PathOfCall(args));
  if (path == Bf16Path::kStaged) return RunStaged(ctx, k.forward_scratch, k.forward, args);
  return k.forward(ctx, args);
}

absl::Status RunBackward(CpuContext& ctx, const OpKernels& k, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const Bf16Path path, PathOfCall(args));
  if (path == Bf16Path::kStaged) return RunStaged(ctx, k.backward_scratch, k.backward, args);
  return k.backward(ctx, args);
}

absl::Status AccumulateBf16(const TensorView& out, const TensorView& a, const TensorView& b) {
  const uint16_t* x = static_cast<const uint16_t*>(a.data);
  const uint16_t* y = static_cast<const uint16_t*>(b.data);
  uint16_t* z = static_cast<uint16_t*>(out.data);
  const int64_t n = out.num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) {
    z[i] = FloatToBFloat16(BFloat16ToFloat(x[i]) + BFloat16ToFloat(y[i]));
  }
  return absl::OkStatus();
}

}  // namespace headroom::executor::cpu
