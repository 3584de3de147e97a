// The CPU backend's kernels for segmentation models: GroupNorm (InstanceNorm is GroupNorm with
// a group per channel) and PixelSoftmaxCrossEntropy, both as loops with PyTorch 1.13's
// formulas (native_group_norm and its backward; F.cross_entropy over axis 1 with an ignore
// index).
//
// Deterministic: loops run in parallel only over independent outputs, and every sum runs in a
// fixed order in double, so results do not depend on the OpenMP thread count. GroupNorm's
// forward may run in place (y over x): each group's statistics are taken before any of its
// elements is written.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <new>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

using absl::StrCat;
using graph::Shape;
using graph::ShapeString;

// Loops over fewer elements than this stay on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;

absl::Status CheckFloat(const std::string& op, const std::string& what, const TensorView& t) {
  if (t.dtype == proto::DTYPE_FLOAT32) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has dtype ", graph::DTypeName(t.dtype),
                                           "; the CPU backend computes in float32 only"));
}

absl::Status NeedData(const std::string& op, const std::string& what, const TensorView& t) {
  if (t.present()) return absl::OkStatus();
  return absl::InternalError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                    " has no data, but the kernel reads it"));
}

absl::Status CheckElements(const std::string& op, const std::string& what, const TensorView& t,
                           int64_t n) {
  if (t.num_elements() == n) return absl::OkStatus();
  return absl::InvalidArgumentError(StrCat("op '", op, "': ", what, " ", ShapeString(t.shape),
                                           " has ", t.num_elements(), " elements, needs ", n));
}

int64_t IndexAt(const TensorView& t, int64_t i) {
  return t.dtype == proto::DTYPE_INT32 ? t.i32()[i] : t.i64()[i];
}

void Fill(const TensorView& t, float value) {
  float* p = t.f32();
  const int64_t n = t.num_elements();
#pragma omp parallel for if (n >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < n; ++i) p[i] = value;
}

// ---- GroupNorm ----------------------------------------------------------------------------

// x[N, C, ...] as N samples of `groups` groups, each of `channels_per_group` channels of
// `spatial` elements (contiguous: a group is one run of channels_per_group * spatial floats).
struct GroupLayout {
  int64_t n = 0;
  int64_t c = 0;
  int64_t groups = 0;
  int64_t channels_per_group = 0;
  int64_t spatial = 0;
  int64_t group_elements() const { return channels_per_group * spatial; }
};

absl::StatusOr<GroupLayout> CheckGroupNorm(const std::string& op, const graph::Attrs& attrs,
                                           const std::vector<TensorView>& inputs) {
  const TensorView& x = inputs[0];
  RETURN_IF_ERROR(CheckFloat(op, "input 'x'", x));
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        StrCat("op '", op, "': input 'x' ", ShapeString(x.shape), " needs at least 2 dims"));
  }
  GroupLayout l;
  l.n = x.dim(0);
  l.c = x.dim(1);
  l.groups = attrs.Int("num_groups");
  if (l.groups <= 0 || l.c % l.groups != 0) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': attribute 'num_groups' is ", l.groups,
                                             "; it must divide the ", l.c, " channels"));
  }
  l.channels_per_group = l.c / l.groups;
  l.spatial = l.c == 0 || l.n == 0 ? 0 : x.num_elements() / (l.n * l.c);
  const char* names[] = {"input 'weight'", "input 'bias'"};
  for (int i = 1; i < 3; ++i) {
    RETURN_IF_ERROR(CheckFloat(op, names[i - 1], inputs[i]));
    if (inputs[i].shape != Shape{l.c}) {
      return absl::InvalidArgumentError(StrCat("op '", op, "': ", names[i - 1], " has shape ",
                                               ShapeString(inputs[i].shape), ", needs [", l.c,
                                               "] for input 'x' ", ShapeString(x.shape)));
    }
  }
  return l;
}

absl::Status GroupNormForward(CpuContext&, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(GroupLayout l, CheckGroupNorm(args.op, *args.attrs, args.inputs));
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckFloat(args.op, "output 'y'", y));
  RETURN_IF_ERROR(CheckElements(args.op, "output 'y'", y, x.num_elements()));
  const int64_t rows = l.n * l.groups;
  float* mean_out = nullptr;
  float* rstd_out = nullptr;
  if (args.training) {
    if (args.saved.size() != 2 || !args.saved[0].present() || !args.saved[1].present()) {
      return absl::InternalError(
          StrCat("op '", args.op, "': a training forward needs saved mean and rstd"));
    }
    RETURN_IF_ERROR(CheckElements(args.op, "saved mean", args.saved[0], rows));
    RETURN_IF_ERROR(CheckElements(args.op, "saved rstd", args.saved[1], rows));
    mean_out = args.saved[0].f32();
    rstd_out = args.saved[1].f32();
  }
  const double eps = args.attrs->Float("epsilon");
  const float* in = x.f32();
  const float* w = args.inputs[1].f32();
  const float* b = args.inputs[2].f32();
  float* out = y.f32();
  const int64_t m = l.group_elements();
#pragma omp parallel for if (x.num_elements() >= kParallelMin) schedule(static)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = in + r * m;
    double sum = 0;
    for (int64_t k = 0; k < m; ++k) sum += xr[k];
    const double mean = m > 0 ? sum / m : 0.0;
    double sq = 0;
    for (int64_t k = 0; k < m; ++k) sq += (xr[k] - mean) * (xr[k] - mean);
    const float mean_f = static_cast<float>(mean);
    const float rstd_f = static_cast<float>(1.0 / std::sqrt((m > 0 ? sq / m : 0.0) + eps));
    // PyTorch's: y = x * scale + shift, scale = rstd * weight, shift = bias - scale * mean.
    const int64_t c0 = (r % l.groups) * l.channels_per_group;
    float* yr = out + r * m;  // May be xr: each element is read just before it is written.
    for (int64_t j = 0; j < l.channels_per_group; ++j) {
      const float scale = rstd_f * w[c0 + j];
      const float shift = -scale * mean_f + b[c0 + j];
      const float* xc = xr + j * l.spatial;
      float* yc = yr + j * l.spatial;
      for (int64_t k = 0; k < l.spatial; ++k) yc[k] = xc[k] * scale + shift;
    }
    if (mean_out != nullptr) {
      mean_out[r] = mean_f;
      rstd_out[r] = rstd_f;
    }
  }
  return absl::OkStatus();
}

// Per sample and channel: sum of dy x and sum of dy, in double (PyTorch's ds and db).
absl::StatusOr<uint64_t> GroupNormBackwardScratch(CpuContext&, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(GroupLayout l, CheckGroupNorm(args.op, *args.attrs, args.inputs));
  return 2 * static_cast<uint64_t>(l.n * l.c) * sizeof(double);
}

absl::Status GroupNormBackward(CpuContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(GroupLayout l, CheckGroupNorm(args.op, *args.attrs, args.inputs));
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) {
    for (const TensorView* g : {&dx, &dw, &db}) {
      if (g->present()) Fill(*g, 0.f);
    }
    return absl::OkStatus();
  }
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(NeedData(args.op, "input 'x'", x));
  if (args.saved.size() != 2) {
    return absl::InternalError(
        StrCat("op '", args.op, "': the backward needs saved mean and rstd"));
  }
  const int64_t rows = l.n * l.groups;
  RETURN_IF_ERROR(NeedData(args.op, "saved mean", args.saved[0]));
  RETURN_IF_ERROR(NeedData(args.op, "saved rstd", args.saved[1]));
  RETURN_IF_ERROR(CheckElements(args.op, "saved mean", args.saved[0], rows));
  RETURN_IF_ERROR(CheckElements(args.op, "saved rstd", args.saved[1], rows));
  const float* in = x.f32();
  const float* g = dy.f32();
  const float* mean = args.saved[0].f32();
  const float* rstd = args.saved[1].f32();
  const int64_t nc = l.n * l.c;
  ASSIGN_OR_RETURN(char* scratch,
                   ctx.Scratch(args.scratch, args.scratch_bytes, 2 * nc * sizeof(double)));
  double* ds = reinterpret_cast<double*>(scratch);
  double* dbias = ds + nc;

  // Step 1: ds[n, c] = sum dy x, db[n, c] = sum dy over each channel's elements.
#pragma omp parallel for if (x.num_elements() >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < nc; ++i) {
    const float* xc = in + i * l.spatial;
    const float* gc = g + i * l.spatial;
    double s = 0, t = 0;
    for (int64_t k = 0; k < l.spatial; ++k) {
      s += static_cast<double>(gc[k]) * xc[k];
      t += gc[k];
    }
    ds[i] = s;
    dbias[i] = t;
  }

  // Step 2: dx = rstd w dy + c2 x + c3 per group (native_group_norm_backward's formulas).
  if (dx.present()) {
    RETURN_IF_ERROR(NeedData(args.op, "input 'weight'", args.inputs[1]));
    RETURN_IF_ERROR(CheckElements(args.op, "gradient of input 'x'", dx, x.num_elements()));
    const float* w = args.inputs[1].f32();
    float* out = dx.f32();
    const int64_t m = l.group_elements();
    const double s = m > 0 ? 1.0 / m : 0.0;
#pragma omp parallel for if (x.num_elements() >= kParallelMin) schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t n = r / l.groups;
      const int64_t c0 = (r % l.groups) * l.channels_per_group;
      double ds_g = 0, db_g = 0;
      for (int64_t j = 0; j < l.channels_per_group; ++j) {
        ds_g += ds[n * l.c + c0 + j] * w[c0 + j];
        db_g += dbias[n * l.c + c0 + j] * w[c0 + j];
      }
      const double mu = mean[r];
      const double rs = rstd[r];
      const float c2 = static_cast<float>((db_g * mu - ds_g) * rs * rs * rs * s);
      const float c3 = static_cast<float>(-c2 * mu - db_g * rs * s);
      for (int64_t j = 0; j < l.channels_per_group; ++j) {
        const float c1 = rstd[r] * w[c0 + j];
        const int64_t at = (n * l.c + c0 + j) * l.spatial;
        for (int64_t k = 0; k < l.spatial; ++k) {
          out[at + k] = c1 * g[at + k] + c2 * in[at + k] + c3;
        }
      }
    }
  }

  // Step 3: dweight[c] = sum_n (ds - db mean) rstd, dbias[c] = sum_n db, in sample order.
  if (dw.present() || db.present()) {
    float* dw_out = dw.present() ? dw.f32() : nullptr;
    float* db_out = db.present() ? db.f32() : nullptr;
    for (int64_t c = 0; c < l.c; ++c) {
      const int64_t group = c / l.channels_per_group;
      double acc_w = 0, acc_b = 0;
      for (int64_t n = 0; n < l.n; ++n) {
        const int64_t r = n * l.groups + group;
        acc_w += (ds[n * l.c + c] - dbias[n * l.c + c] * mean[r]) * rstd[r];
        acc_b += dbias[n * l.c + c];
      }
      if (dw_out != nullptr) dw_out[c] = static_cast<float>(acc_w);
      if (db_out != nullptr) db_out[c] = static_cast<float>(acc_b);
    }
  }
  return absl::OkStatus();
}

// ---- PixelSoftmaxCrossEntropy -------------------------------------------------------------

// logits[N, C, S...] as N x C x pixels; labels[N, S...].
struct PixelLayout {
  int64_t n = 0;
  int64_t classes = 0;
  int64_t pixels = 0;  // Per sample.
  int64_t ignore_index = 0;
};

absl::StatusOr<PixelLayout> CheckPixelCrossEntropy(const std::string& op, const graph::Attrs& attrs,
                                                   const TensorView& logits,
                                                   const TensorView& labels) {
  RETURN_IF_ERROR(CheckFloat(op, "input 'logits'", logits));
  if (labels.dtype != proto::DTYPE_INT32 && labels.dtype != proto::DTYPE_INT64) {
    return absl::InvalidArgumentError(
        StrCat("op '", op, "': input 'labels' ", ShapeString(labels.shape), " has dtype ",
               graph::DTypeName(labels.dtype), ", needs int32 or int64"));
  }
  if (logits.rank() < 2) {
    return absl::InvalidArgumentError(
        StrCat("op '", op, "': input 'logits' ", ShapeString(logits.shape), " needs [N, C, ...]"));
  }
  PixelLayout l;
  l.n = logits.dim(0);
  l.classes = logits.dim(1);
  l.pixels = l.n * l.classes == 0 ? 0 : logits.num_elements() / (l.n * l.classes);
  l.ignore_index = attrs.Int("ignore_index");
  RETURN_IF_ERROR(CheckElements(op, "input 'labels'", labels, l.n * l.pixels));
  return l;
}

// Returns InvalidArgument unless every label is a class of the logits or the ignore index.
absl::Status CheckPixelLabels(const std::string& op, const PixelLayout& l,
                              const TensorView& labels) {
  const int64_t total = labels.num_elements();
  for (int64_t i = 0; i < total; ++i) {
    const int64_t t = IndexAt(labels, i);
    if (t != l.ignore_index && (t < 0 || t >= l.classes)) {
      return absl::InvalidArgumentError(StrCat("op '", op, "': input 'labels' ",
                                               ShapeString(labels.shape), " holds ", t,
                                               " at flat index ", i, ", outside [0, ", l.classes,
                                               ") and not the ignore_index ", l.ignore_index));
    }
  }
  return absl::OkStatus();
}

// The largest logit of pixel `p` (classes `stride` apart) and sum of exp(x - max) in double.
struct PixelExpSum {
  float max;
  double sum_exp;
};

PixelExpSum ScanPixel(const float* xp, int64_t classes, int64_t stride) {
  float m = -std::numeric_limits<float>::infinity();
  for (int64_t k = 0; k < classes; ++k) m = std::max(m, xp[k * stride]);
  double sum = 0;
  for (int64_t k = 0; k < classes; ++k) sum += std::exp(static_cast<double>(xp[k * stride]) - m);
  return {m, sum};
}

// One double per pixel, summed in order after the parallel loop.
absl::StatusOr<uint64_t> PixelCrossEntropyForwardScratch(CpuContext&, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(PixelLayout l,
                   CheckPixelCrossEntropy(args.op, *args.attrs, args.inputs[0], args.inputs[1]));
  return static_cast<uint64_t>(l.n * l.pixels) * sizeof(double);
}

// Returns the number of pixels not labelled ignore_index.
int64_t CountCounted(const PixelLayout& l, const TensorView& labels) {
  int64_t counted = 0;
  for (int64_t i = 0; i < l.n * l.pixels; ++i) counted += IndexAt(labels, i) != l.ignore_index;
  return counted;
}

absl::Status PixelCrossEntropyForward(CpuContext& ctx, const ForwardArgs& args) {
  const TensorView& logits = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(PixelLayout l, CheckPixelCrossEntropy(args.op, *args.attrs, logits, labels));
  RETURN_IF_ERROR(CheckFloat(args.op, "output 'y'", y));
  RETURN_IF_ERROR(CheckElements(args.op, "output 'y'", y, 1));
  RETURN_IF_ERROR(CheckPixelLabels(args.op, l, labels));
  const int64_t total = l.n * l.pixels;
  ASSIGN_OR_RETURN(char* scratch,
                   ctx.Scratch(args.scratch, args.scratch_bytes, total * sizeof(double)));
  double* loss = reinterpret_cast<double*>(scratch);
  const float* in = logits.f32();
#pragma omp parallel for if (logits.num_elements() >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < total; ++i) {
    const int64_t t = IndexAt(labels, i);
    if (t == l.ignore_index) {
      loss[i] = 0;
      continue;
    }
    const float* xp = in + (i / l.pixels) * l.classes * l.pixels + i % l.pixels;
    const PixelExpSum px = ScanPixel(xp, l.classes, l.pixels);
    loss[i] = px.max + std::log(px.sum_exp) - xp[t * l.pixels];
  }
  double sum = 0;
  for (int64_t i = 0; i < total; ++i) sum += loss[i];
  // Every pixel ignored: 0 / 0, NaN, as PyTorch's mean.
  y.f32()[0] = static_cast<float>(sum / static_cast<double>(CountCounted(l, labels)));
  return absl::OkStatus();
}

absl::Status PixelCrossEntropyBackward(CpuContext&, const BackwardArgs& args) {
  const TensorView& dlogits = args.input_grads[0];
  if (!dlogits.present()) return absl::OkStatus();
  const TensorView& logits = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  ASSIGN_OR_RETURN(PixelLayout l, CheckPixelCrossEntropy(args.op, *args.attrs, logits, labels));
  RETURN_IF_ERROR(CheckFloat(args.op, "gradient of input 'logits'", dlogits));
  RETURN_IF_ERROR(
      CheckElements(args.op, "gradient of input 'logits'", dlogits, logits.num_elements()));
  const TensorView& dloss = args.output_grads[0];
  if (!dloss.present()) {
    Fill(dlogits, 0.f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(NeedData(args.op, "input 'logits'", logits));
  RETURN_IF_ERROR(NeedData(args.op, "input 'labels'", labels));
  RETURN_IF_ERROR(CheckPixelLabels(args.op, l, labels));
  const int64_t counted = CountCounted(l, labels);
  const double factor = counted == 0 ? 0.0 : static_cast<double>(dloss.f32()[0]) / counted;
  const int64_t total = l.n * l.pixels;
  const float* in = logits.f32();
  float* out = dlogits.f32();
#pragma omp parallel for if (logits.num_elements() >= kParallelMin) schedule(static)
  for (int64_t i = 0; i < total; ++i) {
    const int64_t offset = (i / l.pixels) * l.classes * l.pixels + i % l.pixels;
    const float* xp = in + offset;
    float* dp = out + offset;
    const int64_t t = IndexAt(labels, i);
    if (t == l.ignore_index) {
      for (int64_t k = 0; k < l.classes; ++k) dp[k * l.pixels] = 0.f;
      continue;
    }
    const PixelExpSum px = ScanPixel(xp, l.classes, l.pixels);
    for (int64_t k = 0; k < l.classes; ++k) {
      const double p = std::exp(static_cast<double>(xp[k * l.pixels]) - px.max) / px.sum_exp;
      dp[k * l.pixels] = static_cast<float>((p - (k == t ? 1.0 : 0.0)) * factor);
    }
  }
  return absl::OkStatus();
}

// ---- Kernel entry -------------------------------------------------------------------------

// Checks the argument counts against the schema, and turns a failed allocation of a
// temporary into ResourceExhausted, as the other kernel files' entries do.
absl::Status CheckCounts(const std::string& op, const graph::Attrs* attrs, size_t num_inputs,
                         size_t num_outputs) {
  const graph::OpSchema* s = graph::FindOp(op);
  if (s == nullptr) return absl::InternalError(StrCat("op '", op, "' is not in the op set"));
  if (num_inputs != s->input_names.size() || num_outputs != s->output_names.size()) {
    return absl::InvalidArgumentError(
        StrCat("op '", op, "': got ", num_inputs, " inputs and ", num_outputs, " outputs"));
  }
  if (attrs == nullptr) {
    return absl::InvalidArgumentError(StrCat("op '", op, "': no attributes given"));
  }
  return absl::OkStatus();
}

template <ForwardKernel kKernel>
absl::Status GuardedForward(CpuContext& ctx, const ForwardArgs& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.attrs, args.inputs.size(), args.outputs.size()));
  for (size_t i = 0; i < args.inputs.size(); ++i) {
    RETURN_IF_ERROR(NeedData(args.op, StrCat("input ", i), args.inputs[i]));
  }
  RETURN_IF_ERROR(NeedData(args.op, "output 'y'", args.outputs[0]));
  try {
    return kKernel(ctx, args);
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
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        StrCat("op '", args.op, "' backward: out of host memory for a temporary"));
  }
}

template <typename Args, absl::StatusOr<uint64_t> (*kScratch)(CpuContext&, const Args&)>
absl::StatusOr<uint64_t> GuardedScratch(CpuContext& ctx, const Args& args) {
  RETURN_IF_ERROR(CheckCounts(args.op, args.attrs, args.inputs.size(), args.outputs.size()));
  return kScratch(ctx, args);
}

}  // namespace

void RegisterSegmentationKernels(KernelTable* table) {
  (*table)["GroupNorm"] = {&GuardedForward<GroupNormForward>, &GuardedBackward<GroupNormBackward>,
                           nullptr, &GuardedScratch<BackwardArgs, GroupNormBackwardScratch>};
  (*table)["PixelSoftmaxCrossEntropy"] = {
      &GuardedForward<PixelCrossEntropyForward>, &GuardedBackward<PixelCrossEntropyBackward>,
      &GuardedScratch<ForwardArgs, PixelCrossEntropyForwardScratch>, nullptr};
}

}  // namespace headroom::executor::cpu
