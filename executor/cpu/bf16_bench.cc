// bfloat16 against float32 on the CPU backend's kernels, at resnet18 and GPT-2 small sizes:
// `bazel run -c opt //executor/cpu:bf16_bench [-- REPS]` prints, per kernel and direction,
// the median wall time of REPS calls (default 10, after 2 warm-up calls) in float32 and in
// bfloat16, and their ratio (float32 / bfloat16: above 1, bfloat16 is faster). Each call
// runs in the scratch it declares (the bytes are printed too), as the executor runs it.
//
// Conv2D, MatMul, GELU, BatchNorm and the pools' forwards run oneDNN's bf16 primitives
// (AVX-512 BF16 where the CPU has it, float32 accumulation and statistics); LayerNorm, Add,
// Softmax, Dropout, Embedding, the loss and the pools' backwards are loops that widen each
// bfloat16 element as they read it; GroupNorm shows what a staged op (its float32 kernel on
// float32 copies) costs.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "executor/cpu/cpu_kernels.h"
#include "executor/kernel_args.h"
#include "graph/graph_builder.h"
#include "graph/op_registry.h"
#include "graph/shape.h"
#include "util/bfloat16.h"
#include "util/check.h"
#include "util/median.h"

namespace headroom::executor::cpu {
namespace {

// A kernel call to time: op, attributes, input and output shapes.
struct Case {
  std::string name;
  std::string op;
  std::map<std::string, proto::AttrValue> attrs;
  std::vector<graph::Shape> inputs;
  graph::Shape output;
  // Inputs from this index on stay float32 in the bf16 run (norm parameters).
  size_t float32_inputs_from = 1000;
  // Saved statistics, always float32 (unless saved_dtype says otherwise: Dropout's mask).
  std::vector<graph::Shape> saved;
  // Inputs holding int64 indices in [0, index_limit) (labels, ids): no gradient.
  std::vector<size_t> index_inputs;
  int64_t index_limit = 0;
  // The output is float32 in both runs (the loss).
  bool float32_output = false;
  proto::DType saved_dtype = proto::DTYPE_FLOAT32;
};

// Bytes for one tensor in one dtype, filled with values in [-1, 1).
struct Buffer {
  Buffer(const graph::Shape& shape, proto::DType dtype, std::mt19937& rng, int64_t limit = 0)
      : shape(shape), dtype(dtype), bytes(graph::NumElements(shape) * graph::DTypeSize(dtype)) {
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    const int64_t n = graph::NumElements(shape);
    if (dtype == proto::DTYPE_INT64) {  // Indices spread over [0, limit).
      for (int64_t i = 0; i < n; ++i) {
        reinterpret_cast<int64_t*>(bytes.data())[i] = (i * 7919) % limit;
      }
      return;
    }
    if (dtype == proto::DTYPE_BOOL) return;  // The forward writes the mask.
    for (int64_t i = 0; i < n; ++i) {
      const float v = dist(rng);
      if (dtype == proto::DTYPE_BFLOAT16) {
        reinterpret_cast<uint16_t*>(bytes.data())[i] = FloatToBFloat16(v);
      } else {
        reinterpret_cast<float*>(bytes.data())[i] = v;
      }
    }
  }
  TensorView View() { return {bytes.data(), shape, dtype}; }

  graph::Shape shape;
  proto::DType dtype;
  std::vector<uint8_t> bytes;
};

graph::Attrs AttrsOf(const Case& c) {
  const graph::OpSchema* schema = graph::FindOp(c.op);
  CHECK(schema != nullptr) << c.op;
  std::map<std::string, proto::AttrValue> values;
  for (const graph::AttrSpec& spec : schema->attrs) values[spec.name] = spec.default_value;
  for (const auto& [name, value] : c.attrs) values[name] = value;
  return graph::Attrs(values);
}

// Returns the median seconds of `reps` calls of `run` after two warm-up calls.
double MedianSeconds(int reps, const std::function<absl::Status()>& run) {
  for (int i = 0; i < 2; ++i) CHECK(run().ok()) << run();
  std::vector<double> seconds;
  for (int i = 0; i < reps; ++i) {
    const auto begin = std::chrono::steady_clock::now();
    const absl::Status status = run();
    const auto end = std::chrono::steady_clock::now();
    CHECK(status.ok()) << status;
    seconds.push_back(std::chrono::duration<double>(end - begin).count());
  }
  return Median(seconds);
}

struct Timing {
  double forward_seconds = 0, backward_seconds = 0;
  uint64_t forward_scratch = 0, backward_scratch = 0;
};

// Times the forward and the backward (every input gradient wanted) of `c` in `dtype`.
Timing Time(CpuKernels& kernels, const Case& c, proto::DType dtype, int reps) {
  std::mt19937 rng(7);
  const graph::Attrs attrs = AttrsOf(c);
  std::vector<Buffer> inputs, grads, saved;
  for (size_t i = 0; i < c.inputs.size(); ++i) {
    const bool index =
        std::find(c.index_inputs.begin(), c.index_inputs.end(), i) != c.index_inputs.end();
    const proto::DType d = index                       ? proto::DTYPE_INT64
                           : i < c.float32_inputs_from ? dtype
                                                       : proto::DTYPE_FLOAT32;
    inputs.emplace_back(c.inputs[i], d, rng, c.index_limit);
    grads.emplace_back(index ? graph::Shape{0} : c.inputs[i], d, rng, c.index_limit);
  }
  for (const graph::Shape& s : c.saved) saved.emplace_back(s, c.saved_dtype, rng);
  const proto::DType out_dtype = c.float32_output ? proto::DTYPE_FLOAT32 : dtype;
  Buffer output(c.output, out_dtype, rng), output_grad(c.output, out_dtype, rng);
  ForwardArgs f;
  f.op = c.op;
  f.attrs = &attrs;
  for (Buffer& b : inputs) f.inputs.push_back(b.View());
  f.outputs = {output.View()};
  for (Buffer& s : saved) f.saved.push_back(s.View());
  BackwardArgs b;
  b.op = c.op;
  b.attrs = &attrs;
  b.inputs = f.inputs;
  b.outputs = f.outputs;
  b.saved = f.saved;
  b.output_grads = {output_grad.View()};
  for (size_t i = 0; i < grads.size(); ++i) {
    TensorView g = grads[i].View();
    if (grads[i].bytes.empty()) g = {nullptr, c.inputs[i], grads[i].dtype};  // No gradient.
    b.input_grads.push_back(g);
  }

  f.training = true;
  f.seed = 11;
  Timing t;
  absl::StatusOr<uint64_t> bytes = kernels.ScratchBytes(f);
  CHECK(bytes.ok()) << bytes.status();
  t.forward_scratch = *bytes;
  std::vector<uint8_t> forward_scratch(*bytes + 64);
  f.scratch = *bytes > 0 ? forward_scratch.data() : nullptr;
  f.scratch_bytes = *bytes;
  bytes = kernels.ScratchBytes(b);
  CHECK(bytes.ok()) << bytes.status();
  t.backward_scratch = *bytes;
  std::vector<uint8_t> backward_scratch(*bytes + 64);
  b.scratch = *bytes > 0 ? backward_scratch.data() : nullptr;
  b.scratch_bytes = *bytes;

  t.forward_seconds = MedianSeconds(reps, [&] { return kernels.Forward(f); });
  t.backward_seconds = MedianSeconds(reps, [&] { return kernels.Backward(b); });
  return t;
}

std::vector<Case> Cases() {
  using graph::IntsAttr;
  const auto conv = [](const char* name, int64_t n, int64_t c, int64_t hw, int64_t o, int64_t k,
                       int64_t stride) {
    const int64_t pad = k / 2, out = (hw + 2 * pad - k) / stride + 1;
    return Case{name,
                "Conv2D",
                {{"stride", IntsAttr({stride, stride})}, {"padding", IntsAttr({pad, pad})}},
                {{n, c, hw, hw}, {o, c, k, k}},
                {n, o, out, out}};
  };
  return {
      // resnet18 at batch 8 on 224x224.
      conv("resnet18 conv1 7x7/2 3->64 @224, batch 8", 8, 3, 224, 64, 7, 2),
      conv("resnet18 layer1 3x3 64->64 @56, batch 8", 8, 64, 56, 64, 3, 1),
      conv("resnet18 layer3 3x3 256->256 @14, batch 8", 8, 256, 14, 256, 3, 1),
      {"resnet18 BatchNorm [8,64,112,112]",
       "BatchNorm",
       {},
       {{8, 64, 112, 112}, {64}, {64}},
       {8, 64, 112, 112},
       /*float32_inputs_from=*/1,
       /*saved=*/{{64}, {64}}},
      {"resnet18 MaxPool 3x3/2 [8,64,112,112]",
       "MaxPool",
       {{"kernel_size", IntsAttr({3, 3})},
        {"stride", IntsAttr({2, 2})},
        {"padding", IntsAttr({1, 1})}},
       {{8, 64, 112, 112}},
       {8, 64, 56, 56}},
      {"resnet18 GlobalAvgPool [8,512,7,7]", "GlobalAvgPool", {}, {{8, 512, 7, 7}}, {8, 512, 1, 1}},
      {"GroupNorm 32 groups [8,64,56,56] (staged)",
       "GroupNorm",
       {{"num_groups", graph::IntAttr(32)}},
       {{8, 64, 56, 56}, {64}, {64}},
       {8, 64, 56, 56},
       /*float32_inputs_from=*/1,
       /*saved=*/{{8, 32}, {8, 32}}},
      // GPT-2 small at batch 4, sequence 512 (d 768, 12 heads).
      {"gpt2 qkv [4,512,768]x[768,2304]",
       "MatMul",
       {},
       {{4, 512, 768}, {768, 2304}},
       {4, 512, 2304}},
      {"gpt2 mlp up [4,512,768]x[768,3072]",
       "MatMul",
       {},
       {{4, 512, 768}, {768, 3072}},
       {4, 512, 3072}},
      {"gpt2 attention q k^T [48,512,64]",
       "MatMul",
       {{"transpose_b", graph::BoolAttr(true)}},
       {{48, 512, 64}, {48, 512, 64}},
       {48, 512, 512}},
      {"gpt2 LayerNorm [4,512,768]",
       "LayerNorm",
       {},
       {{4, 512, 768}, {768}, {768}},
       {4, 512, 768},
       /*float32_inputs_from=*/1,
       /*saved=*/{{4, 512}, {4, 512}}},
      {"gpt2 GELU [4,512,3072]", "GELU", {}, {{4, 512, 3072}}, {4, 512, 3072}},
      {"gpt2 residual Add [4,512,768]", "Add", {}, {{4, 512, 768}, {4, 512, 768}}, {4, 512, 768}},
      {"gpt2 causal Softmax [4,12,512,512]",
       "Softmax",
       {{"causal", graph::BoolAttr(true)}, {"scale", graph::FloatAttr(0.125)}},
       {{4, 12, 512, 512}},
       {4, 12, 512, 512}},
      {"gpt2 Dropout 0.1 [4,512,3072]",
       "Dropout",
       {{"rate", graph::FloatAttr(0.1)}},
       {{4, 512, 3072}},
       {4, 512, 3072},
       1000,
       /*saved=*/{{4, 512, 3072}},
       {},
       0,
       false,
       proto::DTYPE_BOOL},
      {"gpt2 Embedding wte [4,512] of [50257,768]",
       "Embedding",
       {},
       {{4, 512}, {50257, 768}},
       {4, 512, 768},
       1000,
       {},
       /*index_inputs=*/{0},
       /*index_limit=*/50257},
      {"gpt2 loss [1,512,50257] (batch 1)",
       "SoftmaxCrossEntropy",
       {},
       {{1, 512, 50257}, {1, 512}},
       {},
       1000,
       {},
       /*index_inputs=*/{1},
       /*index_limit=*/50257,
       /*float32_output=*/true},
  };
}

}  // namespace
}  // namespace headroom::executor::cpu

int main(int argc, char** argv) {
  using namespace headroom::executor::cpu;
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  CHECK(reps > 0) << "REPS must be a positive count, got " << argv[1];
  CpuKernels kernels;
  std::printf("%-46s %-8s %10s %10s %7s %12s %12s\n", "kernel", "pass", "f32 ms", "bf16 ms",
              "f32/bf16", "f32 scratch", "bf16 scratch");
  for (const Case& c : Cases()) {
    const Timing f32 = Time(kernels, c, headroom::proto::DTYPE_FLOAT32, reps);
    const Timing bf16 = Time(kernels, c, headroom::proto::DTYPE_BFLOAT16, reps);
    std::printf("%-46s %-8s %10.3f %10.3f %7.2fx %12llu %12llu\n", c.name.c_str(), "forward",
                f32.forward_seconds * 1e3, bf16.forward_seconds * 1e3,
                f32.forward_seconds / bf16.forward_seconds,
                static_cast<unsigned long long>(f32.forward_scratch),
                static_cast<unsigned long long>(bf16.forward_scratch));
    std::printf("%-46s %-8s %10.3f %10.3f %7.2fx %12llu %12llu\n", "", "backward",
                f32.backward_seconds * 1e3, bf16.backward_seconds * 1e3,
                f32.backward_seconds / bf16.backward_seconds,
                static_cast<unsigned long long>(f32.backward_scratch),
                static_cast<unsigned long long>(bf16.backward_scratch));
    std::fflush(stdout);
  }
  return 0;
}
