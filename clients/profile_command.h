// `headroom profile`: train a model for a few steps with every allocation, free, node and
// copy recorded, and report memory over time by role, the peak and what made it, the
// measured node times the planner can plan with, and a trace for Perfetto.
#ifndef HEADROOM_CLIENTS_PROFILE_COMMAND_H_
#define HEADROOM_CLIENTS_PROFILE_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace headroom::clients {

// Plans the model as `headroom train` does, runs --steps (default 3) recording events,
// prints the summary with the peak attribution table; --trace FILE writes the Chrome
// trace-event JSON, --out FILE the profile (a ProfileResponse as JSON, which
// `headroom plan --profile FILE` reads), --json prints that profile instead of the
// summary. Returns the exit code: 0; 1 for an invalid model, a budget no plan fits, a
// failed step, an unwritable file or a timeline that disagrees with the executor (a bug);
// 2 for bad flags.
int RunProfileCommand(const std::vector<std::string>& args, std::ostream& out,
                      std::ostream& err);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_PROFILE_COMMAND_H_
