// The model a command works on, from its flags: --model NAME (a zoo model, with --batch and
// the model's own options such as --layers), --graph FILE (a description, binary or text) or
// --onnx FILE (an ONNX model, imported with --batch, --loss and --classes).
#ifndef HEADROOM_CLIENTS_MODEL_FLAGS_H_
#define HEADROOM_CLIENTS_MODEL_FLAGS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "util/cli_flags.h"
#include "proto/headroom.pb.h"

namespace headroom::clients {

// Default samples per step for zoo models.
inline constexpr int64_t kDefaultBatch = 32;

// A model as a command loads it: its description and, for --onnx, its weights.
struct LoadedModel {
  proto::GraphDef graph;
  // The ONNX initializers' values by tensor name (empty for --model and --graph, or when
  // not asked for).
  std::vector<proto::TensorValue> values;
};

// Returns the model's description, taking --model, --graph, --onnx, --batch, --loss,
// --classes and the zoo model's options from `flags`. Exactly one of --model, --graph and
// --onnx must be given. With `with_values`, an ONNX model's weights come too.
absl::StatusOr<LoadedModel> LoadModelFromFlags(CliFlags& flags, bool with_values);

// Returns LoadModelFromFlags(flags, false).graph.
absl::StatusOr<proto::GraphDef> ModelFromFlags(CliFlags& flags);

// Returns the model as the daemon takes it, from the same flags: the zoo model's name, batch
// and options (built by the daemon), or the --graph file's description, or the --onnx file
// imported here (its description only: the file with its weights would exceed a message; the
// daemon trains it from seeded weights).
absl::StatusOr<proto::ModelSource> ModelSourceFromFlags(CliFlags& flags);

// The usage lines for these flags.
std::string ModelFlagsUsage();

// Returns --host-memory (shared or separate; absent: the backend's), taken from `flags`.
absl::StatusOr<proto::HostMemory> TakeHostMemoryFlag(CliFlags& flags);

// The usage lines of --host-memory.
std::string HostMemoryFlagUsage();

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_MODEL_FLAGS_H_
