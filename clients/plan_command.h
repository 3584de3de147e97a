// `headroom plan`: the memory plan of a training step.
#ifndef HEADROOM_CLIENTS_PLAN_COMMAND_H_
#define HEADROOM_CLIENTS_PLAN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace headroom::clients {

// Plans a model's training step (or forward pass, --inference) and prints the arena, the
// lower bound, the bytes with no sharing and bytes by role; --json for one JSON object,
// --tensors for every tensor's offset, size, lifetime and role. Returns the exit code: 0,
// 1 for an invalid model, 2 for bad flags.
int RunPlanCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_PLAN_COMMAND_H_
