// The CUDA backend's row-wise kernels: LayerNorm, Softmax, Embedding, SoftmaxCrossEntropy.
// Most run one block per row with block-wide reductions; results do not depend on the
// launch, so they are deterministic. Embedding's backward sorts the ids (a stable radix
// sort, CUB's) and sums each table row's gradient in id order: deterministic, and bitwise
// the CPU backend's sums.
//
// Ids (Embedding) and labels (SoftmaxCrossEntropy) are checked on the device
// (CudaContext::CheckIndices): one out of range fails the next Synchronize() with
// InvalidArgument, as the CPU backend fails the kernel. Until then the kernels stay in
// bounds: such an id reads as a zero row and gets no gradient; such a label counts as an
// all-zero one-hot row.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"

namespace headroom::executor::cuda {
namespace {

// ---- LayerNorm --------------------------------------------------------------------------

// One block per row of D: y = (x - mean) * rstd * w + b with the biased variance. y may
// alias x (each thread reads its elements before writing them, after both reductions).
__global__ void LayerNormForwardKernel(const float* x, const float* w, const float* b, float* y,
                                       float* mean_out, float* rstd_out, int64_t rows, int64_t d,
                                       float eps) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * d;
    float* yr = y + row * d;
    float sum = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) sum += xr[i];
    const float mean = BlockSum(sum, shared) / d;
    float sq = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float c = xr[i] - mean;
      sq += c * c;
    }
    const float rstd = rsqrtf(BlockSum(sq, shared) / d + eps);
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      yr[i] = (xr[i] - mean) * rstd * w[i] + b[i];
    }
    if (threadIdx.x == 0 && mean_out != nullptr) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// One block per row: dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * w.
__global__ void LayerNormInputGradKernel(const float* x, const float* w, const float* dy,
                                         const float* mean, const float* rstd, float* dx,
                                         int64_t rows, int64_t d) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * d;
    const float* dyr = dy + row * d;
    const float mu = mean[row];
    const float rs = rstd[row];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float g = dyr[i] * w[i];
      sum_g += g;
      sum_gx += g * (xr[i] - mu) * rs;
    }
    const float mean_g = BlockSum(sum_g, shared) / d;
    const float mean_gx = BlockSum(sum_gx, shared) / d;
    for (int64_t i = threadIdx.x; i < d; i += blockDim.x) {
      const float xhat = (xr[i] - mu) * rs;
      dx[row * d + i] = rs * (dyr[i] * w[i] - mean_g - xhat * mean_gx);
    }
  }
}

// Block (32, 8): 32 columns over all rows. dw = sum dy * xhat, db = sum dy (each optional).
__global__ void LayerNormParamGradKernel(const float* x, const float* dy, const float* mean,
                                         const float* rstd, float* dw, float* db, int64_t rows,
                                         int64_t d) {
  __shared__ float partial_w[8][33];
  __shared__ float partial_b[8][33];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float sw = 0.0f, sb = 0.0f;
  if (c < d) {
    for (int64_t r = threadIdx.y; r < rows; r += 8) {
      const float g = dy[r * d + c];
      sw += g * (x[r * d + c] - mean[r]) * rstd[r];
      sb += g;
    }
  }
  partial_w[threadIdx.y][threadIdx.x] = sw;
  partial_b[threadIdx.y][threadIdx.x] = sb;
  __syncthreads();
  if (threadIdx.y == 0 && c < d) {
    float tw = 0.0f, tb = 0.0f;
    for (int k = 0; k < 8; ++k) {
      tw += partial_w[k][threadIdx.x];
      tb += partial_b[k][threadIdx.x];
    }
    if (dw != nullptr) dw[c] = tw;
    if (db != nullptr) db[c] = tb;
  }
}

absl::Status LayerNormForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
  RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
  const int64_t d = x.dim(-1);
  const int64_t rows = x.num_elements() / d;
  float* mean = nullptr;
  float* rstd = nullptr;
  if (args.saved.size() >= 2 && args.saved[0].present() && args.saved[1].present()) {
    mean = args.saved[0].f32();
    rstd = args.saved[1].f32();
  }
  LayerNormForwardKernel<<<RowGrid(rows), kThreads, 0, ctx.compute>>>(
      x.f32(), args.inputs[1].f32(), args.inputs[2].f32(), args.outputs[0].f32(), mean, rstd,
      rows, d, static_cast<float>(args.attrs->Float("epsilon")));
  HR_CUDA_LAUNCHED("LayerNormForwardKernel");
  return absl::OkStatus();
}

absl::Status LayerNormBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  if (args.saved.size() < 2) return absl::InvalidArgumentError("needs saved mean and rstd");
  RETURN_IF_ERROR(RequireF32(args.saved[0], "saved mean"));
  RETURN_IF_ERROR(RequireF32(args.saved[1], "saved rstd"));
  const int64_t d = x.dim(-1);
  const int64_t rows = x.num_elements() / d;
  const TensorView& dx = args.input_grads[0];
  const TensorView& dw = args.input_grads[1];
  const TensorView& db = args.input_grads[2];
  if (dx.present()) {
    RETURN_IF_ERROR(RequireF32(args.inputs[1], "input 'weight'"));
    LayerNormInputGradKernel<<<RowGrid(rows), kThreads, 0, ctx.compute>>>(
        x.f32(), args.inputs[1].f32(), dy.f32(), args.saved[0].f32(), args.saved[1].f32(),
        dx.f32(), rows, d);
    HR_CUDA_LAUNCHED("LayerNormInputGradKernel");
  }
  if (dw.present() || db.present()) {
    LayerNormParamGradKernel<<<static_cast<unsigned>((d + 31) / 32), dim3(32, 8), 0,
                               ctx.compute>>>(x.f32(), dy.f32(), args.saved[0].f32(),
                                              args.saved[1].f32(), dw.f32(), db.f32(), rows, d);
    HR_CUDA_LAUNCHED("LayerNormParamGradKernel");
  }
  return absl::OkStatus();
}

// ---- Softmax ----------------------------------------------------------------------------

// The largest of a row's scaled entries and the sum of exp(scale * x - max) over them.
struct RowExpSum {
  float max, sum_exp;
};

// Returns the RowExpSum of the first `n` entries at `xr`, times `scale`, to every thread of
// the block. `shared` holds 32 floats. REQUIRES: every thread of the block calls it.
__device__ RowExpSum BlockRowExpSum(const float* xr, int64_t n, float scale, float* shared) {
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, scale * xr[j]);
  m = BlockMax(m, shared);
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += expf(scale * xr[j] - m);
  return {m, BlockSum(s, shared)};
}

// One block per row of n along the last axis: y = softmax(scale * x), with columns j > i
// masked out when `causal` (i: the row's index within its [T, T] matrix, T = n). y may
// alias x.
__global__ void SoftmaxRowKernel(const float* x, float* y, int64_t rows, int64_t n, float scale,
                                 bool causal) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * n;
    float* yr = y + row * n;
    const int64_t limit = causal ? row % n + 1 : n;  // Columns [0, limit) take part.
    const RowExpSum r = BlockRowExpSum(xr, limit, scale, shared);
    const float inv = 1.0f / r.sum_exp;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      yr[j] = j < limit ? expf(scale * xr[j] - r.max) * inv : 0.0f;
    }
  }
}

// One block per row: dx = scale * y * (dy - sum(dy * y)). dx may alias dy.
__global__ void SoftmaxRowGradKernel(const float* y, const float* dy, float* dx, int64_t rows,
                                     int64_t n, float scale) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(row, rows) {
    const float* yr = y + row * n;
    const float* dyr = dy + row * n;
    float dot = 0.0f;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += dyr[j] * yr[j];
    dot = BlockSum(dot, shared);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      dx[row * n + j] = scale * yr[j] * (dyr[j] - dot);
    }
  }
}

// One thread per (outer, inner) pair, for an axis that is not the last: x seen as
// [outer, n, inner].
__global__ void SoftmaxStridedKernel(const float* x, float* y, int64_t outer, int64_t n,
                                     int64_t inner, float scale) {
  GRID_STRIDE_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = fmaxf(m, scale * x[base + j * inner]);
    float s = 0.0f;
    for (int64_t j = 0; j < n; ++j) s += expf(scale * x[base + j * inner] - m);
    const float inv = 1.0f / s;
    for (int64_t j = 0; j < n; ++j) {
      y[base + j * inner] = expf(scale * x[base + j * inner] - m) * inv;
    }
  }
}

__global__ void SoftmaxStridedGradKernel(const float* y, const float* dy, float* dx,
                                         int64_t outer, int64_t n, int64_t inner, float scale) {
  GRID_STRIDE_LOOP(t, outer * inner) {
    const int64_t base = (t / inner) * n * inner + t % inner;
    float dot = 0.0f;
    for (int64_t j = 0; j < n; ++j) dot += dy[base + j * inner] * y[base + j * inner];
    for (int64_t j = 0; j < n; ++j) {
      const int64_t k = base + j * inner;
      dx[k] = scale * y[k] * (dy[k] - dot);
    }
  }
}

struct SoftmaxShape {
  int64_t outer = 1, n = 1, inner = 1;
};

SoftmaxShape SoftmaxShapeOf(const TensorView& x, int64_t axis_attr) {
  const int axis = static_cast<int>(axis_attr < 0 ? axis_attr + x.rank() : axis_attr);
  SoftmaxShape s;
  for (int d = 0; d < axis; ++d) s.outer *= x.shape[d];
  s.n = x.shape[axis];
  for (int d = axis + 1; d < x.rank(); ++d) s.inner *= x.shape[d];
  return s;
}

absl::Status SoftmaxForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  const SoftmaxShape s = SoftmaxShapeOf(x, args.attrs->Int("axis"));
  const float scale = static_cast<float>(args.attrs->Float("scale"));
  const bool causal = args.attrs->Bool("causal");
  if (s.inner == 1) {
    SoftmaxRowKernel<<<RowGrid(s.outer), kThreads, 0, ctx.compute>>>(
        x.f32(), args.outputs[0].f32(), s.outer, s.n, scale, causal);
    HR_CUDA_LAUNCHED("SoftmaxRowKernel");
    return absl::OkStatus();
  }
  if (causal) return absl::InvalidArgumentError("causal softmax needs the last axis");
  SoftmaxStridedKernel<<<GridFor(s.outer * s.inner), kThreads, 0, ctx.compute>>>(
      x.f32(), args.outputs[0].f32(), s.outer, s.n, s.inner, scale);
  HR_CUDA_LAUNCHED("SoftmaxStridedKernel");
  return absl::OkStatus();
}

absl::Status SoftmaxBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(y, "output 'y'"));
  const SoftmaxShape s = SoftmaxShapeOf(y, args.attrs->Int("axis"));
  const float scale = static_cast<float>(args.attrs->Float("scale"));
  const float* dy = args.output_grads[0].f32();
  if (s.inner == 1) {
    SoftmaxRowGradKernel<<<RowGrid(s.outer), kThreads, 0, ctx.compute>>>(y.f32(), dy, dx.f32(),
                                                                         s.outer, s.n, scale);
    HR_CUDA_LAUNCHED("SoftmaxRowGradKernel");
    return absl::OkStatus();
  }
  SoftmaxStridedGradKernel<<<GridFor(s.outer * s.inner), kThreads, 0, ctx.compute>>>(
      y.f32(), dy, dx.f32(), s.outer, s.n, s.inner, scale);
  HR_CUDA_LAUNCHED("SoftmaxStridedGradKernel");
  return absl::OkStatus();
}

// ---- Embedding --------------------------------------------------------------------------

template <typename Id>
__global__ void EmbeddingForwardKernel(const Id* ids, const float* table, float* y, int64_t n,
                                       int64_t vocab, int64_t d) {
  GRID_STRIDE_LOOP(i, n) {
    const int64_t id = static_cast<int64_t>(ids[i / d]);
    y[i] = id >= 0 && id < vocab ? table[id * d + i % d] : 0.0f;
  }
}

// positions[j] = j.
__global__ void IotaKernel(int32_t* positions, int64_t n) {
  GRID_STRIDE_LOOP(j, n) positions[j] = static_cast<int32_t>(j);
}

// One thread per (sorted position j, column c); those at the start of a run of equal ids
// sum dy over the run, in the ids' order (the sort is stable), and write the table row's
// gradient: the CPU backend's additions, in its order. Out-of-range ids get nothing.
template <typename Id>
__global__ void EmbeddingRowSumsKernel(const Id* sorted_ids, const int32_t* positions,
                                       const float* dy, float* dtable, int64_t n, int64_t vocab,
                                       int64_t d) {
  GRID_STRIDE_LOOP(i, n * d) {
    const int64_t j = i / d;
    const int64_t c = i % d;
    const Id id = sorted_ids[j];
    if (j > 0 && sorted_ids[j - 1] == id) continue;
    if (id < 0 || static_cast<int64_t>(id) >= vocab) continue;
    float sum = 0.0f;
    for (int64_t k = j; k < n && sorted_ids[k] == id; ++k) {
      sum += dy[static_cast<int64_t>(positions[k]) * d + c];
    }
    dtable[static_cast<int64_t>(id) * d + c] = sum;
  }
}

absl::Status RequireIds(const TensorView& ids, const char* what) {
  if (!ids.present()) return absl::InvalidArgumentError(absl::StrCat(what, " is not given"));
  if (ids.dtype != proto::DTYPE_INT32 && ids.dtype != proto::DTYPE_INT64) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, " has dtype ", graph::DTypeName(ids.dtype), ", needs int32 or int64"));
  }
  return absl::OkStatus();
}

// Calls `launch` with the data of `ids` (checked by RequireIds) as int32_t* or int64_t*.
template <typename Launch>
void WithIds(const TensorView& ids, Launch launch) {
  if (ids.dtype == proto::DTYPE_INT32) {
    launch(ids.i32());
  } else {
    launch(ids.i64());
  }
}

// Issues the device check that every id names a row of the [V, D] table.
absl::Status CheckIdsFitTable(CudaContext& ctx, const TensorView& ids, const TensorView& table) {
  return ctx.CheckIndices(ids, table.dim(0), "op 'Embedding': input 'ids'",
                          absl::StrCat("input 'table' ", graph::ShapeString(table.shape)));
}

absl::Status EmbeddingForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& ids = args.inputs[0];
  const TensorView& table = args.inputs[1];
  RETURN_IF_ERROR(RequireIds(ids, "input 'ids'"));
  RETURN_IF_ERROR(RequireF32(table, "input 'table'"));
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(CheckIdsFitTable(ctx, ids, table));
  const int64_t n = y.num_elements();
  const int64_t vocab = table.dim(0);
  const int64_t d = table.dim(1);
  WithIds(ids, [&](const auto* id) {
    EmbeddingForwardKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(id, table.f32(), y.f32(), n,
                                                                     vocab, d);
  });
  HR_CUDA_LAUNCHED("EmbeddingForwardKernel");
  return absl::OkStatus();
}

// The scratch of Embedding's backward: the sorted ids, the positions (0..n-1) and their
// sorted order, and CUB's temporary storage.
template <typename Id>
absl::StatusOr<std::vector<uint64_t>> EmbeddingBackwardPiecesOf(int64_t n) {
  size_t temp_bytes = 0;
  HR_CUDA(cub::DeviceRadixSort::SortPairs(
      nullptr, temp_bytes, static_cast<const Id*>(nullptr), static_cast<Id*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), static_cast<int>(n)));
  return std::vector<uint64_t>{n * sizeof(Id), n * sizeof(int32_t), n * sizeof(int32_t),
                               temp_bytes};
}

absl::StatusOr<std::vector<uint64_t>> EmbeddingBackwardPieces(const TensorView& ids) {
  RETURN_IF_ERROR(RequireIds(ids, "input 'ids'"));
  const int64_t n = ids.num_elements();
  if (n > INT_MAX) {
    return absl::UnimplementedError(absl::StrCat("input 'ids' ", graph::ShapeString(ids.shape),
                                                 " has ", n, " ids; the backward sorts at most ",
                                                 INT_MAX));
  }
  return ids.dtype == proto::DTYPE_INT32 ? EmbeddingBackwardPiecesOf<int32_t>(n)
                                         : EmbeddingBackwardPiecesOf<int64_t>(n);
}

absl::StatusOr<uint64_t> EmbeddingBackwardScratch(CudaContext&, const BackwardArgs& args) {
  if (!args.input_grads[1].present()) return 0;
  ASSIGN_OR_RETURN(std::vector<uint64_t> pieces, EmbeddingBackwardPieces(args.inputs[0]));
  return CudaContext::ScratchTotal(pieces);
}

template <typename Id>
absl::Status LaunchEmbeddingBackward(CudaContext& ctx, const Id* ids, const float* dy,
                                     float* dtable, int64_t n, int64_t vocab, int64_t d,
                                     const std::vector<void*>& scratch,
                                     const std::vector<uint64_t>& pieces) {
  Id* sorted_ids = static_cast<Id*>(scratch[0]);
  int32_t* positions = static_cast<int32_t*>(scratch[1]);
  int32_t* sorted_positions = static_cast<int32_t*>(scratch[2]);
  IotaKernel<<<GridFor(n), kThreads, 0, ctx.compute>>>(positions, n);
  HR_CUDA_LAUNCHED("IotaKernel");
  size_t temp_bytes = pieces[3];
  HR_CUDA(cub::DeviceRadixSort::SortPairs(scratch[3], temp_bytes, ids, sorted_ids, positions,
                                          sorted_positions, static_cast<int>(n), 0,
                                          static_cast<int>(sizeof(Id) * 8), ctx.compute));
  EmbeddingRowSumsKernel<<<GridFor(n * d), kThreads, 0, ctx.compute>>>(sorted_ids, sorted_positions,
                                                                       dy, dtable, n, vocab, d);
  HR_CUDA_LAUNCHED("EmbeddingRowSumsKernel");
  return absl::OkStatus();
}

absl::Status EmbeddingBackward(CudaContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(ZeroIfPresent(ctx, args.input_grads[0]));  // Ids take no gradient.
  const TensorView& dtable = args.input_grads[1];
  if (!dtable.present()) return absl::OkStatus();
  RETURN_IF_ERROR(RequireF32(dtable, "gradient of input 'table'"));
  const TensorView& ids = args.inputs[0];
  ASSIGN_OR_RETURN(std::vector<uint64_t> pieces, EmbeddingBackwardPieces(ids));
  RETURN_IF_ERROR(CheckIdsFitTable(ctx, ids, dtable));
  // Rows no id names stay zero.
  RETURN_IF_ERROR(ZeroIfPresent(ctx, dtable));
  const TensorView& dy = args.output_grads[0];
  const int64_t n = ids.num_elements();
  const int64_t vocab = dtable.dim(0);
  const int64_t d = dtable.dim(1);
  if (n == 0) return absl::OkStatus();
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, pieces));
  if (ids.dtype == proto::DTYPE_INT32) {
    return LaunchEmbeddingBackward(ctx, ids.i32(), dy.f32(), dtable.f32(), n, vocab, d, scratch,
                                   pieces);
  }
  return LaunchEmbeddingBackward(ctx, ids.i64(), dy.f32(), dtable.f32(), n, vocab, d, scratch,
                                 pieces);
}

// ---- SoftmaxCrossEntropy ----------------------------------------------------------------

// One block per row of c logits: row_loss = logsumexp(x) - x[label].
template <typename Label>
__global__ void CrossEntropyRowsKernel(const float* x, const Label* labels, float* row_loss,
                                       int64_t rows, int64_t c) {
  __shared__ float shared[32];
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * c;
    const RowExpSum r = BlockRowExpSum(xr, c, 1.0f, shared);
    if (threadIdx.x == 0) {
      const int64_t label = static_cast<int64_t>(labels[row]);
      const float picked = label >= 0 && label < c ? xr[label] : 0.0f;
      row_loss[row] = r.max + logf(r.sum_exp) - picked;
    }
  }
}

// One block: loss = mean of row_loss.
__global__ void MeanKernel(const float* values, int64_t n, float* out) {
  __shared__ float shared[32];
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += values[i];
  s = BlockSum(s, shared);
  if (threadIdx.x == 0) out[0] = s / static_cast<float>(n);
}

// One block per row: dx = (softmax(x) - onehot(label)) * dloss / rows.
template <typename Label>
__global__ void CrossEntropyGradKernel(const float* x, const Label* labels, const float* dloss,
                                       float* dx, int64_t rows, int64_t c) {
  __shared__ float shared[32];
  const float g = dloss[0] / static_cast<float>(rows);
  BLOCK_ROW_LOOP(row, rows) {
    const float* xr = x + row * c;
    const RowExpSum r = BlockRowExpSum(xr, c, 1.0f, shared);
    const float inv = 1.0f / r.sum_exp;
    const int64_t label = static_cast<int64_t>(labels[row]);
    for (int64_t j = threadIdx.x; j < c; j += blockDim.x) {
      const float p = expf(xr[j] - r.max) * inv;
      dx[row * c + j] = (p - (j == label ? 1.0f : 0.0f)) * g;
    }
  }
}

// Each row's loss, averaged after: one float per row.
std::vector<uint64_t> CrossEntropyForwardPieces(const TensorView& logits) {
  return {logits.num_elements() / logits.dim(-1) * sizeof(float)};
}

absl::StatusOr<uint64_t> CrossEntropyForwardScratch(CudaContext&, const ForwardArgs& args) {
  RETURN_IF_ERROR(RequireF32(args.inputs[0], "input 'logits'"));
  if (args.inputs[0].rank() < 1) return absl::InvalidArgumentError("input 'logits' is a scalar");
  return CudaContext::ScratchTotal(CrossEntropyForwardPieces(args.inputs[0]));
}

// The logits as [rows, c].
struct LogitRows {
  int64_t rows, c;
};

// Returns the rows of logits `x` after checking x and `labels`.
absl::StatusOr<LogitRows> CheckCrossEntropy(const TensorView& x, const TensorView& labels) {
  RETURN_IF_ERROR(RequireF32(x, "input 'logits'"));
  RETURN_IF_ERROR(RequireIds(labels, "input 'labels'"));
  const int64_t c = x.dim(-1);
  return LogitRows{x.num_elements() / c, c};
}

// Issues the device check that every label names one of the classes of the logits.
absl::Status CheckLabelsFitClasses(CudaContext& ctx, const TensorView& labels,
                                   const TensorView& logits) {
  const int64_t c = logits.dim(-1);
  return ctx.CheckIndices(
      labels, c, "op 'SoftmaxCrossEntropy': input 'labels'",
      absl::StrCat(c, " classes of input 'logits' ", graph::ShapeString(logits.shape)));
}

absl::Status CrossEntropyForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  ASSIGN_OR_RETURN(const LogitRows l, CheckCrossEntropy(x, labels));
  const int64_t c = l.c, rows = l.rows;
  RETURN_IF_ERROR(CheckLabelsFitClasses(ctx, labels, x));
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, CrossEntropyForwardPieces(x)));
  float* row_loss = static_cast<float*>(scratch[0]);
  WithIds(labels, [&](const auto* label) {
    CrossEntropyRowsKernel<<<RowGrid(rows), kThreads, 0, ctx.compute>>>(x.f32(), label, row_loss,
                                                                        rows, c);
  });
  HR_CUDA_LAUNCHED("CrossEntropyRowsKernel");
  MeanKernel<<<1, 1024, 0, ctx.compute>>>(row_loss, rows, args.outputs[0].f32());
  HR_CUDA_LAUNCHED("MeanKernel");
  return absl::OkStatus();
}

absl::Status CrossEntropyBackward(CudaContext& ctx, const BackwardArgs& args) {
  RETURN_IF_ERROR(ZeroIfPresent(ctx, args.input_grads[1]));  // Labels take no gradient.
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& x = args.inputs[0];
  const TensorView& labels = args.inputs[1];
  ASSIGN_OR_RETURN(const LogitRows l, CheckCrossEntropy(x, labels));
  const int64_t c = l.c, rows = l.rows;
  RETURN_IF_ERROR(CheckLabelsFitClasses(ctx, labels, x));
  const float* dloss = args.output_grads[0].f32();
  WithIds(labels, [&](const auto* label) {
    CrossEntropyGradKernel<<<RowGrid(rows), kThreads, 0, ctx.compute>>>(x.f32(), label, dloss,
                                                                        dx.f32(), rows, c);
  });
  HR_CUDA_LAUNCHED("CrossEntropyGradKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterRowKernels(KernelTable* table) {
  (*table)["LayerNorm"] = {LayerNormForward, LayerNormBackward};
  (*table)["Softmax"] = {SoftmaxForward, SoftmaxBackward};
  (*table)["Embedding"] = {EmbeddingForward, EmbeddingBackward, nullptr, EmbeddingBackwardScratch};
  (*table)["SoftmaxCrossEntropy"] = {CrossEntropyForward, CrossEntropyBackward,
                                     CrossEntropyForwardScratch};
}

}  // namespace headroom::executor::cuda
