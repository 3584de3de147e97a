// The CUDA backend's workspace (device memory outside the plan, which a kernel handed less
// planned scratch than it declared takes instead, grown on demand) grows while earlier
// kernels are still queued on the compute stream. Growing frees the old buffer, which a
// queued kernel may still read, so it must wait for the stream first; the results of every
// kernel, queued before and after, must come out right. Skipped without a GPU.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/backend.h"
#include "executor/cuda/cuda_backend.h"
#include "graph/op_registry.h"
#include "gtest/gtest.h"

namespace headroom::executor::cuda {
namespace {

proto::AttrValue Ints(const std::vector<int64_t>& v) {
  proto::AttrValue a;
  a.mutable_ints();
  for (int64_t x : v) a.mutable_ints()->add_values(x);
  return a;
}

// Conv2D's attributes with padding 0 at the top and left and 1 at the bottom and right:
// asymmetric, so the backend pads x into its scratch (cuDNN pads only symmetrically).
graph::Attrs AsymmetricConvAttrs() {
  proto::AttrValue groups;
  groups.set_i(1);
  return graph::Attrs({{"stride", Ints({1, 1})},
                       {"padding", Ints({0, 0, 1, 1})},
                       {"dilation", Ints({1, 1})},
                       {"groups", groups}});
}

// y = conv(x, w) in double with AsymmetricConvAttrs(): x [n, c, h, w], weight [o, c, 3, 3],
// y [n, o, h - 1, w - 1]; and in `magnitude` the sum of the |products| of each output.
std::vector<double> RefConv(const std::vector<float>& x, const std::vector<float>& weight,
                            int64_t n, int64_t c, int64_t h, int64_t w, int64_t o,
                            std::vector<double>* magnitude) {
  const int64_t oh = h - 1, ow = w - 1;
  std::vector<double> y(n * o * oh * ow, 0.0);
  magnitude->assign(y.size(), 0.0);
  for (int64_t b = 0; b < n; ++b)
    for (int64_t oc = 0; oc < o; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = 0, m = 0;
          for (int64_t ic = 0; ic < c; ++ic)
            for (int64_t ky = 0; ky < 3; ++ky)
              for (int64_t kx = 0; kx < 3; ++kx) {
                const int64_t iy = i + ky, ix = j + kx;
                if (iy >= h || ix >= w) continue;  // the bottom and right padding
                const double p = double{x[((b * c + ic) * h + iy) * w + ix]} *
                                 weight[((oc * c + ic) * 3 + ky) * 3 + kx];
                s += p;
                m += std::abs(p);
              }
          y[((b * o + oc) * oh + i) * ow + j] = s;
          (*magnitude)[((b * o + oc) * oh + i) * ow + j] = m;
        }
  return y;
}

// Returns n small floats, exact in every sum here: k / 8 - 4 for k = (37 i + salt) mod 64.
std::vector<float> Values(int64_t n, int64_t salt) {
  std::vector<float> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>((i * 37 + salt) % 64) / 8.0f - 4.0f;
  return v;
}

class CudaWorkspaceTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kArenaBytes = uint64_t{320} << 20;

  void SetUp() override {
    absl::StatusOr<std::unique_ptr<Backend>> backend = CreateCudaBackend(0);
    if (!backend.ok()) GTEST_SKIP() << "no CUDA device: " << backend.status();
    backend_ = *std::move(backend);
    cuda_ = dynamic_cast<CudaBackend*>(backend_.get());
    ASSERT_NE(cuda_, nullptr);
    absl::StatusOr<std::unique_ptr<Buffer>> arena = backend_->AllocateDevice(kArenaBytes);
    ASSERT_TRUE(arena.ok()) << arena.status();
    arena_ = *std::move(arena);
  }

  // Returns a view of fresh arena memory holding `values` (uploaded now).
  TensorView Put(const graph::Shape& shape, const std::vector<float>& values) {
    TensorView v;
    v.shape = shape;
    v.data = static_cast<char*>(arena_->data()) + used_;
    EXPECT_EQ(static_cast<int64_t>(values.size()), v.num_elements());
    used_ += (v.bytes() + 255) / 256 * 256;
    EXPECT_LE(used_, kArenaBytes);
    EXPECT_TRUE(backend_->Upload(v.data, values.data(), v.bytes()).ok());
    return v;
  }

  std::vector<float> Get(const TensorView& v) {
    std::vector<float> out(v.num_elements());
    const absl::Status s = backend_->Download(out.data(), v.data, v.bytes());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }

  // Returns the forward args of an asymmetric convolution of x into a fresh y, with no
  // planned scratch: the kernel takes its scratch from the workspace.
  ForwardArgs Conv(const TensorView& x, const TensorView& weight) {
    ForwardArgs args;
    args.op = "Conv2D";
    args.attrs = &conv_attrs_;
    args.inputs = {x, weight};
    const graph::Shape y_shape = {x.shape[0], weight.shape[0], x.shape[2] - 1, x.shape[3] - 1};
    args.outputs = {Put(y_shape, std::vector<float>(graph::NumElements(y_shape), NAN))};
    return args;
  }

  // Issues `times` doublings of v (v = v + v, exact in float): work that keeps the compute
  // stream busy, checkable to the bit.
  void Double(const TensorView& v, int times) {
    for (int i = 0; i < times; ++i) ASSERT_TRUE(backend_->Accumulate(v, v, v).ok());
  }

  void ExpectConv(const ForwardArgs& args, const std::vector<float>& x,
                  const std::vector<float>& weight, const std::string& what) {
    const TensorView& xv = args.inputs[0];
    std::vector<double> magnitude;
    const std::vector<double> want = RefConv(x, weight, xv.shape[0], xv.shape[1], xv.shape[2],
                                             xv.shape[3], args.inputs[1].shape[0], &magnitude);
    const std::vector<float> got = Get(args.outputs[0]);
    ASSERT_EQ(got.size(), want.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      // Within float32 rounding of what it sums, with room for transform algorithms
      // (Winograd, FFT): 1e-4 of the sum of |products|. Stale or foreign scratch is far off.
      if (!(std::abs(got[i] - want[i]) <= 1e-4 * (1 + magnitude[i])) && ++bad <= 5) {
        ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
      }
    }
    EXPECT_EQ(bad, 0) << what;
  }

  std::unique_ptr<Backend> backend_;
  CudaBackend* cuda_ = nullptr;
  std::unique_ptr<Buffer> arena_;
  uint64_t used_ = 0;
  graph::Attrs conv_attrs_ = AsymmetricConvAttrs();
};

TEST_F(CudaWorkspaceTest, GrowsWhileEarlierKernelsAreQueuedAndResultsStayRight) {
  // Busy work: 32M floats (128 MiB), doubled 32 times in all.
  constexpr int64_t kBusy = int64_t{32} << 20;
  const std::vector<float> busy_values = Values(kBusy, 0);
  const TensorView busy = Put({kBusy}, busy_values);
  // A small convolution (its padded x is about 15 KB) and a large one (about 8.1 MiB),
  // each reading an input that queued work doubles first.
  const std::vector<float> x1 = Values(2 * 4 * 20 * 20, 1), w1 = Values(6 * 4 * 9, 2);
  const std::vector<float> x2 = Values(1 * 8 * 512 * 512, 3), w2 = Values(4 * 8 * 9, 4);
  const TensorView x1v = Put({2, 4, 20, 20}, x1), w1v = Put({6, 4, 3, 3}, w1);
  const TensorView x2v = Put({1, 8, 512, 512}, x2), w2v = Put({4, 8, 3, 3}, w2);
  const ForwardArgs small = Conv(x1v, w1v);
  const ForwardArgs small_again = Conv(x1v, w1v);
  const ForwardArgs large = Conv(x2v, w2v);
  absl::StatusOr<uint64_t> small_scratch = backend_->ScratchBytes(small);
  absl::StatusOr<uint64_t> large_scratch = backend_->ScratchBytes(large);
  ASSERT_TRUE(small_scratch.ok()) << small_scratch.status();
  ASSERT_TRUE(large_scratch.ok()) << large_scratch.status();
  ASSERT_GT(*small_scratch, 0u) << "asymmetric padding needs a padded copy of x";
  // The workspace holds the small convolution's scratch before anything is queued: growing
  // it waits for the stream, and here the stream must stay busy.
  ASSERT_TRUE(cuda_->ReserveWorkspace(*small_scratch).ok());
  ASSERT_TRUE(backend_->Synchronize().ok());
  const uint64_t workspace_small = cuda_->workspace_bytes();
  ASSERT_GT(*large_scratch, workspace_small) << "the large convolution must grow the workspace";

  // 1. Busy work, then the small convolution from the workspace, queued behind it.
  Double(busy, 16);
  Double(x1v, 1);
  ASSERT_TRUE(backend_->Forward(small).ok());
  EXPECT_EQ(cuda_->workspace_bytes(), workspace_small) << "the small convolution fits";

  // 2. More busy work, then the large convolution: the workspace grows while the small
  //    convolution, which reads its padded x from the old buffer, still waits behind the
  //    busy work (milliseconds of it; issuing takes microseconds). No synchronisation since
  //    step 1 began.
  Double(busy, 8);
  Double(x2v, 1);
  ASSERT_TRUE(backend_->Forward(large).ok());
  const uint64_t workspace_large = cuda_->workspace_bytes();
  EXPECT_GT(workspace_large, workspace_small);
  EXPECT_GE(workspace_large, *large_scratch);
  // Had growing not waited, the old buffer would be free while the small convolution still
  // waits to read its padded x there. Take memory of its size (the allocator tends to hand
  // the freed block back) and fill it with NaN from the legacy default stream, which does
  // not wait for the backend's non-blocking compute stream: a convolution reading freed
  // memory would then read NaN.
  absl::StatusOr<std::unique_ptr<Buffer>> reused = backend_->AllocateDevice(workspace_small);
  ASSERT_TRUE(reused.ok()) << reused.status();
  ASSERT_EQ(cudaMemset((*reused)->data(), 0xff, workspace_small), cudaSuccess);

  // 3. The small convolution again, now in the grown workspace, and more busy work.
  ASSERT_TRUE(backend_->Forward(small_again).ok());
  Double(busy, 8);
  ASSERT_TRUE(backend_->Synchronize().ok());
  EXPECT_EQ(cuda_->workspace_bytes(), workspace_large) << "nothing grew it again";

  // Every result is right: the busy vector to the bit, the convolutions of the doubled
  // inputs within float32 rounding.
  const std::vector<float> busy_got = Get(busy);
  for (int64_t i = 0; i < kBusy; ++i) {
    if (busy_got[i] != busy_values[i] * 4294967296.0f) {  // 2^32
      FAIL() << "busy[" << i << "]: got " << busy_got[i] << ", want "
             << busy_values[i] * 4294967296.0f;
    }
  }
  std::vector<float> x1_doubled = x1, x2_doubled = x2;
  for (float& v : x1_doubled) v *= 2;
  for (float& v : x2_doubled) v *= 2;
  ExpectConv(small, x1_doubled, w1, "small convolution before the growth");
  ExpectConv(large, x2_doubled, w2, "large convolution that grew the workspace");
  ExpectConv(small_again, x1_doubled, w1, "small convolution after the growth");
}

}  // namespace
}  // namespace headroom::executor::cuda
