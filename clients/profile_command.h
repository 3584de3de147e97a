// `headroom profile`: train a few steps with every memory event recorded; on headroomd with
// --server.
#ifndef HEADROOM_CLIENTS_PROFILE_COMMAND_H_
#define HEADROOM_CLIENTS_PROFILE_COMMAND_H_

#include "CLI/CLI.hpp"
#include "clients/cli.h"

namespace headroom::clients {

// Plans and trains like `headroom train` for --steps (default 3) recording every memory
// event, then prints the measured against predicted peak and step time, the peak's
// attribution and the slowest nodes (--json: the ProfileResponse); --trace FILE writes a
// Chrome trace, --out FILE the profile for `plan --profile`, --metrics FILE the run's
// Prometheus metrics. On the CPU backend it fails when the process used more memory than
// the plan holds beyond the bound (docs/memory.md). With --server the daemon runs it.
Command AddProfileCommand(CLI::App& headroom, const CommandIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_PROFILE_COMMAND_H_
