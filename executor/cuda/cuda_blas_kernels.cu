// The CUDA backend's MatMul: a[..., M, K] x b[..., K, N] (+ bias[N]) with transpose_a and
// transpose_b, on cuBLAS (row-major tensors seen as transposed column-major matrices).
// Batch dims: b 2-D (or batch dims all 1), any-rank a; or a and b with equal batch dims, as
// strided batches. Any other broadcast of batch dims ([B,1,M,K] x [1,H,K,N], [M,K] x [B,K,N])
// runs one GEMM per output matrix, pairing the operands' matrices as
// executor/matmul_batches.h decides; each operand's gradient is summed over the products that
// used its matrix, in their order (beta 1 after the first), so it is deterministic.
//
// cuBLAS's workspace is the node's scratch: each MatMul declares CudaContext's
// cublas_workspace_bytes (NVIDIA's recommendation for the device) through ScratchBytes() and
// hands its piece to cublasSetWorkspace before its GEMMs, so cuBLAS allocates no pool of its
// own (Init() sets it to none until then).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/matmul_batches.h"

namespace headroom::executor::cuda {
namespace {

// One GEMM operand: a row-major matrix stored as-is or transposed, `stride` elements apart
// from one batch to the next (0: the same matrix for every batch).
struct Operand {
  const float* data;
  bool transposed;
  int64_t stride;
};

// Row-major out[m, n] = op(x)[m, k] * op(y)[k, n] + beta * out, for `batch` matrices.
// op(x) is x stored [m, k], or transposed, stored [k, m]; likewise y. cuBLAS is
// column-major, so it computes out^T[n, m] = op(y)^T op(x)^T.
absl::Status Gemm(CudaContext& ctx, Operand x, Operand y, float* out, int64_t out_stride,
                  int64_t m, int64_t n, int64_t k, int64_t batch, float beta) {
  for (int64_t v : {m, n, k, batch}) {
    if (v > INT_MAX) {
      return absl::UnimplementedError(
          absl::StrCat("GEMM dimension ", v, " exceeds cuBLAS's 32-bit limit"));
    }
  }
  const float alpha = 1.0f;
  const cublasOperation_t op_y = y.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_x = x.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int lda = static_cast<int>(y.transposed ? k : n);
  const int ldb = static_cast<int>(x.transposed ? m : k);
  const int ldc = static_cast<int>(n);
  if (batch == 1) {
    HR_CUBLAS(cublasSgemm(ctx.cublas, op_y, op_x, static_cast<int>(n), static_cast<int>(m),
                          static_cast<int>(k), &alpha, y.data, lda, x.data, ldb, &beta, out,
                          ldc));
  } else {
    HR_CUBLAS(cublasSgemmStridedBatched(ctx.cublas, op_y, op_x, static_cast<int>(n),
                                        static_cast<int>(m), static_cast<int>(k), &alpha, y.data,
                                        lda, y.stride, x.data, ldb, x.stride, &beta, out, ldc,
                                        out_stride, static_cast<int>(batch)));
  }
  return absl::OkStatus();
}

__global__ void AddBiasKernel(float* y, const float* bias, int64_t n, int64_t cols) {
  GRID_STRIDE_LOOP(i, n) y[i] += bias[i % cols];
}

// The problem sizes of one MatMul node.
struct MatMulShape {
  bool ta = false, tb = false;
  int64_t m = 0, k = 0, n = 0;
  int64_t batch = 1;    // Of a (and of the output).
  bool b_2d = false;    // b's batch dims hold one matrix: it is shared by every batch.
  // Any other broadcast: which of a's and b's matrices each output matrix pairs.
  std::optional<MatMulBatches> pairs;
};

absl::StatusOr<MatMulShape> ShapeOf(const TensorView& a, const TensorView& b,
                                    const graph::Attrs& attrs) {
  if (a.rank() < 2 || b.rank() < 2) {
    return absl::InvalidArgumentError(absl::StrCat("inputs have ", a.rank(), " and ", b.rank(),
                                                   " dims; both need at least 2"));
  }
  MatMulShape s;
  s.ta = attrs.Bool("transpose_a");
  s.tb = attrs.Bool("transpose_b");
  s.m = s.ta ? a.dim(-1) : a.dim(-2);
  s.k = s.ta ? a.dim(-2) : a.dim(-1);
  s.n = s.tb ? b.dim(-2) : b.dim(-1);
  s.batch = a.num_elements() / (s.m * s.k);
  const int64_t b_batch = b.num_elements() / (s.k * s.n);
  s.b_2d = b_batch == 1;
  const graph::Shape a_batch_dims(a.shape.begin(), a.shape.end() - 2);
  const graph::Shape b_batch_dims(b.shape.begin(), b.shape.end() - 2);
  if (!s.b_2d && a_batch_dims != b_batch_dims) {
    absl::StatusOr<MatMulBatches> pairs = BroadcastMatMulBatches(a_batch_dims, b_batch_dims);
    if (!pairs.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("a ", graph::ShapeString(a.shape), " x b ",
                                                     graph::ShapeString(b.shape), ": ",
                                                     pairs.status().message()));
    }
    s.pairs = *std::move(pairs);
  }
  return s;
}

// The scratch of a MatMul, forward or backward (its GEMMs run one after another): cuBLAS's
// workspace.
std::vector<uint64_t> MatMulPieces(const CudaContext& ctx) { return {ctx.cublas_workspace_bytes}; }

template <typename Args>
absl::StatusOr<uint64_t> MatMulScratch(CudaContext& ctx, const Args&) {
  return CudaContext::ScratchTotal(MatMulPieces(ctx));
}

// Gives cuBLAS the node's scratch (or the fallback workspace) as its workspace.
template <typename Args>
absl::Status SetCublasWorkspace(CudaContext& ctx, const Args& args) {
  ASSIGN_OR_RETURN(std::vector<void*> scratch, ctx.Scratch(args, MatMulPieces(ctx)));
  HR_CUBLAS(cublasSetWorkspace(ctx.cublas, ctx.cublas_workspace_bytes > 0 ? scratch[0] : nullptr,
                               ctx.cublas_workspace_bytes));
  return absl::OkStatus();
}

absl::Status MatMulForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& y = args.outputs[0];
  RETURN_IF_ERROR(RequireF32(a, "input 'a'"));
  RETURN_IF_ERROR(RequireF32(b, "input 'b'"));
  ASSIGN_OR_RETURN(MatMulShape s, ShapeOf(a, b, *args.attrs));
  RETURN_IF_ERROR(SetCublasWorkspace(ctx, args));
  const int64_t mk = s.m * s.k, kn = s.k * s.n, mn = s.m * s.n;
  if (s.pairs) {
    for (int64_t i = 0; i < s.pairs->size(); ++i) {
      RETURN_IF_ERROR(Gemm(ctx, {a.f32() + s.pairs->a_of[i] * mk, s.ta, 0},
                           {b.f32() + s.pairs->b_of[i] * kn, s.tb, 0}, y.f32() + i * mn, 0, s.m,
                           s.n, s.k, 1, 0.0f));
    }
  } else if (s.b_2d && !s.ta) {
    // Every batch of a stacked into one [batch * M, K] matrix.
    RETURN_IF_ERROR(Gemm(ctx, {a.f32(), false, 0}, {b.f32(), s.tb, 0}, y.f32(), 0,
                         s.batch * s.m, s.n, s.k, 1, 0.0f));
  } else {
    RETURN_IF_ERROR(Gemm(ctx, {a.f32(), s.ta, mk}, {b.f32(), s.tb, s.b_2d ? 0 : kn}, y.f32(), mn,
                         s.m, s.n, s.k, s.batch, 0.0f));
  }
  if (args.inputs.size() > 2 && args.inputs[2].present()) {
    RETURN_IF_ERROR(RequireF32(args.inputs[2], "input 'bias'"));
    const int64_t total = y.num_elements();
    AddBiasKernel<<<GridFor(total), kThreads, 0, ctx.compute>>>(y.f32(), args.inputs[2].f32(),
                                                                total, s.n);
    HR_CUDA_LAUNCHED("AddBiasKernel");
  }
  return absl::OkStatus();
}

// The gradients of a broadcast MatMul: output matrix i adds dy_i op(b_j)^T to da's matrix
// a_of[i] and op(a_j)^T dy_i to db's matrix b_of[i] (transposed for a transposed operand),
// each matrix's first product written with beta 0, the rest added with beta 1, in order.
absl::Status BroadcastBackward(CudaContext& ctx, const MatMulShape& s, const TensorView& a,
                               const TensorView& b, const TensorView& dy, const TensorView& da,
                               const TensorView& db) {
  const int64_t m = s.m, k = s.k, n = s.n;
  const int64_t mk = m * k, kn = k * n, mn = m * n;
  if (da.present()) {
    RETURN_IF_ERROR(RequireF32(b, "input 'b'"));
    std::vector<bool> written(a.num_elements() / mk, false);
    for (int64_t i = 0; i < s.pairs->size(); ++i) {
      const int64_t ai = s.pairs->a_of[i];
      const float beta = written[ai] ? 1.0f : 0.0f;
      written[ai] = true;
      const float* bj = b.f32() + s.pairs->b_of[i] * kn;
      const float* dyi = dy.f32() + i * mn;
      if (!s.ta) {
        RETURN_IF_ERROR(
            Gemm(ctx, {dyi, false, 0}, {bj, !s.tb, 0}, da.f32() + ai * mk, 0, m, k, n, 1, beta));
      } else {
        RETURN_IF_ERROR(
            Gemm(ctx, {bj, s.tb, 0}, {dyi, true, 0}, da.f32() + ai * mk, 0, k, m, n, 1, beta));
      }
    }
  }
  if (db.present()) {
    RETURN_IF_ERROR(RequireF32(a, "input 'a'"));
    std::vector<bool> written(b.num_elements() / kn, false);
    for (int64_t i = 0; i < s.pairs->size(); ++i) {
      const int64_t bi = s.pairs->b_of[i];
      const float beta = written[bi] ? 1.0f : 0.0f;
      written[bi] = true;
      const float* aj = a.f32() + s.pairs->a_of[i] * mk;
      const float* dyi = dy.f32() + i * mn;
      if (!s.tb) {
        RETURN_IF_ERROR(
            Gemm(ctx, {aj, !s.ta, 0}, {dyi, false, 0}, db.f32() + bi * kn, 0, k, n, m, 1, beta));
      } else {
        RETURN_IF_ERROR(
            Gemm(ctx, {dyi, true, 0}, {aj, s.ta, 0}, db.f32() + bi * kn, 0, n, k, m, 1, beta));
      }
    }
  }
  return absl::OkStatus();
}

// The gradients where b is shared or the batch dims are equal (strided batches).
absl::Status PairedBackward(CudaContext& ctx, const MatMulShape& s, const TensorView& a,
                            const TensorView& b, const TensorView& dy, const TensorView& da,
                            const TensorView& db) {
  const int64_t m = s.m, k = s.k, n = s.n;
  const int64_t mk = m * k, kn = k * n, mn = m * n;
  if (da.present()) {
    RETURN_IF_ERROR(RequireF32(b, "input 'b'"));
    const int64_t b_stride = s.b_2d ? 0 : kn;
    if (!s.ta && s.b_2d) {
      RETURN_IF_ERROR(Gemm(ctx, {dy.f32(), false, 0}, {b.f32(), !s.tb, 0}, da.f32(), 0,
                           s.batch * m, k, n, 1, 0.0f));
    } else if (!s.ta) {
      RETURN_IF_ERROR(Gemm(ctx, {dy.f32(), false, mn}, {b.f32(), !s.tb, b_stride}, da.f32(), mk,
                           m, k, n, s.batch, 0.0f));
    } else {
      RETURN_IF_ERROR(Gemm(ctx, {b.f32(), s.tb, b_stride}, {dy.f32(), true, mn}, da.f32(), mk,
                           k, m, n, s.batch, 0.0f));
    }
  }
  if (db.present()) {
    RETURN_IF_ERROR(RequireF32(a, "input 'a'"));
    if (!s.b_2d) {
      if (!s.tb) {
        RETURN_IF_ERROR(Gemm(ctx, {a.f32(), !s.ta, mk}, {dy.f32(), false, mn}, db.f32(), kn, k,
                             n, m, s.batch, 0.0f));
      } else {
        RETURN_IF_ERROR(Gemm(ctx, {dy.f32(), true, mn}, {a.f32(), s.ta, mk}, db.f32(), kn, n, k,
                             m, s.batch, 0.0f));
      }
    } else if (!s.ta) {
      // Sum over the batch: every batch of a and dy stacked into one reduction dim.
      if (!s.tb) {
        RETURN_IF_ERROR(Gemm(ctx, {a.f32(), true, 0}, {dy.f32(), false, 0}, db.f32(), 0, k, n,
                             s.batch * m, 1, 0.0f));
      } else {
        RETURN_IF_ERROR(Gemm(ctx, {dy.f32(), true, 0}, {a.f32(), false, 0}, db.f32(), 0, n, k,
                             s.batch * m, 1, 0.0f));
      }
    } else {
      // a stored [batch, K, M]: batches are not contiguous rows, so accumulate one by one.
      for (int64_t i = 0; i < s.batch; ++i) {
        const float beta = i == 0 ? 0.0f : 1.0f;
        const float* ai = a.f32() + i * mk;
        const float* dyi = dy.f32() + i * mn;
        if (!s.tb) {
          RETURN_IF_ERROR(
              Gemm(ctx, {ai, false, 0}, {dyi, false, 0}, db.f32(), 0, k, n, m, 1, beta));
        } else {
          RETURN_IF_ERROR(Gemm(ctx, {dyi, true, 0}, {ai, true, 0}, db.f32(), 0, n, k, m, 1, beta));
        }
      }
    }
  }
  return absl::OkStatus();
}

// With A = op(a) [M, K], B = op(b) [K, N], C = A B: dA = dC B^T, dB = A^T dC. A gradient of
// a transposed input is the transpose: da = (dA)^T = B dC^T, db = (dB)^T = dC^T A.
absl::Status MatMulBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& a = args.inputs[0];
  const TensorView& b = args.inputs[1];
  const TensorView& dy = args.output_grads[0];
  const TensorView& da = args.input_grads[0];
  const TensorView& db = args.input_grads[1];
  ASSIGN_OR_RETURN(MatMulShape s, ShapeOf(a, b, *args.attrs));
  RETURN_IF_ERROR(SetCublasWorkspace(ctx, args));
  const int64_t n = s.n;
  if (s.pairs) {
    RETURN_IF_ERROR(BroadcastBackward(ctx, s, a, b, dy, da, db));
  } else {
    RETURN_IF_ERROR(PairedBackward(ctx, s, a, b, dy, da, db));
  }
  if (args.input_grads.size() > 2 && args.input_grads[2].present()) {
    RETURN_IF_ERROR(
        ColumnSums(ctx, dy.f32(), dy.num_elements() / n, n, args.input_grads[2].f32()));
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterBlasKernels(KernelTable* table) {
  (*table)["MatMul"] = {MatMulForward, MatMulBackward, MatMulScratch<ForwardArgs>,
                        MatMulScratch<BackwardArgs>};
}

}  // namespace headroom::executor::cuda
