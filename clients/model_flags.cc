#include "clients/model_flags.h"

#include "absl/strings/str_cat.h"
#include "graph/graph_io.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "util/status_macros.h"

namespace headroom::clients {

namespace {

// Returns an error unless exactly one of --model, --graph and --onnx is given, --batch not
// with --graph, and --loss and --classes only with --onnx.
absl::Status CheckModelFlags(const CliFlags& flags) {
  const int sources = flags.Has("model") + flags.Has("graph") + flags.Has("onnx");
  if (sources != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --model NAME (see 'headroom zoo'), --graph FILE or --onnx FILE");
  }
  if (flags.Has("graph") && flags.Has("batch")) {
    return absl::InvalidArgumentError(
        "--batch applies to --model and --onnx; a --graph description carries its own shapes");
  }
  for (const char* flag : {"loss", "classes"}) {
    if (flags.Has(flag) && !flags.Has("onnx")) {
      return absl::InvalidArgumentError(absl::StrCat("--", flag, " applies to --onnx"));
    }
  }
  return absl::OkStatus();
}

// Returns the --onnx model imported with --batch, --loss and --classes.
absl::StatusOr<graph::ImportedModel> ImportFromFlags(CliFlags& flags, bool with_values) {
  graph::OnnxImportOptions options;
  ASSIGN_OR_RETURN(int64_t batch, flags.TakeInt("batch", kDefaultBatch, 1));
  options.batch = static_cast<uint64_t>(batch);
  options.loss = flags.TakeString("loss", options.loss);
  ASSIGN_OR_RETURN(int64_t classes, flags.TakeInt("classes", 0, 0));
  options.classes = static_cast<uint64_t>(classes);
  options.keep_values = with_values;
  return graph::ImportOnnxFile(flags.TakeString("onnx"), options);
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

absl::StatusOr<LoadedModel> LoadModelFromFlags(CliFlags& flags, bool with_values) {
  RETURN_IF_ERROR(CheckModelFlags(flags));
  LoadedModel model;
  if (flags.Has("graph")) {
    ASSIGN_OR_RETURN(model.graph, graph::ReadGraphFile(flags.TakeString("graph")));
  } else if (flags.Has("onnx")) {
    ASSIGN_OR_RETURN(graph::ImportedModel imported, ImportFromFlags(flags, with_values));
    model.graph = std::move(imported.graph);
    model.values = std::move(imported.values);
  } else {
    ASSIGN_OR_RETURN(proto::ZooModel spec, ZooModelFromFlags(flags));
    ASSIGN_OR_RETURN(model.graph, graph::BuildZooModel(spec));
  }
  return model;
}

absl::StatusOr<proto::GraphDef> ModelFromFlags(CliFlags& flags) {
  ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags(flags, /*with_values=*/false));
  return std::move(model.graph);
}

absl::StatusOr<proto::ModelSource> ModelSourceFromFlags(CliFlags& flags) {
  RETURN_IF_ERROR(CheckModelFlags(flags));
  proto::ModelSource source;
  if (flags.Has("graph")) {
    ASSIGN_OR_RETURN(*source.mutable_graph(), graph::ReadGraphFile(flags.TakeString("graph")));
  } else if (flags.Has("onnx")) {
    ASSIGN_OR_RETURN(graph::ImportedModel imported, ImportFromFlags(flags, /*with_values=*/false));
    *source.mutable_graph() = std::move(imported.graph);
  } else {
    ASSIGN_OR_RETURN(*source.mutable_zoo(), ZooModelFromFlags(flags));
  }
  return source;
}

absl::StatusOr<proto::HostMemory> TakeHostMemoryFlag(CliFlags& flags) {
  const std::string value = flags.TakeString("host-memory");
  if (value.empty()) return proto::HOST_MEMORY_BACKEND;
  if (value == "shared") return proto::HOST_MEMORY_SHARED;
  if (value == "separate") return proto::HOST_MEMORY_SEPARATE;
  return absl::InvalidArgumentError(
      absl::StrCat("--host-memory must be shared or separate, not '", value, "'"));
}

std::string HostMemoryFlagUsage() {
  return "  --host-memory KIND  whether offloaded tensors' host memory counts against\n"
         "                      --budget: shared (it does; the CPU backend's default, whose\n"
         "                      host memory is its device memory) or separate (it does\n"
         "                      not; a GPU's default; on the CPU it emulates a GPU)\n";
}

std::string ModelFlagsUsage() {
  return "  --model NAME        a zoo model (see 'headroom zoo'); its options as flags,\n"
         "                      e.g. --layers 48 for the transformer\n"
         "  --batch N           samples per step for --model and --onnx (default 32)\n"
         "  --graph FILE        a graph description: binary (.pb) or text (.pbtxt)\n"
         "  --onnx FILE         an ONNX model (tools/export_onnx.py writes torchvision's)\n"
         "  --loss NAME         the loss attached to an ONNX model's first output\n"
         "                      (default softmax_cross_entropy)\n"
         "  --classes N         check the ONNX output has N classes (default: its last dim)\n";
}

}  // namespace headroom::clients
