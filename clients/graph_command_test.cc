// `headroom graph`, run in-process as a user would run it.
#include <fstream>
#include <sstream>

#include "clients/cli.h"
#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "graph/graph_io.h"
#include "gtest/gtest.h"
#include "onnx/onnx_pb.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

struct CommandRun {
  int code;
  std::string out;
  std::string err;
};

CommandRun Graph(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> words = {"graph"};
  words.insert(words.end(), args.begin(), args.end());
  const int code = RunHeadroom(words, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

TEST(GraphCommandTest, JsonSummaryOfAZooModel) {
  // mlp 784 -> 1024 -> 1024 -> 1024 -> 10: (784+1)*1024 + 2*(1024+1)*1024 + (1024+1)*10.
  CommandRun r = Graph({"--model", "mlp", "--batch", "8", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("{\"name\":\"mlp\""));
  EXPECT_THAT(r.out, HasSubstr("\"num_parameters\":2913290,"));
  EXPECT_THAT(r.out, HasSubstr("\"parameter_bytes\":11653160,"));
  EXPECT_THAT(r.out, HasSubstr("\"num_nodes\":"));
  EXPECT_THAT(r.out, HasSubstr("\"activation_bytes\":"));
}

TEST(GraphCommandTest, ModelOptionsArriveAsFlags) {
  CommandRun r = Graph({"--model", "mlp", "--depth", "2", "--width", "16", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  // (784+1)*16 + (16+1)*10 = 12730.
  EXPECT_THAT(r.out, HasSubstr("\"num_parameters\":12730,"));
}

TEST(GraphCommandTest, TableForPeople) {
  CommandRun r = Graph({"--model", "resnet18", "--batch", "2"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("parameters           11689512"));
  EXPECT_THAT(r.out, HasSubstr("activation bytes"));
}

TEST(GraphCommandTest, EmitThenReadTheDescriptionBack) {
  const std::string path = TempPath("mlp.pbtxt");
  CommandRun emit = Graph({"--model", "mlp", "--batch", "4", "--emit", path, "--json"});
  ASSERT_EQ(emit.code, 0) << emit.err;
  CommandRun read = Graph({"--graph", path, "--json"});
  ASSERT_EQ(read.code, 0) << read.err;
  EXPECT_EQ(read.out, emit.out);
}

// An invalid model is an invalid argument: exit 2, as for bad flags (cli.h).
TEST(GraphCommandTest, InvalidGraphFileExitsTwoNamingTheNode) {
  graph::GraphBuilder b("broken");
  b.Input("x", {4, 8});
  b.Linear("fc", "x", 7, 3);  // Weight [3, 7] does not fit x [4, 8].
  b.Op("SoftmaxCrossEntropy", "loss", {"fc", b.Label("labels", {4})});
  b.SetLoss("loss");
  const std::string path = TempPath("broken.pb");
  ASSERT_TRUE(graph::WriteGraphFile(b.Build(), path).ok());
  CommandRun r = Graph({"--graph", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_THAT(r.err, HasSubstr("node 'fc' (MatMul)"));
  EXPECT_TRUE(r.out.empty());
}

TEST(GraphCommandTest, UsageErrorsExitTwo) {
  EXPECT_EQ(Graph({"--model", "mlp", "--jsno", "1"}).code, 2);
  EXPECT_THAT(Graph({"--model", "mlp", "--jsno", "1"}).err, HasSubstr("not expected: 1 --jsno"));
  EXPECT_EQ(Graph({"resnet50"}).code, 2);
}

TEST(GraphCommandTest, BadModelChoicesAreErrors) {
  EXPECT_THAT(Graph({}).err, HasSubstr("exactly one of --model"));
  EXPECT_THAT(Graph({"--model", "resnet51"}).err, HasSubstr("resnet50"));
  EXPECT_THAT(Graph({"--model", "mlp", "--batch", "0"}).err, HasSubstr("--batch"));
  EXPECT_THAT(Graph({"--graph", TempPath("absent.pb")}).err, HasSubstr("absent.pb"));
  EXPECT_THAT(Graph({"--graph", "x.pb", "--batch", "2"}).err, HasSubstr("--batch applies"));
}

TEST(OpsCommandTest, ListsEveryOpWithItsAttributes) {
  std::ostringstream out, err;
  ASSERT_EQ(RunHeadroom({"ops"}, CommandIo{out, err}), 0);
  EXPECT_THAT(out.str(), HasSubstr("Conv2D               (x, weight, [bias])"));
  EXPECT_THAT(out.str(), HasSubstr("groups:int"));
  EXPECT_THAT(out.str(), HasSubstr("Reshape"));
  EXPECT_THAT(out.str(), HasSubstr("shape:list of ints (required)"));
}

TEST(ZooCommandTest, ListsModelsAndOptions) {
  std::ostringstream out, err;
  ASSERT_EQ(RunHeadroom({"zoo"}, CommandIo{out, err}), 0);
  EXPECT_THAT(out.str(), HasSubstr("mobilenet_v2"));
  EXPECT_THAT(out.str(), HasSubstr("--d_model"));
}

// An ONNX model as torch.onnx.export writes it by default: input [1, 3, 4, 4] of a fixed
// batch, a batch norm in inference mode (training_mode 0), a Reshape to [1, 48] baked with
// the export batch. Written to TEST_TMPDIR; returns its path.
std::string InferenceExport() {
  onnx::ModelProto model;
  model.set_ir_version(8);
  model.add_opset_import()->set_version(17);
  onnx::GraphProto& g = *model.mutable_graph();
  onnx::ValueInfoProto* in = g.add_input();
  in->set_name("x");
  onnx::TypeProto::Tensor* t = in->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 3, 4, 4}) t->mutable_shape()->add_dim()->set_dim_value(d);
  auto add_initializer = [&](const std::string& name, std::vector<int64_t> dims, bool ints) {
    onnx::TensorProto* init = g.add_initializer();
    init->set_name(name);
    init->set_data_type(ints ? onnx::TensorProto::INT64 : onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      init->add_dims(d);
      n *= d;
    }
    return init;
  };
  for (const char* name : {"bn.weight", "bn.bias", "bn.mean", "bn.var"}) {
    onnx::TensorProto* init = add_initializer(name, {3}, false);
    for (int k = 0; k < 3; ++k) init->add_float_data(1.0f);
  }
  onnx::TensorProto* shape = add_initializer("flat", {2}, true);
  shape->add_int64_data(1);
  shape->add_int64_data(48);
  onnx::NodeProto* bn = g.add_node();
  bn->set_op_type("BatchNormalization");
  bn->set_name("/bn/BatchNormalization");
  for (const char* name : {"x", "bn.weight", "bn.bias", "bn.mean", "bn.var"}) bn->add_input(name);
  bn->add_output("n");
  onnx::NodeProto* reshape = g.add_node();
  reshape->set_op_type("Reshape");
  reshape->set_name("/Reshape");
  reshape->add_input("n");
  reshape->add_input("flat");
  reshape->add_output("logits");
  g.add_output()->set_name("logits");
  const std::string path = TempPath("inference_export.onnx");
  std::ofstream(path, std::ios::binary) << model.SerializeAsString();
  return path;
}

TEST(GraphCommandTest, AnInferenceExportIsNamedInTheOutputAndTheJson) {
  const std::string path = InferenceExport();
  CommandRun r = Graph({"--onnx", path, "--batch", "4", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, StartsWith("{\"inference_export\":true,\"warnings\":[\"ONNX model"));
  EXPECT_THAT(r.out, HasSubstr("do_constant_folding=False"));
  // Re-batched: the Reshape's [1, 48] became [4, 48], the logits' batch.
  EXPECT_THAT(r.out, HasSubstr("\"num_nodes\":3,"));
  EXPECT_THAT(r.err, StartsWith("warning: ONNX model 'inference_export' was exported for "
                                "inference: 1 of its 1 batch norm(s) have training_mode 0"));
  CommandRun table = Graph({"--onnx", path, "--batch", "4"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.err, HasSubstr("the plan is for the exported inference graph"));
}

TEST(GraphCommandTest, StrictTrainingRefusesAnInferenceExport) {
  CommandRun r = Graph({"--onnx", InferenceExport(), "--batch", "4", "--strict-training"});
  EXPECT_NE(r.code, 0);
  EXPECT_THAT(r.err, HasSubstr("(refused: --strict-training)"));
  EXPECT_TRUE(r.out.empty()) << r.out;
  CommandRun zoo = Graph({"--model", "mlp", "--strict-training"});
  EXPECT_NE(zoo.code, 0);
  EXPECT_THAT(zoo.err, HasSubstr("--strict-training applies to --onnx"));
}

}  // namespace
}  // namespace headroom::clients
