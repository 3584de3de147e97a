// `headroom plan` as a user runs it: without --server it asks the service in this process,
// with --server a headroomd (here the same service on a loopback port). Both must print the
// same answer.
#include <sstream>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "clients/cli.h"
#include "executor/backend_scratch.h"
#include "executor/backends.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/service.h"

namespace headroom::clients {
namespace {

using ::testing::HasSubstr;

struct PlanRun {
  int code;
  std::string out;
  std::string err;
};

PlanRun Plan(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  std::vector<std::string> words = {"plan"};
  words.insert(words.end(), args.begin(), args.end());
  const int code = RunHeadroom(words, CommandIo{out, err});
  return {code, out.str(), err.str()};
}

// headroomd's service on the CPU backend, without jobs, on a free loopback port.
class CpuDaemon {
 public:
  CpuDaemon() {
    backend_ = *executor::MakeBackend("cpu");
    scratch_ = std::make_unique<executor::BackendScratchModel>(backend_.get());
    service_ = std::make_unique<server::HeadroomService>(
        nullptr, planner::PlanBackend{scratch_.get(), backend_->host_is_device_memory()});
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
  }
  ~CpuDaemon() { server_->Shutdown(); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

 private:
  std::unique_ptr<executor::Backend> backend_;
  std::unique_ptr<executor::BackendScratchModel> scratch_;
  std::unique_ptr<server::HeadroomService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST(PlanTest, LocalAndDaemonPrintTheSameAnswer) {
  CpuDaemon daemon;
  const std::vector<std::string> args = {"--model", "resnet18", "--batch", "8", "--image_size",
                                         "64", "--budget", "115MiB"};
  PlanRun local_json = Plan({args[0], args[1], args[2], args[3], args[4], args[5], args[6],
                             args[7], "--json"});
  std::vector<std::string> remote_args = args;
  remote_args.insert(remote_args.end(), {"--json", "--server", daemon.address()});
  PlanRun remote_json = Plan(remote_args);
  ASSERT_EQ(local_json.code, 0) << local_json.err;
  ASSERT_EQ(remote_json.code, 0) << remote_json.err;
  EXPECT_EQ(local_json.out, remote_json.out);
  EXPECT_THAT(local_json.out, HasSubstr("\"sections\":[{\"index\":0"));

  PlanRun local_text = Plan(args);
  remote_args.erase(remote_args.begin() + args.size());  // --json
  PlanRun remote_text = Plan(remote_args);
  ASSERT_EQ(local_text.code, 0) << local_text.err;
  ASSERT_EQ(remote_text.code, 0) << remote_text.err;
  EXPECT_EQ(local_text.out, remote_text.out);
}

TEST(PlanTest, JsonIsTheProtoWithItsFieldNames) {
  PlanRun r = Plan({"--model", "resnet18", "--batch", "2", "--image_size", "64", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* key : {"\"arena_bytes\":", "\"lower_bound_bytes\":", "\"no_sharing_bytes\":",
                          "\"bytes_by_role\":[", "\"num_tensors\":",
                          "\"role\":\"ROLE_PARAMETER\"", "\"role\":\"ROLE_OPTIMIZER_STATE\""}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
  EXPECT_THAT(r.out, HasSubstr("\"tensors\":[]")) << "asked for none";
}

TEST(PlanTest, TensorsListsOffsetsAndLifetimes) {
  PlanRun r = Plan({"--model", "mlp", "--batch", "2", "--depth", "2", "--width", "8",
                    "--json", "--tensors"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("{\"name\":\"fc1.weight\",\"role\":\"ROLE_PARAMETER\""));
  EXPECT_THAT(r.out, HasSubstr("\"first_position\":"));
  PlanRun table = Plan({"--model", "mlp", "--batch", "2", "--depth", "2", "--tensors"});
  ASSERT_EQ(table.code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("fc1.weight.momentum"));
  EXPECT_THAT(table.out, HasSubstr("training graph"));
}

TEST(PlanTest, InferenceAndAdamChangeThePlan) {
  PlanRun sgd = Plan({"--model", "mlp", "--batch", "2", "--json"});
  PlanRun adam = Plan({"--model", "mlp", "--batch", "2", "--optimizer", "adam", "--json"});
  PlanRun inference = Plan({"--model", "mlp", "--batch", "2", "--inference"});
  ASSERT_EQ(sgd.code, 0) << sgd.err;
  ASSERT_EQ(adam.code, 0) << adam.err;
  ASSERT_EQ(inference.code, 0) << inference.err;
  EXPECT_NE(sgd.out, adam.out);
  EXPECT_THAT(inference.out, HasSubstr("(inference: the forward pass alone)"));
  EXPECT_EQ(inference.out.find("optimizer_state"), std::string::npos);
}

TEST(PlanTest, BadWordsExitTwoAndBadModelsOne) {
  EXPECT_EQ(Plan({"--model", "mlp", "--optimizer", "lbfgs"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--alignment", "100"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "lots"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "0"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--device", "tpu"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--device-file", "/no/such"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--backend", "tpu"}).code, 2);
  EXPECT_EQ(Plan({"--model", "mlp", "--backend", "cpu", "--server", "127.0.0.1:1"}).code, 2);
  // The service refuses these as invalid arguments: exit 2 too (cli.h).
  EXPECT_EQ(Plan({"--model", "mlp", "--budget", "1GiB", "--inference"}).code, 2);
  EXPECT_EQ(Plan({"--model", "nope"}).code, 2);
  // A file that cannot be read is not bad words: exit 1.
  EXPECT_EQ(Plan({"--model", "mlp", "--profile", "/no/such/profile.json"}).code, 1);
}

// resnet18 on 64x64 images at batch 16: about 124 MiB with no sections, 107 MiB at the least.
std::vector<std::string> Small(std::vector<std::string> more) {
  std::vector<std::string> args = {"--model", "resnet18", "--batch", "16", "--image_size", "64"};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST(PlanTest, BudgetJsonHasThePlanAndItsSections) {
  PlanRun r = Plan(Small({"--budget", "115MiB", "--device", "h100", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  for (const char* key :
       {"\"budget_bytes\":\"120586240\"",
        "\"predicted_peak_bytes\":", "\"predicted_step_seconds\":", "\"overhead_ratio\":",
        "\"recompute_flops\":", "\"offloaded_bytes\":", "\"sections\":[",
        "\"first_node\":\"conv1\"", "\"last_node\":", "\"boundary\":[",
        "\"placement\":\"PLACEMENT_DEVICE\"", "\"cost_model\":\"roofline h100\""}) {
    EXPECT_THAT(r.out, HasSubstr(key));
  }
  EXPECT_THAT(r.out, HasSubstr("\"frontier\":[]"));
}

TEST(PlanTest, FrontierListsPointsAndBaselines) {
  PlanRun r = Plan(Small({"--frontier", "--json"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("\"frontier\":[{\"peak_bytes\":"));
  for (const char* name : {"no_sections", "sqrt_n", "every_layer"}) {
    EXPECT_THAT(r.out, HasSubstr(std::string("\"strategy\":\"") + name + "\""));
  }
}

TEST(PlanTest, AnInfeasibleBudgetExitsOneWithTheSmallestThatWorks) {
  PlanRun r = Plan(Small({"--budget", "2MiB"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_THAT(r.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(r.err, HasSubstr("below the smallest peak Headroom can plan"));
  EXPECT_THAT(r.err, HasSubstr("Parameters, buffers and optimizer state alone need"));
  EXPECT_TRUE(r.out.empty());
}

// --parameters host: the daemon answers what the local service does; the text and JSON say
// where the parameters live and what their copies move; without the state on the host the
// flag is refused naming both flags.
TEST(PlanTest, ParametersOnTheHostAppearInTheAnswer) {
  CpuDaemon daemon;
  const std::vector<std::string> args =
      Small({"--device", "h100", "--host-memory", "separate", "--optimizer-state", "host",
             "--parameters", "host", "--budget", "100MiB"});
  PlanRun local = Plan(args);
  std::vector<std::string> remote_args = args;
  remote_args.insert(remote_args.end(), {"--server", daemon.address()});
  PlanRun remote = Plan(remote_args);
  ASSERT_EQ(local.code, 0) << local.err;
  ASSERT_EQ(remote.code, 0) << remote.err;
  EXPECT_EQ(local.out, remote.out);
  EXPECT_THAT(local.out, HasSubstr("host between uses: "));
  std::vector<std::string> json_args = args;
  json_args.push_back("--json");
  PlanRun json = Plan(json_args);
  ASSERT_EQ(json.code, 0) << json.err;
  EXPECT_THAT(json.out, HasSubstr("\"parameters\":\"host\""));
  EXPECT_THAT(json.out, HasSubstr("\"parameter_copy_bytes\":\""));
  PlanRun refused = Plan(Small({"--parameters", "host"}));
  EXPECT_EQ(refused.code, 2);
  EXPECT_THAT(refused.err, HasSubstr("--parameters host needs --optimizer-state host or auto"));
  EXPECT_EQ(Plan(Small({"--parameters", "gpu"})).code, 2);
}

}  // namespace
}  // namespace headroom::clients
