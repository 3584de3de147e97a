// The CPU backend's reductions over axes: ReduceSum, ReduceMax and ReduceMin, as loops over
// the walk executor/reduce_walk.h decides. Each output element is one task, its inputs visited
// in a fixed order, so results do not depend on the OpenMP thread count.
//
// ReduceSum sums in double and rounds once (PyTorch's float cascade sum rounds more often: the
// two agree within a few ulp). ReduceMax and ReduceMin propagate NaN, as torch.amax and
// torch.amin; their backward is PyTorch 1.13's: dx = (dy / count) * (x == y), count the number
// of elements that equal the max (or min) in each reduced set, so ties share the gradient.

#include <cmath>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "executor/cpu/cpu_context.h"
#include "executor/reduce_walk.h"
#include "graph/shape.h"
#include "util/status_macros.h"

namespace headroom::executor::cpu {
namespace {

using absl::StrCat;

// Reductions over fewer input elements than this stay on the calling thread.
constexpr int64_t kParallelMin = 1 << 15;

enum class Reduce { kSum, kMax, kMin };

// Returns the offset of element `i` (row-major over walk.dims) from walk.offset.
int64_t OffsetOf(const StridedWalk& walk, int64_t i) {
  int64_t off = 0;
  for (int d = static_cast<int>(walk.dims.size()) - 1; d >= 0; --d) {
    off += (i % walk.dims[d]) * walk.strides[d];
    i /= walk.dims[d];
  }
  return off;
}

// Calls f(offset) for each element of the reduced set at `base`, in row-major order.
template <typename F>
void ForEachReduced(const StridedWalk& reduced, int64_t count, int64_t base, F f) {
  const int rank = static_cast<int>(reduced.dims.size());
  if (rank == 0) {
    f(base);
    return;
  }
  const int64_t inner = reduced.dims[rank - 1];
  const int64_t step = reduced.strides[rank - 1];
  for (int64_t r = 0; r < count; r += inner) {
    const int64_t row = base + OffsetOf(reduced, r);
    for (int64_t k = 0; k < inner; ++k) f(row + k * step);
  }
}

absl::Status CheckF32(const std::string& op, const char* what, const TensorView& t) {
  if (t.dtype == proto::DTYPE_FLOAT32) return absl::OkStatus();
  return absl::InvalidArgumentError(
      StrCat("op '", op, "': ", what, " has dtype ", graph::DTypeName(t.dtype), ", needs float32"));
}

// Returns the walk of the node's x to y after checking their dtypes.
absl::StatusOr<ReduceWalk> WalkOf(const std::string& op, const graph::Attrs& attrs,
                                  const TensorView& x, const TensorView& y) {
  RETURN_IF_ERROR(CheckF32(op, "input 'x'", x));
  RETURN_IF_ERROR(CheckF32(op, "output 'y'", y));
  absl::StatusOr<ReduceWalk> walk = ReduceWalkOf(attrs, x.shape, y.shape);
  if (!walk.ok()) {
    return absl::Status(walk.status().code(), StrCat("op '", op, "': ", walk.status().message()));
  }
  return walk;
}

template <Reduce kReduce>
absl::Status ReduceForward(CpuContext&, const ForwardArgs& args) {
  if (args.inputs.size() != 1 || args.outputs.size() != 1) {
    return absl::InvalidArgumentError(StrCat("op '", args.op, "': needs 1 input and 1 output"));
  }
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  ASSIGN_OR_RETURN(const ReduceWalk walk, WalkOf(args.op, *args.attrs, x, y));
  const float* xs = x.f32();
  float* ys = y.f32();
  const int64_t outputs = walk.outputs(), count = walk.reduced_count();
#pragma omp parallel for if (outputs * count >= kParallelMin) schedule(static)
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t base = OffsetOf(walk.kept, o);
    if constexpr (kReduce == Reduce::kSum) {
      double acc = 0;
      ForEachReduced(walk.reduced, count, base, [&](int64_t i) { acc += xs[i]; });
      ys[o] = static_cast<float>(acc);
    } else {
      float m = xs[base];
      ForEachReduced(walk.reduced, count, base, [&](int64_t i) {
        const float v = xs[i];
        if (std::isnan(m)) return;
        if (std::isnan(v) || (kReduce == Reduce::kMax ? v > m : v < m)) m = v;
      });
      ys[o] = m;
    }
  }
  return absl::OkStatus();
}

template <Reduce kReduce>
absl::Status ReduceBackward(CpuContext&, const BackwardArgs& args) {
  if (args.inputs.size() != 1 || args.outputs.size() != 1 || args.input_grads.size() != 1 ||
      args.output_grads.size() != 1) {
    return absl::InvalidArgumentError(
        StrCat("op '", args.op, "' backward: needs 1 input, 1 output and their gradients"));
  }
  const TensorView& dx = args.input_grads[0];
  if (!dx.present()) return absl::OkStatus();
  const TensorView& x = args.inputs[0];
  const TensorView& y = args.outputs[0];
  const TensorView& dy = args.output_grads[0];
  ASSIGN_OR_RETURN(const ReduceWalk walk, WalkOf(args.op, *args.attrs, x, y));
  RETURN_IF_ERROR(CheckF32(args.op, "gradient of input 'x'", dx));
  if (dx.num_elements() != x.num_elements()) {
    return absl::InvalidArgumentError(StrCat("op '", args.op, "': gradient of input 'x' ",
                                             graph::ShapeString(dx.shape), " is not x's ",
                                             graph::ShapeString(x.shape)));
  }
  float* d = dx.f32();
  const int64_t outputs = walk.outputs(), count = walk.reduced_count();
  if (!dy.present()) {
    std::fill(d, d + dx.num_elements(), 0.f);
    return absl::OkStatus();
  }
  RETURN_IF_ERROR(CheckF32(args.op, "gradient of output 'y'", dy));
  if (kReduce != Reduce::kSum && (!x.present() || !y.present())) {
    return absl::InvalidArgumentError(
        StrCat("op '", args.op, "' backward: needs the data of input 'x' and output 'y'"));
  }
  const float* g = dy.f32();
  const float* xs = x.f32();
  const float* ys = y.f32();
#pragma omp parallel for if (outputs * count >= kParallelMin) schedule(static)
  for (int64_t o = 0; o < outputs; ++o) {
    const int64_t base = OffsetOf(walk.kept, o);
    if constexpr (kReduce == Reduce::kSum) {
      ForEachReduced(walk.reduced, count, base, [&](int64_t i) { d[i] = g[o]; });
    } else {
      int64_t ties = 0;
      ForEachReduced(walk.reduced, count, base, [&](int64_t i) { ties += xs[i] == ys[o]; });
      const float share = g[o] / static_cast<float>(ties);
      ForEachReduced(walk.reduced, count, base,
                     [&](int64_t i) { d[i] = share * (xs[i] == ys[o] ? 1.f : 0.f); });
    }
  }
  return absl::OkStatus();
}

}  // namespace

void RegisterReduceKernels(KernelTable* table) {
  (*table)["ReduceSum"] = {&ReduceForward<Reduce::kSum>, &ReduceBackward<Reduce::kSum>};
  (*table)["ReduceMax"] = {&ReduceForward<Reduce::kMax>, &ReduceBackward<Reduce::kMax>};
  (*table)["ReduceMin"] = {&ReduceForward<Reduce::kMin>, &ReduceBackward<Reduce::kMin>};
}

}  // namespace headroom::executor::cpu
