#include "graph/model_source.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::graph {
namespace {

using ::testing::HasSubstr;

TEST(ModelSourceTest, BuildsZooModelWithItsBatch) {
  proto::ModelSource source;
  source.mutable_zoo()->set_name("mlp");
  source.mutable_zoo()->set_batch(7);
  absl::StatusOr<proto::GraphDef> g = ResolveModel(source);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_FALSE(g->nodes().empty());
  bool found_batch = false;
  for (const proto::TensorDef& t : g->tensors()) {
    if (t.role() == proto::ROLE_INPUT) found_batch = !t.shape().empty() && t.shape(0) == 7;
  }
  EXPECT_TRUE(found_batch);
}

TEST(ModelSourceTest, PassesAGraphThrough) {
  proto::ModelSource source;
  source.mutable_graph()->set_name("mine");
  source.mutable_graph()->set_loss("l");
  absl::StatusOr<proto::GraphDef> g = ResolveModel(source);
  ASSERT_TRUE(g.ok()) << g.status();
  EXPECT_EQ(g->name(), "mine");
  EXPECT_EQ(g->loss(), "l");
}

TEST(ModelSourceTest, ErrorsNameTheField) {
  EXPECT_THAT(ResolveModel(proto::ModelSource()).status().message(), HasSubstr("model:"));
  proto::ModelSource zero;
  zero.mutable_zoo()->set_name("mlp");
  EXPECT_THAT(ResolveModel(zero).status().message(), HasSubstr("model.zoo.batch"));
  proto::ModelSource unknown;
  unknown.mutable_zoo()->set_name("resnet9000");
  unknown.mutable_zoo()->set_batch(1);
  absl::Status s = ResolveModel(unknown).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("resnet9000"));
  proto::ModelSource onnx;
  onnx.set_onnx_model("these bytes are no ONNX model");
  s = ResolveModel(onnx).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.onnx_model: not an ONNX model"));
}

}  // namespace
}  // namespace headroom::graph
