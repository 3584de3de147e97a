// Autodiff and planning of bf16 mixed-precision graphs (graph/mixed_precision.h): the
// schedule of a two-layer mlp with every tensor's dtype written out, the dtypes of gradients
// and saved state over the zoo, and plan sizes that follow the dtypes.
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "gmock/gmock.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "graph/mixed_precision.h"
#include "graph/zoo.h"
#include "graph/zoo_testing.h"
#include "gtest/gtest.h"
#include "planner/memory_planner.h"
#include "planner/schedule.h"
#include "planner/training_graph.h"

namespace headroom::planner {
namespace {

graph::Graph Load(const proto::GraphDef& def) {
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  return *std::move(g);
}

graph::Graph Mixed(const graph::Graph& g) {
  absl::StatusOr<graph::Graph> mixed = graph::ToMixedPrecision(g);
  EXPECT_TRUE(mixed.ok()) << mixed.status();
  return *std::move(mixed);
}

TrainingGraph Train(const graph::Graph& g, proto::Optimizer::Kind optimizer) {
  TrainingOptions options;
  options.optimizer = optimizer;
  absl::StatusOr<TrainingGraph> t = TrainingGraph::Build(g, options);
  EXPECT_TRUE(t.ok()) << t.status();
  return *std::move(t);
}

// "node: in1 in2 -> out1" with each tensor's dtype, one line per scheduled node.
std::vector<std::string> ScheduleText(const TrainingGraph& t) {
  absl::StatusOr<Schedule> schedule = ScheduleGraph(t);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  std::vector<std::string> lines;
  auto names = [&](const std::vector<TensorId>& ids) {
    std::vector<std::string> out;
    for (TensorId id : ids)
      out.push_back(absl::StrCat(t.tensor(id).name, ":", graph::DTypeName(t.tensor(id).dtype)));
    return absl::StrJoin(out, " ");
  };
  for (NodeId n : schedule->order) {
    const TrainingNode& node = t.node(n);
    std::string line = absl::StrCat(node.name, " (", node.op, "): ", names(node.inputs));
    if (!node.outputs.empty()) absl::StrAppend(&line, " -> ", names(node.outputs));
    if (!node.updates.empty()) absl::StrAppend(&line, " updates ", names(node.updates));
    lines.push_back(line);
  }
  return lines;
}

// x[4, 8] -> fc1 (8 -> 16) -> relu -> fc2 (16 -> 3) -> cross entropy against labels[4].
graph::Graph TwoLayerMlp() {
  graph::GraphBuilder b("mlp2");
  std::string x = b.Input("x", {4, 8});
  x = b.Linear("fc1", x, 8, 16);
  x = b.Unary("ReLU", "relu", x);
  x = b.Linear("fc2", x, 16, 3);
  b.SetLoss(b.Op("SoftmaxCrossEntropy", "loss", {x, b.Label("labels", {4})}));
  return Load(b.Build());
}

TEST(MixedPrecisionTrainingTest, TwoLayerMlpScheduleWithDtypes) {
  const TrainingGraph t = Train(Mixed(TwoLayerMlp()), proto::Optimizer::KIND_SGD_MOMENTUM);
  // The casts run just before their readers; the loss and its seed are float32; the
  // gradients of the casts' outputs are bfloat16 and each Cast's backward turns its
  // parameter's into the float32 gradient the update reads; the input's cast has no
  // backward (the input needs no gradient).
  const std::vector<std::string> expected = {
      "x.bf16 (Cast): x:float32 -> x.bf16:bfloat16",
      "fc1.weight.bf16 (Cast): fc1.weight:float32 -> fc1.weight.bf16:bfloat16",
      "fc1.bias.bf16 (Cast): fc1.bias:float32 -> fc1.bias.bf16:bfloat16",
      "fc1 (MatMul): x.bf16:bfloat16 fc1.weight.bf16:bfloat16 fc1.bias.bf16:bfloat16 -> "
      "fc1:bfloat16",
      "relu (ReLU): fc1:bfloat16 -> relu:bfloat16",
      "fc2.weight.bf16 (Cast): fc2.weight:float32 -> fc2.weight.bf16:bfloat16",
      "fc2.bias.bf16 (Cast): fc2.bias:float32 -> fc2.bias.bf16:bfloat16",
      "fc2 (MatMul): relu:bfloat16 fc2.weight.bf16:bfloat16 fc2.bias.bf16:bfloat16 -> fc2:bfloat16",
      "loss (SoftmaxCrossEntropy): fc2:bfloat16 labels:int64 -> loss:float32",
      "loss.seed (LossSeed):  -> loss.grad:float32",
      "loss.backward (SoftmaxCrossEntropyGrad): loss.grad:float32 fc2:bfloat16 labels:int64 -> "
      "fc2.grad:bfloat16",
      "fc2.backward (MatMulGrad): fc2.grad:bfloat16 fc2.weight.bf16:bfloat16 relu:bfloat16 -> "
      "relu.grad:bfloat16 fc2.weight.bf16.grad:bfloat16 fc2.bias.bf16.grad:bfloat16",
      "fc2.bias.bf16.backward (CastGrad): fc2.bias.bf16.grad:bfloat16 -> fc2.bias.grad:float32",
      "fc2.bias.update (SgdMomentumUpdate): fc2.bias.grad:float32 updates fc2.bias:float32 "
      "fc2.bias.momentum:float32",
      "fc2.weight.bf16.backward (CastGrad): fc2.weight.bf16.grad:bfloat16 -> "
      "fc2.weight.grad:float32",
      "fc2.weight.update (SgdMomentumUpdate): fc2.weight.grad:float32 updates fc2.weight:float32 "
      "fc2.weight.momentum:float32",
      "relu.backward (ReLUGrad): relu.grad:bfloat16 relu:bfloat16 -> fc1.grad:bfloat16",
      "fc1.backward (MatMulGrad): fc1.grad:bfloat16 x.bf16:bfloat16 -> "
      "fc1.weight.bf16.grad:bfloat16 "
      "fc1.bias.bf16.grad:bfloat16",
      "fc1.bias.bf16.backward (CastGrad): fc1.bias.bf16.grad:bfloat16 -> fc1.bias.grad:float32",
      "fc1.bias.update (SgdMomentumUpdate): fc1.bias.grad:float32 updates fc1.bias:float32 "
      "fc1.bias.momentum:float32",
      "fc1.weight.bf16.backward (CastGrad): fc1.weight.bf16.grad:bfloat16 -> "
      "fc1.weight.grad:float32",
      "fc1.weight.update (SgdMomentumUpdate): fc1.weight.grad:float32 updates fc1.weight:float32 "
      "fc1.weight.momentum:float32",
  };
  const std::vector<std::string> actual = ScheduleText(t);
  EXPECT_EQ(actual, expected) << "actual:\n" << absl::StrJoin(actual, "\n");
}

// Over the zoo: every parameter's final gradient and optimizer state float32, every other
// gradient of a floating tensor in its tensor's dtype (bfloat16 for activations), saved norm
// statistics float32, dropout masks bool.
TEST(MixedPrecisionTrainingTest, ZooGradientAndStateDtypes) {
  for (const char* name : {"resnet18", "transformer", "mlp"}) {
    SCOPED_TRACE(name);
    absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::SmallZooSpec(name, 2));
    ASSERT_TRUE(def.ok()) << def.status();
    const graph::Graph mixed = Mixed(Load(*def));
    const TrainingGraph t = Train(mixed, proto::Optimizer::KIND_ADAM);
    int saved_stats = 0;
    for (const TrainingTensor& tensor : t.tensors()) {
      if (tensor.role == proto::ROLE_OPTIMIZER_STATE) {
        EXPECT_EQ(tensor.dtype, proto::DTYPE_FLOAT32) << tensor.name;
      } else if (tensor.role == proto::ROLE_GRADIENT) {
        ASSERT_NE(tensor.forward_tensor, kNone) << tensor.name;
        EXPECT_EQ(tensor.dtype, mixed.tensor(tensor.forward_tensor).dtype) << tensor.name;
      } else if (absl::EndsWith(tensor.name, ".saved_mean") ||
                 absl::EndsWith(tensor.name, ".saved_invstd") ||
                 absl::EndsWith(tensor.name, ".saved_rstd")) {
        EXPECT_EQ(tensor.dtype, proto::DTYPE_FLOAT32) << tensor.name;
        ++saved_stats;
      } else if (absl::EndsWith(tensor.name, ".mask")) {
        EXPECT_EQ(tensor.dtype, proto::DTYPE_BOOL) << tensor.name;
      }
    }
    for (const graph::Tensor& p : mixed.tensors()) {
      if (p.role != proto::ROLE_PARAMETER) continue;
      const TensorId g = t.FinalGradient(p.name);
      ASSERT_NE(g, kNone) << p.name;
      EXPECT_EQ(t.tensor(g).dtype, proto::DTYPE_FLOAT32) << p.name;
    }
    if (std::string(name) != "mlp") {
      EXPECT_GT(saved_stats, 0);
    }
  }
}

// The training graph's bytes follow the dtypes: each forward activation but the loss halves;
// parameters and optimizer state do not change; the plan's bytes by role equal a count of
// elements x dtype size over the training graph. The casts' bf16 copies of the parameters
// live from their cast to their last backward reader, so the arena falls by less than the
// activations' half: resnet18 at 224x224, batch 32 (activation-bound), falls below 3/4.
TEST(MixedPrecisionTrainingTest, PlanSizesFollowTheDtypes) {
  absl::StatusOr<proto::GraphDef> def = graph::BuildZooModel(graph::ZooSpec("resnet18", 32));
  ASSERT_TRUE(def.ok()) << def.status();
  const graph::Graph fp32 = Load(*def);
  const graph::Graph mixed = Mixed(fp32);
  PlannerOptions options;
  absl::StatusOr<MemoryPlan> a = PlanMemory(fp32, options);
  absl::StatusOr<MemoryPlan> b = PlanMemory(mixed, options);
  ASSERT_TRUE(a.ok() && b.ok());
  const TrainingGraph ta = Train(fp32, proto::Optimizer::KIND_SGD_MOMENTUM);
  const TrainingGraph tb = Train(mixed, proto::Optimizer::KIND_SGD_MOMENTUM);
  // An independent count from the training graphs' tensors: bytes = elements x dtype size.
  auto sum = [](const TrainingGraph& t, proto::TensorRole role) {
    uint64_t bytes = 0;
    for (const TrainingTensor& x : t.tensors()) {
      if (x.role == role) bytes += graph::NumElements(x.shape) * graph::DTypeSize(x.dtype);
    }
    return bytes;
  };
  for (proto::TensorRole role : {proto::ROLE_PARAMETER, proto::ROLE_OPTIMIZER_STATE,
                                 proto::ROLE_ACTIVATION, proto::ROLE_GRADIENT}) {
    EXPECT_EQ(a->bytes_by_role.at(role), sum(ta, role)) << graph::RoleName(role);
    EXPECT_EQ(b->bytes_by_role.at(role), sum(tb, role)) << graph::RoleName(role);
  }
  EXPECT_EQ(b->bytes_by_role.at(proto::ROLE_PARAMETER), a->bytes_by_role.at(proto::ROLE_PARAMETER));
  EXPECT_EQ(b->bytes_by_role.at(proto::ROLE_OPTIMIZER_STATE),
            a->bytes_by_role.at(proto::ROLE_OPTIMIZER_STATE));
  // Every forward activation but the loss halves, tensor by tensor.
  for (const graph::Tensor& x : fp32.tensors()) {
    if (x.producer == graph::kNoNode || x.name == "loss") continue;
    const TensorId id = tb.FindTensor(x.name);
    ASSERT_NE(id, kNone) << x.name;
    EXPECT_EQ(2 * tb.tensor(id).bytes, x.bytes()) << x.name;
  }
  EXPECT_LT(b->arena_bytes, a->arena_bytes * 3 / 4)
      << "fp32 " << a->arena_bytes << ", bf16 " << b->arena_bytes;
}

}  // namespace
}  // namespace headroom::planner
