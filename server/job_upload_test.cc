#include "server/job_upload.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "util/status_macros.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

// The first message of an upload of a `bytes`-byte ONNX model.
proto::SubmitJobChunk SpecMessage(uint64_t bytes) {
  proto::SubmitJobChunk message;
  proto::JobSpec& spec = *message.mutable_spec();
  spec.set_name("uploaded");
  spec.mutable_model()->mutable_onnx()->set_batch(2);
  spec.mutable_train()->set_steps(3);
  message.set_onnx_model_bytes(bytes);
  return message;
}

proto::SubmitJobChunk Chunk(const std::string& bytes) {
  proto::SubmitJobChunk message;
  message.set_onnx_model_chunk(bytes);
  return message;
}

TEST(JobUploadTest, JoinsTheChunksInOrderIntoTheSpecsModel) {
  UploadBudget budget(100);
  JobUpload upload(&budget);
  ASSERT_TRUE(upload.Add(SpecMessage(7)).ok());
  EXPECT_EQ(budget.held_bytes(), 7u) << "the declared size is reserved at once";
  ASSERT_TRUE(upload.Add(Chunk("abc")).ok());
  ASSERT_TRUE(upload.Add(Chunk("")).ok());
  ASSERT_TRUE(upload.Add(Chunk("defg")).ok());
  absl::StatusOr<proto::JobSpec> spec = upload.Finish();
  ASSERT_TRUE(spec.ok()) << spec.status();
  EXPECT_EQ(spec->model().onnx_model(), "abcdefg");
  EXPECT_EQ(spec->model().onnx().batch(), 2u) << "the import options are kept";
  EXPECT_EQ(spec->name(), "uploaded");
  EXPECT_EQ(spec->train().steps(), 3u);
}

TEST(JobUploadTest, TheReservationIsGivenBackWhenTheUploadEndsHoweverItEnds) {
  UploadBudget budget(10);
  {
    JobUpload abandoned(&budget);
    ASSERT_TRUE(abandoned.Add(SpecMessage(6)).ok());
    ASSERT_TRUE(abandoned.Add(Chunk("ab")).ok());
    // A second upload does not fit beside it.
    JobUpload second(&budget);
    const absl::Status s = second.Add(SpecMessage(6));
    EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
    EXPECT_THAT(s.message(), HasSubstr("uploads in flight hold 6 bytes"));
    EXPECT_THAT(s.message(), HasSubstr("--max-upload-bytes of 10 bytes"));
  }
  EXPECT_EQ(budget.held_bytes(), 0u);
  JobUpload after(&budget);
  EXPECT_TRUE(after.Add(SpecMessage(10)).ok());
}

TEST(JobUploadTest, AModelOverTheLimitIsResourceExhaustedNamingTheLimitAndTheSize) {
  UploadBudget budget(1 << 20);
  JobUpload upload(&budget);
  const absl::Status s = upload.Add(SpecMessage((1 << 20) + 1));
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted) << s;
  EXPECT_THAT(s.message(), HasSubstr("the model is 1048577 bytes"));
  EXPECT_THAT(s.message(), HasSubstr("--max-upload-bytes of 1048576 bytes (1.0 MiB)"));
  EXPECT_EQ(budget.held_bytes(), 0u);
}

// Returns the status of the upload of `messages` (Add() each until one fails, then Finish()).
absl::Status Upload(const std::vector<proto::SubmitJobChunk>& messages) {
  UploadBudget budget(1 << 30);
  JobUpload upload(&budget);
  for (const proto::SubmitJobChunk& m : messages) RETURN_IF_ERROR(upload.Add(m));
  return upload.Finish().status();
}

TEST(JobUploadTest, MalformedStreamsAreInvalidArgumentNamingTheFault) {
  proto::SubmitJobChunk graph = SpecMessage(3);
  graph.mutable_spec()->mutable_model()->mutable_graph()->set_name("g");
  proto::SubmitJobChunk zoo = SpecMessage(3);
  zoo.mutable_spec()->mutable_model()->mutable_zoo()->set_name("mlp");
  proto::SubmitJobChunk inline_bytes = SpecMessage(3);
  inline_bytes.mutable_spec()->mutable_model()->set_onnx_model("xyz");
  proto::SubmitJobChunk sized_chunk = Chunk("a");
  sized_chunk.set_onnx_model_bytes(3);
  const struct {
    std::vector<proto::SubmitJobChunk> messages;
    std::string message;
  } cases[] = {
      {{}, "the stream ended without a spec"},
      {{Chunk("abc")}, "message 1: the first message must carry the job's spec"},
      {{SpecMessage(0)}, "message 1: onnx_model_bytes, the model's size, must be given"},
      {{graph}, "message 1: spec.model is a graph description"},
      {{zoo}, "message 1: spec.model is a zoo model"},
      {{inline_bytes}, "message 1: spec.model.onnx_model carries 3 bytes inline"},
      {{SpecMessage(3), Chunk("a"), SpecMessage(3)}, "message 3: a second spec"},
      {{SpecMessage(3), proto::SubmitJobChunk()}, "message 2: carries neither a spec nor"},
      {{SpecMessage(3), sized_chunk}, "message 2: only the first message gives"},
      {{SpecMessage(3), Chunk("ab"), Chunk("cd")},
       "message 3: the chunks carry more than the 3 bytes"},
      {{SpecMessage(3), Chunk("ab")}, "the stream ended after 2 of the 3 bytes"},
      {{SpecMessage(8 << 20), Chunk(std::string(kMaxUploadChunkBytes + 1, 'x'))},
       "message 2: the chunk is 4194305 bytes (4.0 MiB), over the 4194304 bytes"},
  };
  for (const auto& c : cases) {
    const absl::Status s = Upload(c.messages);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.message << ": " << s;
    EXPECT_THAT(s.message(), HasSubstr(c.message));
  }
  // A chunk of exactly the limit is taken.
  EXPECT_TRUE(
      Upload({SpecMessage(kMaxUploadChunkBytes), Chunk(std::string(kMaxUploadChunkBytes, 'x'))})
          .ok());
}

}  // namespace
}  // namespace headroom::server
