// Checks the run flags' --nondeterministic: off by default (deterministic backends), on
// where given, and declared only on commands whose backend runs here; the plan flags'
// --ranks; the dataset flags' per-command defaults and limits.
#include "clients/command_flags.h"

#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "gtest/gtest.h"

namespace headroom::clients {
namespace {

// Parses `args` on a command with the run flags; returns whether CLI11 accepted them.
bool Parse(RunFlags& flags, const std::string& backend_default, std::vector<std::string> args) {
  CLI::App app("test");
  AddRunFlags(app, flags, /*default_steps=*/3, backend_default);
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses from the back.
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
    return false;
  }
  return true;
}

TEST(CommandFlagsTest, BackendsAreDeterministicUnlessAsked) {
  RunFlags plain;
  ASSERT_TRUE(Parse(plain, "cpu", {"--backend", "cuda"}));
  EXPECT_TRUE(BackendOptionsOf(plain).deterministic);

  RunFlags fast;
  ASSERT_TRUE(Parse(fast, "cpu", {"--backend", "cuda", "--nondeterministic"}));
  EXPECT_FALSE(BackendOptionsOf(fast).deterministic);
  EXPECT_EQ(fast.backend, "cuda");
}

TEST(CommandFlagsTest, RemoteRunsHaveNoNondeterministicFlag) {
  // The daemon's backend is made by headroomd's own --nondeterministic.
  RunFlags remote;
  EXPECT_FALSE(Parse(remote, "", {"--nondeterministic"}));
}

// Parses `args` on `headroom plan`'s plan flags; returns the options or the error.
absl::StatusOr<proto::PlanOptions> PlanOptionsFrom(std::vector<std::string> args) {
  CLI::App app("test");
  PlanFlags flags;
  AddPlanFlags(app, flags, /*trains=*/false);
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  app.parse(reversed);
  return PlanOptionsOf(flags);
}

TEST(CommandFlagsTest, RanksReachThePlanOptions) {
  absl::StatusOr<proto::PlanOptions> o =
      PlanOptionsFrom({"--ranks", "64", "--interconnect", "ib", "--bucket-kib", "4096"});
  ASSERT_TRUE(o.ok()) << o.status();
  EXPECT_EQ(o->data_parallel().ranks(), 64u);
  EXPECT_EQ(o->data_parallel().interconnect().preset(), "ib");
  EXPECT_EQ(o->data_parallel().bucket_bytes(), 4096u * 1024);
  EXPECT_FALSE(PlanOptionsFrom({}).value().has_data_parallel());
}

TEST(CommandFlagsTest, BadRanksAndInterconnectsNameTheValueAndTheChoices) {
  EXPECT_EQ(PlanOptionsFrom({"--ranks", "0"}).status().message(),
            "--ranks 0: needs 1 to 65536 ranks");
  EXPECT_EQ(PlanOptionsFrom({"--ranks", "-3"}).status().message(),
            "--ranks -3: needs 1 to 65536 ranks");
  EXPECT_EQ(PlanOptionsFrom({"--ranks", "8", "--interconnect", "myrinet"}).status().message(),
            "--interconnect 'myrinet' is not a preset; choose one of nvlink, ib, pcie, "
            "nvlink+ib, cpu");
  EXPECT_EQ(PlanOptionsFrom({"--interconnect", "ib"}).status().message(),
            "--interconnect needs --ranks above 1");
}

// Parses `args` on a command with the dataset flags; returns whether CLI11 accepted them.
bool ParseDataset(DatasetFlags& flags, std::vector<std::string> args) {
  CLI::App app("test");
  AddDatasetFlags(app, flags, {"Data", "a dataset", "every N epochs", "keep K"});
  for (const char* flag : kDatasetOnlyFlags) {
    if (app.get_option_no_throw(flag) == nullptr) {
      ADD_FAILURE() << flag << " is in kDatasetOnlyFlags but not declared";
    }
  }
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  try {
    app.parse(reversed);
  } catch (const CLI::ParseError&) {
    return false;
  }
  return true;
}

TEST(CommandFlagsTest, DatasetFlagsKeepEachCommandsDefaultAndTheirLimits) {
  // `headroom train` checkpoints every epoch, `headroom submit` by steps: each command sets
  // its default before declaring the shared flags.
  DatasetFlags train;
  ASSERT_TRUE(ParseDataset(train, {"--dataset", "fashion-mnist", "--epochs", "3", "--flip"}));
  EXPECT_EQ(train.dataset, "fashion-mnist");
  EXPECT_EQ(train.epochs, 3);
  EXPECT_TRUE(train.flip);
  EXPECT_EQ(train.checkpoint_every_epochs, 1);
  DatasetFlags submit;
  submit.checkpoint_every_epochs = 0;
  ASSERT_TRUE(ParseDataset(submit, {"--dataset", "d"}));
  EXPECT_EQ(submit.checkpoint_every_epochs, 0);

  // The limits are stated once for both commands.
  for (const std::vector<std::string>& bad :
       std::vector<std::vector<std::string>>{{"--epochs", "0"},
                                             {"--epochs", "10001"},
                                             {"--keep-last", "0"},
                                             {"--keep-last", "101"},
                                             {"--prefetch", "65"},
                                             {"--crop-padding", "65"},
                                             {"--validation-fraction", "1"},
                                             {"--lr-schedule", "linear"},
                                             {"--early-stop-metric", "loss"}}) {
    DatasetFlags f;
    EXPECT_FALSE(ParseDataset(f, bad)) << bad[0] << " " << bad[1];
  }
}

}  // namespace
}  // namespace headroom::clients
