// The model a command works on, from its flags: --model NAME (a zoo model, with --batch and
// the model's own options such as --layers) or --graph FILE (a description, binary or text).
#ifndef HEADROOM_CLIENTS_MODEL_FLAGS_H_
#define HEADROOM_CLIENTS_MODEL_FLAGS_H_

#include <string>

#include "absl/status/statusor.h"
#include "util/cli_flags.h"
#include "proto/headroom.pb.h"

namespace headroom::clients {

// Default samples per step for zoo models.
inline constexpr int64_t kDefaultBatch = 32;

// Returns the model's description, taking --model, --graph, --batch and the zoo model's
// options from `flags`. Exactly one of --model and --graph must be given.
absl::StatusOr<proto::GraphDef> ModelFromFlags(CliFlags& flags);

// Returns the model as the daemon takes it, from the same flags: the zoo model's name, batch
// and options (built by the daemon), or the --graph file's description (read here).
absl::StatusOr<proto::ModelSource> ModelSourceFromFlags(CliFlags& flags);

// The usage lines for these flags.
std::string ModelFlagsUsage();

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_MODEL_FLAGS_H_
