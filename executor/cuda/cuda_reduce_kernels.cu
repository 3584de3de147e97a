// The CUDA backend's reductions over axes, ReduceSum, ReduceMax and ReduceMin, as the CPU
// backend computes them (executor/cpu/cpu_reduce_kernels.cc): one thread per output element
// visits its reduced set in the order of executor/reduce_walk.h, so sums are deterministic
// (in double, rounded once) and bitwise the CPU's. Max and min propagate NaN; their backward is
// PyTorch 1.13's amax/amin backward, dx = (dy / count) * (x == y), so ties share the gradient.
#include <cuda_runtime.h>

#include "absl/strings/str_cat.h"
#include "executor/cuda/cuda_context.h"
#include "executor/cuda/cuda_device_utils.h"
#include "executor/reduce_walk.h"
#include "util/status_macros.h"

namespace headroom::executor::cuda {
namespace {

constexpr int kMaxRank = 8;

enum class Reduce { kSum, kMax, kMin };

// A StridedWalk in a form a kernel can take by value.
struct WalkPlan {
  int rank = 0;
  int64_t dims[kMaxRank];
  int64_t strides[kMaxRank];
};

// The kept and reduced walks of one reduction.
struct ReducePlan {
  WalkPlan kept, reduced;
  int64_t outputs = 0, count = 0;
};

__device__ int64_t OffsetOf(const WalkPlan& w, int64_t i) {
  int64_t off = 0;
  for (int d = w.rank - 1; d >= 0; --d) {
    off += (i % w.dims[d]) * w.strides[d];
    i /= w.dims[d];
  }
  return off;
}

template <Reduce kReduce>
__global__ void ReduceForwardKernel(const float* x, float* y, ReducePlan p) {
  GRID_STRIDE_LOOP(o, p.outputs) {
    const int64_t base = OffsetOf(p.kept, o);
    if (kReduce == Reduce::kSum) {
      double acc = 0;
      for (int64_t r = 0; r < p.count; ++r) acc += x[base + OffsetOf(p.reduced, r)];
      y[o] = static_cast<float>(acc);
    } else {
      float m = x[base];
      for (int64_t r = 0; r < p.count && !isnan(m); ++r) {
        const float v = x[base + OffsetOf(p.reduced, r)];
        if (isnan(v) || (kReduce == Reduce::kMax ? v > m : v < m)) m = v;
      }
      y[o] = m;
    }
  }
}

template <Reduce kReduce>
__global__ void ReduceBackwardKernel(const float* x, const float* y, const float* dy, float* dx,
                                     ReducePlan p) {
  GRID_STRIDE_LOOP(o, p.outputs) {
    const int64_t base = OffsetOf(p.kept, o);
    if (kReduce == Reduce::kSum) {
      for (int64_t r = 0; r < p.count; ++r) dx[base + OffsetOf(p.reduced, r)] = dy[o];
    } else {
      int64_t ties = 0;
      for (int64_t r = 0; r < p.count; ++r) ties += x[base + OffsetOf(p.reduced, r)] == y[o];
      const float share = dy[o] / static_cast<float>(ties);
      for (int64_t r = 0; r < p.count; ++r) {
        const int64_t i = base + OffsetOf(p.reduced, r);
        dx[i] = share * (x[i] == y[o] ? 1.f : 0.f);
      }
    }
  }
}

WalkPlan PlanOf(const StridedWalk& w) {
  WalkPlan p;
  p.rank = static_cast<int>(w.dims.size());
  for (int d = 0; d < p.rank; ++d) {
    p.dims[d] = w.dims[d];
    p.strides[d] = w.strides[d];
  }
  return p;
}

// Returns the plan of the node's x to y after checking dtypes and rank.
absl::StatusOr<ReducePlan> PlanReduce(const std::string& op, const graph::Attrs& attrs,
                                      const TensorView& x, const TensorView& y) {
  RETURN_IF_ERROR(RequireF32(x, "input 'x'"));
  RETURN_IF_ERROR(RequireF32(y, "output 'y'"));
  if (x.rank() > kMaxRank) {
    return absl::UnimplementedError(
        absl::StrCat("op '", op, "': input 'x' has ", x.rank(), " dims; at most ", kMaxRank));
  }
  ASSIGN_OR_RETURN(const ReduceWalk walk, ReduceWalkOf(attrs, x.shape, y.shape));
  ReducePlan p;
  p.kept = PlanOf(walk.kept);
  p.reduced = PlanOf(walk.reduced);
  p.outputs = walk.outputs();
  p.count = walk.reduced_count();
  return p;
}

template <Reduce kReduce>
absl::Status ReduceForward(CudaContext& ctx, const ForwardArgs& args) {
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(const ReducePlan p, PlanReduce(args.op, *args.attrs, x, y));
  ReduceForwardKernel<kReduce>
      <<<GridFor(p.outputs), kThreads, 0, ctx.compute>>>(x.f32(), y.f32(), p);
  HR_CUDA_LAUNCHED("ReduceForwardKernel");
  return absl::OkStatus();
}

template <Reduce kReduce>
absl::Status ReduceBackward(CudaContext& ctx, const BackwardArgs& args) {
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& dy = args.output_grads[0];
  RETURN_IF_ERROR(RequireF32(dx, "gradient of input 'x'"));
  ASSIGN_OR_RETURN(const ReducePlan p,
                   PlanReduce(args.op, *args.attrs, args.inputs[0], args.outputs[0]));
  if (!dy.present()) return ZeroIfPresent(ctx, dx);
  RETURN_IF_ERROR(RequireF32(dy, "gradient of output 'y'"));
  if (kReduce != Reduce::kSum && (!args.inputs[0].present() || !args.outputs[0].present())) {
    return absl::InvalidArgumentError(
        absl::StrCat("op '", args.op, "' backward: needs the data of input 'x' and output 'y'"));
  }
  ReduceBackwardKernel<kReduce><<<GridFor(p.outputs), kThreads, 0, ctx.compute>>>(
      args.inputs[0].f32(), args.outputs[0].f32(), dy.f32(), dx.f32(), p);
  HR_CUDA_LAUNCHED("ReduceBackwardKernel");
  return absl::OkStatus();
}

}  // namespace

void RegisterReduceKernels(KernelTable* table) {
  (*table)["ReduceSum"] = {ReduceForward<Reduce::kSum>, ReduceBackward<Reduce::kSum>};
  (*table)["ReduceMax"] = {ReduceForward<Reduce::kMax>, ReduceBackward<Reduce::kMax>};
  (*table)["ReduceMin"] = {ReduceForward<Reduce::kMin>, ReduceBackward<Reduce::kMin>};
}

}  // namespace headroom::executor::cuda
