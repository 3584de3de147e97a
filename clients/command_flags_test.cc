// Checks the run flags' --nondeterministic: off by default (deterministic backends), on
// where given, and declared only on commands whose backend runs here.
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

}  // namespace
}  // namespace headroom::clients
