#include "graph/graph_io.h"

#include <cstdio>
#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "graph/graph.h"
#include "graph/graph_builder.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::HasSubstr;

proto::GraphDef Tiny() {
  GraphBuilder b("tiny");
  b.Input("x", {2, 4});
  b.Linear("fc", "x", 4, 3);
  b.Op("Softmax", "probs", {"fc"}, {{"scale", FloatAttr(0.5)}});
  b.Op("SoftmaxCrossEntropy", "loss", {"probs", b.Label("labels", {2})});
  b.SetLoss("loss");
  return b.Build();
}

std::string TempPath(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

void WriteRaw(const std::string& path, const std::string& contents) {
  std::ofstream(path, std::ios::binary) << contents;
}

class GraphIoRoundTripTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GraphIoRoundTripTest, WritesAndReadsTheSameGraph) {
  const std::string path = TempPath("tiny" + GetParam());
  ASSERT_TRUE(WriteGraphFile(Tiny(), path).ok());
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(*read, Tiny()));
  EXPECT_TRUE(Graph::FromProto(*read).ok());
}

INSTANTIATE_TEST_SUITE_P(Formats, GraphIoRoundTripTest,
                         ::testing::Values(".pbtxt", ".pb", ".textproto", ".graph"));

TEST(GraphIoTest, TextIsReadableByPeople) {
  const std::string path = TempPath("people.pbtxt");
  ASSERT_TRUE(WriteGraphFile(Tiny(), path).ok());
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_THAT(text, HasSubstr("op: \"MatMul\""));
  EXPECT_THAT(text, HasSubstr("loss: \"loss\""));
}

TEST(GraphIoTest, UnknownExtensionFallsBackToText) {
  const std::string path = TempPath("handwritten.graph");
  WriteRaw(path, "name: \"hand\"\ntensors { name: \"x\" shape: [2, 3] dtype: DTYPE_FLOAT32 "
                 "role: ROLE_INPUT }\n");
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->name(), "hand");
  EXPECT_EQ(read->tensors(0).shape_size(), 2);
}

TEST(GraphIoTest, MissingFileIsNotFoundAndNamed) {
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile(TempPath("nope.pb"));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(read.status().message(), HasSubstr("nope.pb"));
}

TEST(GraphIoTest, TextErrorsGiveTheLine) {
  const std::string path = TempPath("bad.pbtxt");
  WriteRaw(path, "name: \"bad\"\nnodes { nam: \"x\" }\n");
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("bad.pbtxt"));
  EXPECT_THAT(read.status().message(), HasSubstr("line 2"));
  EXPECT_THAT(read.status().message(), HasSubstr("nam"));
}

TEST(GraphIoTest, GarbageIsRejectedWithTheFileName) {
  const std::string path = TempPath("garbage.bin");
  WriteRaw(path, std::string("\xff\xfe\x00\x01garbage{{{", 14));
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile(path);
  ASSERT_FALSE(read.ok());
  EXPECT_THAT(read.status().message(), HasSubstr("garbage.bin"));
  EXPECT_THAT(read.status().message(), HasSubstr("neither a binary nor a text-format"));
}

TEST(GraphIoTest, ShippedExampleLoadsWithItsCommentedShapes) {
  absl::StatusOr<proto::GraphDef> read = ReadGraphFile("examples/tiny_cnn.pbtxt");
  ASSERT_TRUE(read.ok()) << read.status();
  absl::StatusOr<Graph> g = Graph::FromProto(*read);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->tensor(g->FindTensor("pool1")).shape, Shape({8, 16, 16, 16}));
  EXPECT_EQ(g->tensor(g->FindTensor("flatten")).shape, Shape({8, 4096}));
  EXPECT_EQ(g->tensor(g->FindTensor("logits")).shape, Shape({8, 10}));
}

TEST(GraphIoTest, UnwritablePathIsAnError) {
  EXPECT_FALSE(WriteGraphFile(Tiny(), "/nonexistent-dir/x.pb").ok());
}

}  // namespace
}  // namespace headroom::graph
