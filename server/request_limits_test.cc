#include "server/request_limits.h"

#include <atomic>
#include <thread>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace headroom::server {
namespace {

using ::testing::HasSubstr;

// A chain of `nodes` ReLUs (the checks count; nothing here builds the graph).
proto::ModelSource Chain(int nodes) {
  proto::ModelSource source;
  proto::GraphDef& def = *source.mutable_graph();
  def.set_name("chain");
  for (int i = 0; i < nodes; ++i) {
    proto::NodeDef& node = *def.add_nodes();
    node.set_op("Relu");
    node.add_outputs(absl::StrCat("t", i));
  }
  return source;
}

RequestLimits Small() {
  RequestLimits limits = RequestLimits::Defaults();
  limits.max_graph_nodes = 10;
  limits.max_graph_tensors = 15;
  limits.max_batch = 64;
  limits.max_alignment_bytes = 512;
  limits.max_job_steps = 100;
  limits.max_profile_steps = 5;
  limits.max_job_name_bytes = 8;
  return limits;
}

TEST(RequestLimitsTest, GraphNodesAndTensorsNameTheFlag) {
  EXPECT_TRUE(CheckModelSource(Chain(10), Small(), "model").ok());
  absl::Status s = CheckModelSource(Chain(11), Small(), "model");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.graph: 11 nodes, more than --max-graph-nodes 10"));
  proto::ModelSource listed = Chain(10);
  for (int i = 0; i < 6; ++i) listed.mutable_graph()->add_tensors();
  EXPECT_THAT(CheckModelSource(listed, Small(), "model").message(),
              HasSubstr("16 tensors (listed and node outputs), more than --max-graph-tensors 15"));
}

TEST(RequestLimitsTest, ZooModelsAreHeldToBatchAndBuiltSize) {
  proto::ModelSource zoo;
  zoo.mutable_zoo()->set_name("mlp");
  zoo.mutable_zoo()->set_batch(65);
  EXPECT_THAT(CheckModelSource(zoo, Small(), "model").message(),
              HasSubstr("model.zoo.batch: 65 samples per step, more than --max-batch 64"));
  zoo.mutable_zoo()->set_batch(8);
  // An mlp of 20 layers has more than 10 nodes once built.
  (*zoo.mutable_zoo()->mutable_options())["depth"] = 20;
  RequestLimits limits = Small();
  limits.max_graph_tensors = 1000;
  absl::Status s = CheckModelSource(zoo, limits, "model");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("model.zoo (mlp)"));
  EXPECT_THAT(s.message(), HasSubstr("--max-graph-nodes 10"));
  EXPECT_TRUE(CheckModelSource(zoo, RequestLimits::Defaults(), "model").ok());
}

TEST(RequestLimitsTest, OnnxBatch) {
  proto::ModelSource onnx;
  onnx.set_onnx_model("not read here");
  onnx.mutable_onnx()->set_batch(1000);
  EXPECT_THAT(CheckModelSource(onnx, Small(), "spec.model").message(),
              HasSubstr("spec.model.onnx.batch: 1000 samples per step, more than --max-batch 64"));
}

TEST(RequestLimitsTest, JobSpecStepsAlignmentAndName) {
  proto::JobSpec spec;
  *spec.mutable_model() = Chain(3);
  spec.set_name("ok");
  spec.mutable_train()->set_steps(100);
  EXPECT_TRUE(CheckRequest(spec, Small()).ok());
  spec.mutable_train()->set_steps(uint64_t{1} << 63);
  EXPECT_THAT(CheckRequest(spec, Small()).message(),
              HasSubstr("spec.train.steps: 9223372036854775808, more than --max-job-steps 100"));
  spec.mutable_train()->set_steps(1);
  spec.mutable_plan()->set_alignment_bytes(1024);
  EXPECT_THAT(CheckRequest(spec, Small()).message(),
              HasSubstr("spec.plan.alignment_bytes: 1024, more than --max-alignment 512"));
  spec.mutable_plan()->set_alignment_bytes(0);
  spec.set_name("a longer name");
  EXPECT_THAT(CheckRequest(spec, Small()).message(),
              HasSubstr("spec.name: 13 bytes, more than --max-job-name 8"));
  spec.set_name("x\x1b[2J");
  absl::Status s = CheckRequest(spec, Small());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  // The refusal itself prints the name escaped.
  EXPECT_THAT(s.message(), HasSubstr("'x\\x1b[2J': control characters are not allowed"));
}

TEST(RequestLimitsTest, ProfileSteps) {
  proto::ProfileRequest request;
  request.set_steps(6);
  EXPECT_THAT(CheckRequest(request, Small()).message(),
              HasSubstr("steps: 6, more than --max-profile-steps 5"));
  request.set_steps(5);
  EXPECT_TRUE(CheckRequest(request, Small()).ok());
}

TEST(RequestLimitsTest, FlagsHaveCeilings) {
  RequestLimits limits = RequestLimits::Defaults();
  CLI::App app;
  AddRequestLimitFlags(app, limits);
  EXPECT_NO_THROW(app.parse("--max-graph-nodes 500", /*program_name_included=*/false));
  EXPECT_EQ(limits.max_graph_nodes, 500);
  CLI::App app2;
  AddRequestLimitFlags(app2, limits);
  // Above the graph library's ceiling (100,000): refused, not silently raised.
  EXPECT_THROW(app2.parse("--max-graph-nodes 100001", /*program_name_included=*/false),
               CLI::ValidationError);
}

TEST(RequestLimitsTest, JobIdsAreShortAndNeverEchoedWhole) {
  EXPECT_TRUE(CheckJobId("job-000001").ok());
  const std::string huge(1 << 20, 'x');
  absl::Status s = CheckJobId(huge);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("job_id: 1048576 bytes; a job id is at most 128 bytes"));
  EXPECT_LT(s.message().size(), 100u) << "the id is not quoted back";
  EXPECT_THAT(CheckJobId("a\x1b[2J").message(), HasSubstr("'a\\x1b[2J'"));
}

TEST(RequestLimitsTest, ListJobsStatesPageSizeAndToken) {
  proto::ListJobsRequest request;
  request.add_states(proto::JOB_STATE_RUNNING);
  EXPECT_TRUE(CheckRequest(request).ok());
  request.add_states(static_cast<proto::JobState>(99));
  EXPECT_THAT(CheckRequest(request).message(), HasSubstr("states[1]: 99 is not a job state"));
  request.clear_states();
  request.set_page_size(1001);
  EXPECT_THAT(CheckRequest(request).message(), HasSubstr("page_size: 1001, more than 1000"));
  request.set_page_size(10);
  request.set_page_token(std::string(200, '9'));
  EXPECT_THAT(CheckRequest(request).message(), HasSubstr("page_token: 200 bytes"));
}

TEST(CallSlotsTest, RefusesBeyondTheLimitWithoutALine) {
  CallSlots slots("--max-watch-streams", 2, /*max_waiting=*/0);
  auto a = slots.Acquire(absl::InfiniteFuture(), nullptr);
  auto b = slots.Acquire(absl::InfiniteFuture(), nullptr);
  ASSERT_TRUE(a.ok() && b.ok());
  auto c = slots.Acquire(absl::InfiniteFuture(), nullptr);
  EXPECT_EQ(c.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(c.status().message(), HasSubstr("--max-watch-streams 2"));
  { auto released = std::move(*a); }
  EXPECT_EQ(slots.held(), 1);
  EXPECT_TRUE(slots.Acquire(absl::InfiniteFuture(), nullptr).ok());
}

TEST(CallSlotsTest, AWaiterGetsTheTurnReleasedOrItsDeadline) {
  CallSlots slots("--max-concurrent-plans", 1, /*max_waiting=*/1);
  std::optional<CallSlots::Turn> held(*slots.Acquire(absl::InfiniteFuture(), nullptr));
  // The line holds one: a third caller is refused at once.
  std::atomic<bool> waiting_got_turn{false};
  std::thread waiter([&] {
    absl::StatusOr<CallSlots::Turn> turn = slots.Acquire(absl::InfiniteFuture(), nullptr);
    waiting_got_turn = turn.ok();
  });
  while (true) {
    absl::StatusOr<CallSlots::Turn> third = slots.Acquire(absl::Now(), nullptr);
    if (third.status().code() == absl::StatusCode::kResourceExhausted) break;
    absl::SleepFor(absl::Milliseconds(5));  // The waiter is not in line yet.
  }
  held.reset();
  waiter.join();
  EXPECT_TRUE(waiting_got_turn);
  // A caller whose deadline passes, or who cancels, while waiting gets no turn.
  std::optional<CallSlots::Turn> again(*slots.Acquire(absl::InfiniteFuture(), nullptr));
  EXPECT_EQ(slots.Acquire(absl::Now() + absl::Milliseconds(50), nullptr).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  EXPECT_EQ(slots.Acquire(absl::InfiniteFuture(), [] { return true; }).status().code(),
            absl::StatusCode::kCancelled);
}

}  // namespace
}  // namespace headroom::server
