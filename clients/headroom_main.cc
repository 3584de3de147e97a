// `headroom`: Headroom's command line.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "clients/graph_command.h"
#include "clients/profile_command.h"
#include "clients/remote_commands.h"
#include "clients/train_command.h"
#include "util/openmp_wait.h"

namespace {

constexpr char kUsage[] =
    "usage: headroom COMMAND [flags]\n"
    "\n"
    "commands:\n"
    "  graph   validate a model and summarise it (nodes, parameters, activation bytes)\n"
    "  plan    plan a training step's memory: arena, lower bound, bytes by role; with\n"
    "          --budget, the section splits and offloads that fit\n"
    "  train   train a model under a memory budget on the CPU (oneDNN) or CUDA backend\n"
    "  profile train a few steps recording memory: the timeline by role, the peak and\n"
    "          what made it, measured node times (for plan --profile), a Perfetto trace\n"
    "  ops     list the op set: inputs and attributes\n"
    "  zoo     list the model zoo and each model's options\n"
    "  help    this text; 'headroom COMMAND --help' for a command's flags\n"
    "\n"
    "commands on a running headroomd (--server ADDR, default 127.0.0.1:50051):\n"
    "  plan --server ADDR     plan on the daemon (its flags: 'headroom plan --server ADDR\n"
    "                         --help')\n"
    "  profile --server ADDR  profile on the daemon; --out FILE keeps the profile\n"
    "  submit    queue a training job under a budget; --watch to follow it\n"
    "  watch     follow a job's progress until it ends (exit 0 succeeded, 1 failed,\n"
    "            3 cancelled)\n"
    "  jobs      list jobs: state, steps, planned and measured peak, loss\n"
    "  cancel    cancel a job and free its device memory\n"
    "  timeline  a job's memory over time and what made its peak\n"
    "  profiles  list the profiles the daemon ran\n";

// Runs the command `argv` names; returns its exit code.
int RunCommand(int argc, char** argv) {
  namespace c = headroom::clients;
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  std::ostream& out = std::cout;
  std::ostream& err = std::cerr;
  // plan asks headroomd with --server and the same service in this process without;
  // profile runs here unless given --server; the commands below them always ask the daemon.
  const c::RemoteIo io{out, err, isatty(STDOUT_FILENO) != 0};
  const bool remote = c::HasServerFlag(args);
  if (command == "plan") return c::RunPlanCommand(args, io);
  if (command == "profile") {
    return remote ? c::RunRemoteProfileCommand(args, io) : c::RunProfileCommand(args, out, err);
  }
  if (command == "submit") return c::RunSubmitCommand(args, io);
  if (command == "watch") return c::RunWatchCommand(args, io);
  if (command == "jobs") return c::RunJobsCommand(args, io);
  if (command == "cancel") return c::RunCancelCommand(args, io);
  if (command == "timeline") return c::RunTimelineCommand(args, io);
  if (command == "profiles") return c::RunProfilesCommand(args, io);
  if (command == "graph") return c::RunGraphCommand(args, out, err);
  if (command == "train") return c::RunTrainCommand(args, out, err);
  if (command == "ops") return c::RunOpsCommand(args, out, err);
  if (command == "zoo") return c::RunZooCommand(args, out, err);
  std::cerr << "headroom: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  headroom::RunWithPassiveOpenMpWait(argv);
  const int code = RunCommand(argc, argv);
  // Every command has closed its files and released its memory by now. Exit without the
  // libraries' static destructors: cuBLASLt's (linked for the CUDA backend, used or not)
  // walk its kernel tables and fault in 51 MB of its pages on the way out, which would make
  // even `headroom zoo` peak at 230 MB resident instead of 170 MB.
  std::cout.flush();
  std::cerr.flush();
  std::fflush(nullptr);
  std::_Exit(code);
}
