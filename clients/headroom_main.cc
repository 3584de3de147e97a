// `headroom`: Headroom's command line.
#include <iostream>
#include <string>
#include <vector>

#include "clients/graph_command.h"
#include "clients/plan_command.h"
#include "clients/profile_command.h"
#include "clients/train_command.h"

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
    "  help    this text; 'headroom COMMAND --help' for a command's flags\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "help" || args[0] == "--help" || args[0] == "-h") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "graph") return headroom::clients::RunGraphCommand(args, std::cout, std::cerr);
  if (command == "plan") return headroom::clients::RunPlanCommand(args, std::cout, std::cerr);
  if (command == "train") return headroom::clients::RunTrainCommand(args, std::cout, std::cerr);
  if (command == "profile") {
    return headroom::clients::RunProfileCommand(args, std::cout, std::cerr);
  }
  if (command == "ops") return headroom::clients::RunOpsCommand(args, std::cout, std::cerr);
  if (command == "zoo") return headroom::clients::RunZooCommand(args, std::cout, std::cerr);
  std::cerr << "headroom: unknown command '" << command << "'\n\n" << kUsage;
  return 2;
}
