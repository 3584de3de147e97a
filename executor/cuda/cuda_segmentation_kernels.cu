// The CUDA backend's kernels for segmentation models: GroupNorm (InstanceNorm is a group per
// channel) and PixelSoftmaxCrossEntropy, with the CPU backend's (PyTorch 1.13's) formulas.
// Reductions run one block per group, channel or the whole loss, in a fixed order for a
// given launch: deterministic.
//
// Labels are checked on the device (CudaContext::CheckIndices, the ignore_index exempt): one
// out of range fails the next Synchronize() with InvalidArgument, as the CPU backend fails the
// kernel. Until then such a pixel counts as ignored.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"

namespace headroom::executor::cuda {
namespace {

// ---- GroupNorm --------------------------------------------------------------------------

// x[N, C, ...] as rows = N * groups groups of m = (C / groups) * spatial contiguous floats.
struct GroupLayout {
  int64_t n, c, groups, channels_per_group, spatial;
  int64_t rows() const { return n * groups; }
};

absl::StatusOr<GroupLayout> CheckGroupNorm(const graph::Attrs& attrs,
                                           const std::vector<TensorView>& inputs) {
  const TensorView& x = inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  if (x.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'x' ", graph::ShapeString(x.shape), " needs at least 2 dims"));
  }
  GroupLayout l;
  l.n = x.dim(0);
  l.c = x.dim(1);
  l.groups = attrs.Int("num_groups");
  if (l.groups <= 0 || l.c % l.groups != 0) {
    return absl::InvalidArgumentError(absl::StrCat("attribute 'num_groups' is ", l.groups,
                                                   "; it must divide the ", l.c, " channels"));
  }
  l.channels_per_group = l.c / l.groups;
  l.spatial = l.n * l.c == 0 ? 0 : x.num_elements() / (l.n * l.c);
  return l;
}

// One block per group: the biased statistics, then y = x * (rstd w) + (b - rstd w mean), as
// PyTorch writes it. y may alias x (each thread reads its elements after both reductions,
// just before writing them).
__global__ void GroupNormForwardKernel(const float* x, const float* w, const float* b, float* y,
                                       float* mean_out, float* rstd_out, int64_t rows,
                                       int64_t groups, int64_t channels_per_group, int64_t spatial,
                                       float eps) {
  __shared__ float shared[32];
  const int64_t m = channels_per_group * spatial;
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * m;
    float* yr = y + row * m;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) sum += xr[i];
    const float mean = BlockSum(sum, shared) / m;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const float d = xr[i] - mean;
      sq += d * d;
    }
    const float rstd = rsqrtf(BlockSum(sq, shared) / m + eps);
    const int64_t c0 = (row % groups) * channels_per_group;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t c = c0 + i / spatial;
      const float scale = rstd * w[c];
      yr[i] = xr[i] * scale + (-scale * mean + b[c]);
    }
    if (threadIdx.x == 0 && mean_out != nullptr) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// One block per (sample, channel): ds = sum dy x, db = sum dy.
__global__ void GroupNormChannelSumsKernel(const float* x, const float* dy, float* ds, float* db,
                                           int64_t channels, int64_t spatial) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(nc, channels) {
    const float* xc = x + nc * spatial;
    const float* gc = dy + nc * spatial;
    float s = 0.0f, t = 0.0f;
    for (int64_t i = threadIdx.x; i < spatial; i += blockDim.x) {
      s += gc[i] * xc[i];
      t += gc[i];
    }
    s = BlockSum(s, shared);
    t = BlockSum(t, shared);
    if (threadIdx.x == 0) {
      ds[nc] = s;
      db[nc] = t;
    }
  }
}

// One block per group: dx = rstd w dy + c2 x + c3 (native_group_norm_backward's formulas).
__global__ void GroupNormInputGradKernel(const float* x, const float* w, const float* dy,
                                         const float* mean, const float* rstd, const float* ds,
                                         const float* db, float* dx, int64_t rows, int64_t c,
                                         int64_t groups, int64_t channels_per_group,
                                         int64_t spatial) {
  const int64_t m = channels_per_group * spatial;
  const float s = 1.0f / static_cast<float>(m);
  BLOCK_ROW_LOOP(row, rows) {
    const int64_t n = row / groups;
    const int64_t c0 = (row % groups) * channels_per_group;
    float ds_g = 0.0f, db_g = 0.0f;
    for (int64_t j = 0; j < channels_per_group; ++j) {  // Every thread, in the same order.
      ds_g += ds[n * c + c0 + j] * w[c0 + j];
      db_g += db[n * c + c0 + j] * w[c0 + j];
    }
    const float mu = mean[row];
    const float rs = rstd[row];
    const float c2 = (db_g * mu - ds_g) * rs * rs * rs * s;
    const float c3 = -c2 * mu - db_g * rs * s;
    for (int64_t i = threadIdx.x; i < m; i += blockDim.x) {
      const int64_t at = row * m + i;
      dx[at] = rs * w[c0 + i / spatial] * dy[at] + c2 * x[at] + c3;
    }
  }
}

// One thread per channel: dw = sum_n (ds - db mean) rstd, dbias = sum_n db, in sample order.
__global__ void GroupNormParamGradKernel(const float* mean, const float* rstd, const float* ds,
                                         const float* db, float* dw, float* dbias, int64_t n,
                                         int64_t c, int64_t groups, int64_t channels_per_group) {
  GRID_STRIDE_LOOP(ch, c) {
    const int64_t g = ch / channels_per_group;
    float acc_w = 0.0f, acc_b = 0.0f;
    for (int64_t k = 0; k < n; ++k) {
      const int64_t r = k * groups + g;
      acc_w += (ds[k * c + ch] - db[k * c + ch] * mean[r]) * rstd[r];
      acc_b += db[k * c + ch];
    }
    if (dw != nullptr) dw[ch] = acc_w;
    if (dbias != nullptr) dbias[ch] = acc_b;
  }
}

absl::Status GroupNormForward(CudaContext& ctx, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const GroupLayout l, CheckGroupNorm(*args.attrs, args.inputs));
  RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
  float* mean = nullptr;
  float* rstd = nullptr;
  if (args.saved.size() >= 2 && args.saved[0].present() && args.saved[1].present()) {
    mean = args.saved[0].f32();
    rstd = args.saved[1].f32();
  }
  GroupNormForwardKernel<<<RowGrid(l.rows()), kThreads, 0, ctx.compute>>>(
      args.inputs[0].f32(), args.inputs[1].f32(), args.inputs[2].f32(), args.outputs[0].f32(), mean,
      rstd, l.rows(), l.groups, l.channels_per_group, l.spatial,
      static_cast<float>(args.attrs->Float("epsilon")));
  HR_CUDA_LAUNCHED("GroupNormForwardKernel");
  return absl::OkStatus();
}

// ds and db per (sample, channel).
std::vector<uint64_t> GroupNormBackwardPieces(const GroupLayout& l) {
  const uint64_t bytes = static_cast<uint64_t>(l.n * l.c) * sizeof(float);
  return {bytes, bytes};
}

absl::StatusOr<uint64_t> GroupNormBackwardScratch(CudaContext&, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const GroupLayout l, CheckGroupNorm(*args.attrs, args.inputs));
  return CudaContext::ScratchTotal(GroupNormBackwardPieces(l));
}

absl::Status GroupNormBackward(CudaContext& ctx, const BackwardArgs& args) {
  ASSIGN_OR_RETURN(const GroupLayout l, CheckGroupNorm(*args.attrs, args.inputs));
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  const TensorView& dy = args.output_grads[0];
  if (!dy.present()) {
    for (const TensorView* g : {&dx, &dw, &db}) RETURN_IF_ERROR(ZeroIfPresent(ctx, *g));
    return absl::OkStatus();
  }
  if (args.saved.size() < 2) return absl::InternalError("GroupNorm backward needs saved state");
  RETURN_IF_ERROR(RequireF32(args.saved[0], "saved mean"));
  RETURN_IF_ERROR(RequireF32(args.saved[1], "saved rstd"));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, GroupNormBackwardPieces(l)));
  float* ds = static_cast<float*>(scratch[0]);
  float* dsum = static_cast<float*>(scratch[1]);
  const float* x = args.inputs[0].f32();
  const float* mean = args.saved[0].f32();
  const float* rstd = args.saved[1].f32();
  GroupNormChannelSumsKernel<<<RowGrid(l.n * l.c), kThreads, 0, ctx.compute>>>(
      x, dy.f32(), ds, dsum, l.n * l.c, l.spatial);
  HR_CUDA_LAUNCHED("GroupNormChannelSumsKernel");
  if (dx.present()) {
    RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
    GroupNormInputGradKernel<<<RowGrid(l.rows()), kThreads, 0, ctx.compute>>>(
        x, args.inputs[1].f32(), dy.f32(), mean, rstd, ds, dsum, dx.f32(), l.rows(), l.c, l.groups,
        l.channels_per_group, l.spatial);
    HR_CUDA_LAUNCHED("GroupNormInputGradKernel");
  }
  if (dw.present() || db.present()) {
    GroupNormParamGradKernel<<<GridFor(l.c), kThreads, 0, ctx.compute>>>(
        mean, rstd, ds, dsum, dw.present() ? dw.f32() : nullptr, db.present() ? db.f32() : nullptr,
        l.n, l.c, l.groups, l.channels_per_group);
    HR_CUDA_LAUNCHED("GroupNormParamGradKernel");
  }
  return absl::OkStatus();
}

// ---- PixelSoftmaxCrossEntropy -----------------------------------------------------------

// logits[N, C, S...] as N x C x pixels; labels[N, S...].
struct PixelLayout {
  int64_t n, classes, pixels, ignore_index;
  int64_t total() const { return n * pixels; }
};

absl::StatusOr<PixelLayout> CheckPixelCrossEntropy(const graph::Attrs& attrs,
                                                   const TensorView& logits,
                                                   const TensorView& labels) {
  RETURN_IF_ERROR(RequireF32(logits, "input 'logits'"));
  if (labels.dtype != proto::DTYPE_INT32 && labels.dtype != proto::DTYPE_INT64) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input 'labels' has dtype ", graph::DTypeName(labels.dtype), ", needs int32 or int64"));
  }
  if (logits.rank() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'logits' ", graph::ShapeString(logits.shape), " needs [N, C, ...]"));
  }
  PixelLayout l;
  l.n = logits.dim(0);
  l.classes = logits.dim(1);
  l.pixels = l.n * l.classes == 0 ? 0 : logits.num_elements() / (l.n * l.classes);
  l.ignore_index = attrs.Int("ignore_index");
  if (labels.num_elements() != l.total()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input 'labels' ", graph::ShapeString(labels.shape), " has ",
                     labels.num_elements(), " elements, needs ", l.total()));
  }
  return l;
}

// Issues the device check that every label is a class of the logits or the ignore index.
absl::Status CheckPixelLabels(CudaContext& ctx, const PixelLayout& l, const TensorView& labels,
                              const TensorView& logits) {
  return ctx.CheckIndices(
      labels, l.classes, "op 'PixelSoftmaxCrossEntropy': input 'labels'",
      absl::StrCat(l.classes, " classes of input 'logits' ", graph::ShapeString(logits.shape),
                   " (ignore_index ", l.ignore_index, ")"),
      l.ignore_index);
}

template <typename Label>
__device__ inline bool Counted(Label label, int64_t classes, int64_t ignore_index) {
  const int64_t t = static_cast<int64_t>(label);
  return t != ignore_index && t >= 0 && t < classes;
}

// One thread per pixel: loss = logsumexp over the classes (`pixels` apart) - x[label], 0 and
// not counted where ignored.
template <typename Label>
__global__ void PixelLossKernel(const float* x, const Label* labels, float* pixel_loss,
                                float* counted, int64_t total, int64_t classes, int64_t pixels,
                                int64_t ignore_index) {
  GRID_STRIDE_LOOP(i, total) {
    const int64_t t = static_cast<int64_t>(labels[i]);
    if (!Counted(labels[i], classes, ignore_index)) {
      pixel_loss[i] = 0.0f;
      counted[i] = 0.0f;
      continue;
    }
    const float* xp = x + (i / pixels) * classes * pixels + i % pixels;
    float m = -INFINITY;
    for (int64_t k = 0; k < classes; ++k) m = fmaxf(m, xp[k * pixels]);
    float sum = 0.0f;
    for (int64_t k = 0; k < classes; ++k) sum += expf(xp[k * pixels] - m);
    pixel_loss[i] = m + logf(sum) - xp[t * pixels];
    counted[i] = 1.0f;
  }
}

// One block: loss = sum of pixel_loss / sum of counted (NaN when nothing counts, as PyTorch).
__global__ void CountedMeanKernel(const float* pixel_loss, const float* counted, int64_t n,
                                  float* out) {
  __shared__ float shared[32];
  float s = 0.0f, k = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    s += pixel_loss[i];
    k += counted[i];
  }
  s = BlockSum(s, shared);
  k = BlockSum(k, shared);
  if (threadIdx.x == 0) out[0] = s / k;
}

// One block: *count = the pixels not ignored.
template <typename Label>
__global__ void CountKernel(const Label* labels, int64_t total, int64_t classes,
                            int64_t ignore_index, float* count) {
  __shared__ float shared[32];
  float k = 0.0f;
  for (int64_t i = threadIdx.x; i < total; i += blockDim.x) {
    k += Counted(labels[i], classes, ignore_index) ? 1.0f : 0.0f;
  }
  k = BlockSum(k, shared);
  if (threadIdx.x == 0) count[0] = k;
}

// One thread per pixel: dx = (softmax - onehot) dloss / count; zero where ignored.
template <typename Label>
__global__ void PixelGradKernel(const float* x, const Label* labels, const float* dloss,
                                const float* count, float* dx, int64_t total, int64_t classes,
                                int64_t pixels, int64_t ignore_index) {
  const float g = count[0] > 0.0f ? dloss[0] / count[0] : 0.0f;
  GRID_STRIDE_LOOP(i, total) {
    const int64_t offset = (i / pixels) * classes * pixels + i % pixels;
    const float* xp = x + offset;
    float* dp = dx + offset;
    if (!Counted(labels[i], classes, ignore_index)) {
      for (int64_t k = 0; k < classes; ++k) dp[k * pixels] = 0.0f;
      continue;
    }
    const int64_t t = static_cast<int64_t>(labels[i]);
    float m = -INFINITY;
    for (int64_t k = 0; k < classes; ++k) m = fmaxf(m, xp[k * pixels]);
    float sum = 0.0f;
    for (int64_t k = 0; k < classes; ++k) sum += expf(xp[k * pixels] - m);
    const float inv = 1.0f / sum;
    for (int64_t k = 0; k < classes; ++k) {
      const float p = expf(xp[k * pixels] - m) * inv;
      dp[k * pixels] = (p - (k == t ? 1.0f : 0.0f)) * g;
    }
  }
}

// Calls `launch` with the labels as int32_t* or int64_t*.
template <typename Launch>
void WithLabels(const TensorView& labels, Launch launch) {
  if (labels.dtype == proto::DTYPE_INT32) {
    launch(labels.i32());
  } else {
    launch(labels.i64());
  }
}

// Each pixel's loss and whether it counts: two floats per pixel.
std::vector<uint64_t> PixelForwardPieces(const PixelLayout& l) {
  const uint64_t bytes = static_cast<uint64_t>(l.total()) * sizeof(float);
  return {bytes, bytes};
}

absl::StatusOr<uint64_t> PixelForwardScratch(CudaContext&, const ForwardArgs& args) {
  ASSIGN_OR_RETURN(const PixelLayout l,
                   CheckPixelCrossEntropy(*args.attrs, args.inputs[0], args.inputs[1]));
  return CudaContext::ScratchTotal(PixelForwardPieces(l));
}

absl::Status PixelForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  ASSIGN_OR_RETURN(const PixelLayout l, CheckPixelCrossEntropy(*args.attrs, x, labels));
  RETURN_IF_ERROR(CheckPixelLabels(ctx, l, labels, x));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, PixelForwardPieces(l)));
  float* pixel_loss = static_cast<float*>(scratch[0]);
  float* counted = static_cast<float*>(scratch[1]);
  WithLabels(labels, [&](const auto* label) {
    PixelLossKernel<<<GridFor(l.total()), kThreads, 0, ctx.compute>>>(
        x.f32(), label, pixel_loss, counted, l.total(), l.classes, l.pixels, l.ignore_index);
  });
  HR_CUDA_LAUNCHED("PixelLossKernel");
  CountedMeanKernel<<<1, 1024, 0, ctx.compute>>>(pixel_loss, counted, l.total(),
                                                 args.outputs[0].f32());
  HR_CUDA_LAUNCHED("CountedMeanKernel");
  return absl::OkStatus();
}

// The count of pixels not ignored.
absl::StatusOr<uint64_t> PixelBackwardScratch(CudaContext&, const BackwardArgs&) {
  return CudaContext::ScratchTotal({sizeof(float)});
}

absl::Status PixelBackward(CudaContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(ZeroIfPresent(ctx, args.input_grads[1]));  // Labels take no gradient.
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& x = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  ASSIGN_OR_RETURN(const PixelLayout l, CheckPixelCrossEntropy(*args.attrs, x, labels));
  const TensorView& dloss = args.output_grads[0];
  if (!dloss.present()) return ZeroIfPresent(ctx, dx);
  RETURN_IF_ERROR(CheckPixelLabels(ctx, l, labels, x));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, {sizeof(float)}));
  float* count = static_cast<float*>(scratch[0]);
  WithLabels(labels, [&](const auto* label) {
    CountKernel<<<1, 1024, 0, ctx.compute>>>(label, l.total(), l.classes, l.ignore_index, count);
  });
  HR_CUDA_LAUNCHED("CountKernel");
  WithLabels(labels, [&](const auto* label) {
    PixelGradKernel<<<GridFor(l.total()), kThreads, 0, ctx.compute>>>(
        x.f32(), label, dloss.f32(), count, dx.f32(), l.total(), l.classes, l.pixels,
        l.ignore_index);
  });
  HR_CUDA_LAUNCHED("PixelGradKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterSegmentationKernels(KernelTable* table) {
  (*table)["GroupNorm"] = {GroupNormForward, GroupNormBackward, nullptr, GroupNormBackwardScratch};
  (*table)["PixelSoftmaxCrossEntropy"] = {PixelForward, PixelBackward, PixelForwardScratch,
                                          PixelBackwardScratch};
}

}  // namespace headroom::executor::cuda
