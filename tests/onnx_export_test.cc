// A trained zoo model exported to ONNX (graph/onnx_export), checked by ONNX's checker,
// imported back (graph/onnx_import): the same graph and bytes, and on held-out batches the
// same inference logits from Headroom's CPU executor (graph/inference_graph: batch norms
// with their running statistics, no dropout) as the model that was trained.
#include "graph/onnx_export.h"

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "executor/backends.h"
#include "executor/synthetic_data.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "graph/inference_graph.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "gtest/gtest.h"

namespace headroom {
namespace {

using executor::HostTensor;

constexpr int kTrainSteps = 3;
// Batches of the synthetic task from this step on were never trained on.
constexpr int64_t kHeldOutStep = 1000;

proto::TensorValue ValueOf(const HostTensor& t) {
  proto::TensorValue v;
  v.set_name(t.name);
  for (int64_t d : t.shape) v.add_shape(d);
  v.set_dtype(t.dtype);
  v.set_data(std::string(t.bytes.begin(), t.bytes.end()));
  return v;
}

// Returns the parameters and buffers of `g` after kTrainSteps steps from seed 7.
std::vector<proto::TensorValue> Train(const graph::Graph& g) {
  std::unique_ptr<executor::Backend> backend = *executor::MakeBackend("cpu");
  executor::TrainerOptions options;
  options.seed = 7;
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(g, backend.get(), options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  for (int s = 0; s < kTrainSteps; ++s) EXPECT_TRUE((*trainer)->Step().ok());
  absl::StatusOr<std::vector<HostTensor>> state = (*trainer)->State();
  EXPECT_TRUE(state.ok()) << state.status();
  std::vector<proto::TensorValue> values;
  for (const HostTensor& t : *state) values.push_back(ValueOf(t));
  return values;
}

// Returns the logits the inference form of `def` with `values` computes on `batch`.
std::vector<float> InferenceLogits(const proto::GraphDef& def,
                                   const std::vector<proto::TensorValue>& values,
                                   const std::vector<HostTensor>& batch) {
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(def);
  EXPECT_TRUE(g.ok()) << g.status();
  absl::StatusOr<graph::InferenceModel> inference = graph::InferenceForm(*g, values);
  EXPECT_TRUE(inference.ok()) << inference.status();
  absl::StatusOr<graph::Graph> ig = graph::Graph::FromProto(inference->graph);
  EXPECT_TRUE(ig.ok()) << ig.status();
  executor::TrainerOptions options;
  for (const proto::TensorValue& v : inference->values) {
    options.initial_values.push_back(executor::HostTensorFromValue(v));
  }
  const graph::Tensor& loss = ig->tensor(ig->loss());
  options.capture = {ig->tensor(ig->node(loss.producer).inputs[0]).name};
  std::unique_ptr<executor::Backend> backend = *executor::MakeBackend("cpu");
  absl::StatusOr<std::unique_ptr<executor::Trainer>> trainer =
      executor::Trainer::Create(*ig, backend.get(), options);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<HostTensor> fed;
  for (const HostTensor& t : batch) {
    if (ig->FindTensor(t.name) != -1) fed.push_back(t);
  }
  absl::StatusOr<executor::StepResult> step = (*trainer)->StepOn(fed);
  EXPECT_TRUE(step.ok()) << step.status();
  const HostTensor& out = step->captured.at(0);
  return std::vector<float>(out.f32(), out.f32() + out.num_elements());
}

// Returns max |a - b| / max |a|.
double RelativeError(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double diff = 0, scale = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    diff = std::max(diff, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(a[i])));
  }
  return diff / scale;
}

struct Case {
  std::string model;
  uint64_t batch;
  std::map<std::string, int64_t> options;
  // Export with a symbolic batch and import at another one (the transformer's positions
  // input has no batch, which the importer would give one: it is exported at its own).
  bool dynamic;
  // The import rebuilds exactly the graph (no scaled or causal softmax, no computed
  // operand transposed), so the logits agree bit for bit.
  bool exact;
};

class OnnxExportRoundTripTest : public ::testing::TestWithParam<Case> {};

TEST_P(OnnxExportRoundTripTest, ImportsBackWithTheTrainedModelsLogits) {
  const Case& c = GetParam();
  absl::StatusOr<proto::GraphDef> def =
      graph::BuildZooModel(graph::ZooSpec(c.model, c.batch, c.options));
  ASSERT_TRUE(def.ok()) << def.status();
  absl::StatusOr<graph::Graph> g = graph::Graph::FromProto(*def);
  ASSERT_TRUE(g.ok()) << g.status();
  const std::vector<proto::TensorValue> values = Train(*g);

  // 1. Export (ExportOnnx runs ONNX's checker and strict shape inference), then check again
  //    what goes to the file.
  graph::OnnxExportOptions options;
  options.dynamic_batch = c.dynamic;
  absl::StatusOr<graph::OnnxExport> e = graph::ExportOnnx(*g, values, options);
  ASSERT_TRUE(e.ok()) << e.status();
  onnx::ModelProto parsed;
  ASSERT_TRUE(parsed.ParseFromString(e->model.SerializeAsString()));
  EXPECT_TRUE(graph::CheckOnnxModel(parsed).ok());
  for (const onnx::NodeProto& n : parsed.graph().node()) {
    EXPECT_NE(n.op_type(), "Dropout") << n.name();
  }
  std::cout << c.model << ": " << e->stats.DebugString() << "\n";

  // 2. Import at a batch of its own (the symbolic batch) or the export's.
  graph::OnnxImportOptions import;
  import.batch = c.dynamic ? c.batch + 1 : 0;
  absl::StatusOr<graph::ImportedModel> back = graph::ImportOnnx(parsed.SerializeAsString(), import);
  ASSERT_TRUE(back.ok()) << back.status();
  std::map<std::string, std::string> imported;
  for (const proto::TensorValue& v : back->values) imported[v.name()] = v.data();
  for (const proto::TensorValue& v : values) {
    const graph::Tensor& t = g->tensor(g->FindTensor(v.name()));
    if (t.role != proto::ROLE_PARAMETER && t.role != proto::ROLE_BUFFER) continue;
    ASSERT_EQ(imported.count(v.name()), 1u) << v.name();
    EXPECT_TRUE(imported[v.name()] == v.data()) << v.name() << " changed on the way";
  }
  if (c.exact) {
    std::vector<std::string> original, again;
    for (const graph::Node& n : g->nodes()) {
      if (n.op->name != "Dropout") original.push_back(n.op->name);
    }
    for (const proto::NodeDef& n : back->graph.nodes()) again.push_back(n.op());
    EXPECT_EQ(original, again);
  }

  // 3. The logits on held-out batches: the trained model's against the imported one's, at
  //    the export's batch (and, with a symbolic batch, at the import's).
  absl::StatusOr<executor::SyntheticTask> task = executor::SyntheticTask::Create(*g, 11);
  ASSERT_TRUE(task.ok()) << task.status();
  const std::vector<HostTensor> batch = task->Batch(kHeldOutStep);
  const std::vector<float> trained = InferenceLogits(*def, values, batch);
  proto::GraphDef at_export_batch = back->graph;
  if (c.dynamic) {
    graph::OnnxImportOptions same = import;
    same.batch = c.batch;
    absl::StatusOr<graph::ImportedModel> again =
        graph::ImportOnnx(parsed.SerializeAsString(), same);
    ASSERT_TRUE(again.ok()) << again.status();
    at_export_batch = again->graph;
  }
  const std::vector<float> exported = InferenceLogits(at_export_batch, back->values, batch);
  const double error = RelativeError(trained, exported);
  std::cout << c.model << ": logits " << trained.size() << " values, relative error " << error
            << "\n";
  EXPECT_LE(error, 1e-5);
  if (c.exact) {
    EXPECT_EQ(trained, exported) << "the same graph and bytes compute the same bits";
  }
}

INSTANTIATE_TEST_SUITE_P(
    Zoo, OnnxExportRoundTripTest,
    ::testing::Values(Case{"small_cnn", 4, {}, true, true},
                      Case{"resnet18", 2, {{"image_size", 32}}, true, true},
                      Case{"mobilenet_v2", 2, {{"image_size", 32}}, true, true},
                      Case{"transformer",
                           2,
                           {{"layers", 2},
                            {"d_model", 32},
                            {"heads", 4},
                            {"sequence", 8},
                            {"vocab", 50},
                            {"positions", 8}},
                           false,
                           false}),
    [](const ::testing::TestParamInfo<Case>& info) { return info.param.model; });

}  // namespace
}  // namespace headroom
