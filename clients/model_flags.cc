#include "clients/model_flags.h"

#include "absl/strings/str_cat.h"
#include "graph/graph_io.h"
#include "graph/zoo.h"
#include "util/status_macros.h"

namespace headroom::clients {

namespace {

// Returns an error unless exactly one of --model and --graph is given, and --batch only with
// --model.
absl::Status CheckModelFlags(const CliFlags& flags) {
  const bool has_model = flags.Has("model");
  const bool has_graph = flags.Has("graph");
  if (has_model == has_graph) {
    return absl::InvalidArgumentError(
        "give exactly one of --model NAME (see 'headroom zoo') or --graph FILE");
  }
  if (has_graph && flags.Has("batch")) {
    return absl::InvalidArgumentError(
        "--batch applies to --model; a --graph description carries its own shapes");
  }
  return absl::OkStatus();
}

// Returns the zoo model named by --model, with --batch and the model's own options.
absl::StatusOr<proto::ZooModel> ZooModelFromFlags(CliFlags& flags) {
  proto::ZooModel spec;
  spec.set_name(flags.TakeString("model"));
  ASSIGN_OR_RETURN(int64_t batch, flags.TakeInt("batch", kDefaultBatch));
  spec.set_batch(static_cast<uint64_t>(batch));
  // The model's own options (--layers, --image_size, ...) arrive as flags.
  for (const graph::ZooModelInfo& info : graph::ZooModels()) {
    if (info.name != spec.name()) continue;
    for (const graph::ZooOption& option : info.options) {
      if (!flags.Has(option.name)) continue;
      ASSIGN_OR_RETURN(int64_t value,
                       flags.TakeInt(option.name, option.default_value, option.min_value));
      (*spec.mutable_options())[option.name] = value;
    }
  }
  return spec;
}

}  // namespace

absl::StatusOr<proto::GraphDef> ModelFromFlags(CliFlags& flags) {
  RETURN_IF_ERROR(CheckModelFlags(flags));
  if (flags.Has("graph")) return graph::ReadGraphFile(flags.TakeString("graph"));
  ASSIGN_OR_RETURN(proto::ZooModel spec, ZooModelFromFlags(flags));
  return graph::BuildZooModel(spec);
}

absl::StatusOr<proto::ModelSource> ModelSourceFromFlags(CliFlags& flags) {
  RETURN_IF_ERROR(CheckModelFlags(flags));
  proto::ModelSource source;
  if (flags.Has("graph")) {
    ASSIGN_OR_RETURN(*source.mutable_graph(), graph::ReadGraphFile(flags.TakeString("graph")));
  } else {
    ASSIGN_OR_RETURN(*source.mutable_zoo(), ZooModelFromFlags(flags));
  }
  return source;
}

std::string ModelFlagsUsage() {
  return "  --model NAME        a zoo model (see 'headroom zoo'); its options as flags,\n"
         "                      e.g. --layers 48 for the transformer\n"
         "  --batch N           samples per step for --model (default 32)\n"
         "  --graph FILE        a graph description: binary (.pb) or text (.pbtxt)\n";
}

}  // namespace headroom::clients
