// `headroom graph`, `headroom ops` and `headroom zoo`: what a model is made of.
#ifndef HEADROOM_CLIENTS_GRAPH_COMMAND_H_
#define HEADROOM_CLIENTS_GRAPH_COMMAND_H_

#include "CLI/CLI.hpp"
#include "clients/cli.h"

namespace headroom::clients {

// Validates a model and prints its summary (--json for one JSON object; --emit FILE writes
// the validated description with every shape filled in).
Command AddGraphCommand(CLI::App& headroom, const CommandIo& io);

// Lists the op set with inputs and attributes.
Command AddOpsCommand(CLI::App& headroom, const CommandIo& io);

// Lists the zoo's models with their options and defaults.
Command AddZooCommand(CLI::App& headroom, const CommandIo& io);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_GRAPH_COMMAND_H_
