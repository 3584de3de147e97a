// The ONNX importer against real exports (tests/BUILD's onnx_exports: torch.onnx in training
// mode, random weights, no dropout, PyTorch's logits for four inputs):
//  - resnet18 imported has exactly the zoo's parameters and a training arena within 1% of
//    the zoo's;
//  - every model imports, trains one step on the CPU backend from its own weights, and the
//    logits its forward pass wrote match PyTorch's to a relative 1e-4.
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "executor/backends.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"
#include "planner/plan_request.h"

namespace headroom {
namespace {

constexpr uint64_t kBatch = 4;

std::string Exported(const std::string& file) {
  return absl::StrCat(std::getenv("TEST_SRCDIR"), "/headroom/tests/onnx/", file);
}

std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

graph::Graph Build(const proto::GraphDef& def) {
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  return g.ok() ? *std::move(g) : graph::Graph::FromProto(proto::GraphDef()).value();
}

std::map<std::string, graph::Shape> Parameters(const graph::Graph& g) {
  std::map<std::string, graph::Shape> params;
  for (const graph::Tensor& t : g.tensors()) {
    if (t.role == proto::ROLE_PARAMETER) params[t.name] = t.shape;
  }
  return params;
}

TEST(OnnxImportE2ETest, ResNet18HasTheZoosParametersAndArena) {
  graph::OnnxImportOptions options;
  options.batch = 16;
  options.keep_values = false;
  absl::StatusOr<graph::ImportedModel> imported =
      graph::ImportOnnxFile(Exported("resnet18.onnx"), options);
  ASSERT_TRUE(imported.ok()) << imported.status();
  std::cout << "resnet18.onnx: " << imported->stats.DebugString() << "\n";
  proto::ZooModel spec;
  spec.set_name("resnet18");
  spec.set_batch(16);
  (*spec.mutable_options())["image_size"] = 64;
  absl::StatusOr<proto::GraphDef> zoo_def = graph::BuildZooModel(spec);
  ASSERT_TRUE(zoo_def.ok()) << zoo_def.status();
  const graph::Graph onnx = Build(imported->graph), zoo = Build(*zoo_def);

  // The same parameters, name by name: torchvision's names survive the export.
  const std::map<std::string, graph::Shape> onnx_params = Parameters(onnx);
  EXPECT_EQ(onnx_params, Parameters(zoo));
  uint64_t count = 0;
  for (const auto& [name, shape] : onnx_params) count += graph::NumElements(shape);
  EXPECT_EQ(count, 11689512u) << "torchvision's resnet18";

  // The training step's arena, planned alike.
  absl::StatusOr<proto::PlanResponse> a = planner::AnswerPlan(onnx, proto::PlanOptions());
  absl::StatusOr<proto::PlanResponse> b = planner::AnswerPlan(zoo, proto::PlanOptions());
  ASSERT_TRUE(a.ok() && b.ok()) << a.status() << b.status();
  const uint64_t arena_onnx = a->summary().arena_bytes(), arena_zoo = b->summary().arena_bytes();
  std::cout << "training arena: imported " << arena_onnx << " B, zoo " << arena_zoo << " B\n";
  EXPECT_LE(std::fabs(double(arena_onnx) - double(arena_zoo)), 0.01 * arena_zoo);
}

class OnnxForwardTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OnnxForwardTest, LogitsMatchPyTorch) {
  const std::string model = GetParam();
  graph::OnnxImportOptions options;
  options.batch = kBatch;
  absl::StatusOr<graph::ImportedModel> imported =
      graph::ImportOnnxFile(Exported(model + ".onnx"), options);
  ASSERT_TRUE(imported.ok()) << imported.status();
  std::cout << model << ".onnx: " << imported->stats.DebugString() << "\n";
  const graph::Graph g = Build(imported->graph);

  // One training step from the model's weights on the reference inputs, the logits read as
  // the forward pass wrote them.
  executor::TrainerOptions trainer_options;
  for (const proto::TensorValue& v : imported->values) {
    trainer_options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  trainer_options.capture = {"logits"};
  absl::StatusOr<std::unique_ptr<executor::Backend>> backend = executor::MakeBackend("cpu");
  ASSERT_TRUE(backend.ok()) << backend.status();
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(g, backend->get(), trainer_options);
  ASSERT_TRUE(trainer.ok()) << trainer.status();
  std::vector<executor::HostTensor> batch;
  for (const graph::Tensor& t : g.tensors()) {
    if (t.role == proto::ROLE_INPUT) {
      executor::HostTensor input = executor::MakeHostTensor(t.name, t.shape, t.dtype);
      input.bytes = ReadBytes(Exported(model + ".input.bin"));
      ASSERT_EQ(input.bytes.size(), t.bytes()) << t.name << " " << graph::ShapeString(t.shape);
      batch.push_back(std::move(input));
    } else if (t.role == proto::ROLE_LABEL) {
      batch.push_back(executor::MakeHostTensor(t.name, t.shape, t.dtype));
    }
  }
  absl::StatusOr<executor::StepResult> step = (*trainer)->StepOn(batch);
  ASSERT_TRUE(step.ok()) << step.status();
  ASSERT_EQ(step->captured.size(), 1u);
  const executor::HostTensor& logits = step->captured[0];

  const std::vector<uint8_t> reference_bytes = ReadBytes(Exported(model + ".output.bin"));
  ASSERT_EQ(reference_bytes.size(), logits.bytes.size());
  const float* ours = logits.f32();
  const float* theirs = reinterpret_cast<const float*>(reference_bytes.data());
  double max_diff = 0, max_ref = 0;
  for (int64_t i = 0; i < logits.num_elements(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double{ours[i]} - double{theirs[i]}));
    max_ref = std::max(max_ref, std::fabs(double{theirs[i]}));
  }
  ASSERT_GT(max_ref, 0) << "PyTorch's logits are all zero: the comparison would say nothing";
  const double relative = max_diff / max_ref;
  std::cout << model << ": logits " << graph::ShapeString(logits.shape) << ", max |ours - "
            << "PyTorch's| " << max_diff << " against max |logit| " << max_ref
            << ", relative " << relative << "\n";
  EXPECT_LT(relative, 1e-4);
  EXPECT_TRUE(std::isfinite(step->loss));
}

INSTANTIATE_TEST_SUITE_P(Exports, OnnxForwardTest,
                         ::testing::Values("resnet18", "mobilenet_v3_small", "shufflenet_v2_x0_5",
                                           "efficientnet_b0", "squeezenet1_1", "mnasnet0_5",
                                           "vit_test", "swin_test", "maxvit_test", "convnext_test",
                                           "gpt2_test", "activations_test", "arithmetic_test",
                                           "reduce_test", "matmul_test", "upsample_test",
                                           "norms_test"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param;
                         });

}  // namespace
}  // namespace headroom
