// `headroom train`: train a model under a memory budget on this machine.
#ifndef HEADROOM_CLIENTS_TRAIN_COMMAND_H_
#define HEADROOM_CLIENTS_TRAIN_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace headroom::clients {

// Plans the model's training step for --budget (or unconstrained), then trains it for
// --steps on the synthetic task on --backend, printing per step the loss, step time and
// measured arena peak with a progress bar; --json prints one JSON object per step and a
// final summary. Returns the exit code: 0; 1 for an invalid model, a budget no plan fits
// (before anything is allocated) or a failed step; 2 for bad flags.
int RunTrainCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_TRAIN_COMMAND_H_
