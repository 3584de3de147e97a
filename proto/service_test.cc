// The generated service and stub talk over a loopback port: the gRPC code generation works
// end to end. Until the server issue fills it in, every method answers UNIMPLEMENTED.
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "proto/headroom.grpc.pb.h"
#include <grpcpp/grpcpp.h>

namespace headroom::proto {
namespace {

class ServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
    stub_ = Headroom::NewStub(grpc::CreateChannel("127.0.0.1:" + std::to_string(port_),
                                                  grpc::InsecureChannelCredentials()));
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  Headroom::Service service_;  // Every method: UNIMPLEMENTED.
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Headroom::Stub> stub_;
};

TEST_F(ServiceTest, UnaryCallReachesTheServer) {
  PlanRequest request;
  request.mutable_model()->mutable_zoo()->set_name("resnet50");
  PlanResponse response;
  grpc::ClientContext context;
  grpc::Status status = stub_->Plan(&context, request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
}

TEST_F(ServiceTest, ServerStreamReachesTheServer) {
  WatchJobRequest request;
  request.set_job_id("job-1");
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReader<JobProgress>> reader = stub_->WatchJob(&context, request);
  JobProgress progress;
  EXPECT_FALSE(reader->Read(&progress));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNIMPLEMENTED);
}

}  // namespace
}  // namespace headroom::proto
