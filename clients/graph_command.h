// `headroom graph`, `headroom ops` and `headroom zoo`: what a model is made of.
#ifndef HEADROOM_CLIENTS_GRAPH_COMMAND_H_
#define HEADROOM_CLIENTS_GRAPH_COMMAND_H_

#include <ostream>
#include <string>
#include <vector>

namespace headroom::clients {

// Each returns the process exit code: 0 on success, 1 when the model is invalid or a file
// cannot be read, 2 for bad flags. Results go to `out`, errors to `err`.

// Validates a model and prints its summary (--json for one JSON object; --emit FILE writes
// the validated description with every shape filled in).
int RunGraphCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Lists the op set with inputs and attributes.
int RunOpsCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

// Lists the zoo's models with their options and defaults.
int RunZooCommand(const std::vector<std::string>& args, std::ostream& out, std::ostream& err);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_GRAPH_COMMAND_H_
