#include "executor/synthetic_data.h"

#include <cstdint>
#include <map>

#include "graph/graph_builder.h"
#include "graph/mixed_precision.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"

namespace headroom::executor {
namespace {

using graph::IntAttr;

// images[4,3,8,8] -> Conv2D(3 -> 5 classes) -> GroupNorm -> PixelSoftmaxCrossEntropy against
// labels[4,8,8], pixels labelled 255 ignored.
graph::Graph SegmentationGraph() {
  graph::GraphBuilder b("seg");
  const std::string x = b.Input("images", {4, 3, 8, 8});
  const std::string conv = b.Conv2D("conv", x, 3, 5, 3, 1, 1);
  const std::string w = b.Parameter("gn.weight", {5});
  const std::string bias = b.Parameter("gn.bias", {5});
  const std::string gn = b.Op("GroupNorm", "gn", {conv, w, bias}, {{"num_groups", IntAttr(5)}});
  const std::string labels = b.Label("labels", {4, 8, 8});
  b.SetLoss(
      b.Op("PixelSoftmaxCrossEntropy", "loss", {gn, labels}, {{"ignore_index", IntAttr(255)}}));
  return graph::Graph::FromProto(b.Build()).value();
}

TEST(SyntheticTaskTest, PixelLabelsAreTheSamplesClassOrIgnored) {
  const graph::Graph g = SegmentationGraph();
  absl::StatusOr<SyntheticTask> task = SyntheticTask::Create(g, 7);
  ASSERT_TRUE(task.ok()) << task.status();
  int64_t ignored = 0, total = 0;
  std::map<int64_t, int> sample_classes;
  for (int64_t step = 0; step < 3; ++step) {
    for (const HostTensor& t : task->Batch(step)) {
      if (t.name != "labels") continue;
      ASSERT_EQ(t.shape, graph::Shape({4, 8, 8}));
      ASSERT_EQ(t.dtype, proto::DTYPE_INT64);
      const int64_t* v = reinterpret_cast<const int64_t*>(t.bytes.data());
      for (int64_t n = 0; n < 4; ++n) {
        int64_t cls = -1;
        for (int64_t i = 0; i < 64; ++i) {
          const int64_t label = v[n * 64 + i];
          ++total;
          if (label == 255) {
            ++ignored;
            continue;
          }
          ASSERT_GE(label, 0);
          ASSERT_LT(label, 5) << "sample " << n << " pixel " << i;
          if (cls < 0) cls = label;
          EXPECT_EQ(label, cls) << "every counted pixel of a sample has its class";
        }
        ++sample_classes[cls];
      }
    }
  }
  // About one pixel in ten is void; some but far from all.
  EXPECT_GT(ignored, total / 20) << ignored << " of " << total;
  EXPECT_LT(ignored, total / 5) << ignored << " of " << total;
  EXPECT_GT(sample_classes.size(), 1u) << "samples differ in class";
}

// A bf16 run starts from the float32 run's weights at the same seed: a parameter read
// through its bf16 Cast initialises as its copy's readers (Conv2D, MatMul, Embedding)
// initialise it, not as an unknown reader's.
TEST(InitialStateTest, TheBf16RewriteStartsFromTheFloat32Weights) {
  for (const char* model : {"mlp", "resnet18", "transformer"}) {
    std::map<std::string, int64_t> options;
    if (std::string(model) == "transformer") options = {{"layers", 1}, {"sequence", 16}};
    const proto::ZooModel spec = graph::ZooSpec(model, 2, options);
    const graph::Graph g = graph::Graph::FromProto(graph::BuildZooModel(spec).value()).value();
    const graph::Graph mixed = graph::ToMixedPrecision(g).value();
    std::map<std::string, std::vector<uint8_t>> fp32;
    for (const HostTensor& t : InitialState(g, 7)) fp32[t.name] = t.bytes;
    int compared = 0;
    for (const HostTensor& t : InitialState(mixed, 7)) {
      ASSERT_TRUE(fp32.count(t.name)) << model << ": " << t.name;
      EXPECT_TRUE(fp32[t.name] == t.bytes) << model << ": " << t.name << " differs";
      ++compared;
    }
    EXPECT_EQ(compared, static_cast<int>(fp32.size())) << model;
  }
}

}  // namespace
}  // namespace headroom::executor
