// `headroom graph`, run in-process as a user would run it.
#include "clients/cli.h"

#include <sstream>

#include "gmock/gmock.h"
#include "graph/graph_builder.h"
#include "graph/graph_io.h"
#include "gtest/gtest.h"

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

}  // namespace
}  // namespace headroom::clients
