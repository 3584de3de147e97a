// The flags of the `headroom` commands, each defined once. An Add*Flags function declares a
// group of flags on a command (CLI11: name, value, help and default in one call), and the
// function beside it turns the parsed values into what the command sends or runs: a model,
// plan options, trainer options. Commands that share a flag share its group, so a flag is
// parsed, checked and defaulted in one place.
#ifndef HEADROOM_CLIENTS_COMMAND_FLAGS_H_
#define HEADROOM_CLIENTS_COMMAND_FLAGS_H_

#include <cstdint>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "executor/backends.h"
#include "executor/trainer.h"
#include "graph/graph.h"
#include "proto/headroom.pb.h"
#include "util/json_writer.h"

namespace headroom::clients {

// Returns a CLI11 check that an integer flag is at least `min` ("must be at least 1, not 0").
CLI::Validator AtLeast(int64_t min);

// --model NAME (a zoo model, with --batch and the model's own options such as --layers),
// --graph FILE (a description, binary or text) or --onnx FILE (with --batch, --loss and
// --classes).
struct ModelFlags {
  std::string model;
  std::string graph;
  std::string onnx;
  int64_t batch = 32;
  std::string loss = "softmax_cross_entropy";
  int64_t classes = 0;
  // Every zoo model's options by name; only those given on the command line are sent.
  std::map<std::string, int64_t> zoo_options;
  // --strict-training: refuse an ONNX export of the inference graph instead of warning.
  bool strict_training = false;
  // The command the flags were declared on (to ask which were given).
  const CLI::App* app = nullptr;
};

// What importing --onnx found that people should know (graph::ImportedModel's warnings).
struct ImportNotes {
  // Whether the model came from --onnx (only then do the notes appear in JSON).
  bool onnx = false;
  // The model is an export of the inference graph (graph/onnx_export_mode.h).
  bool inference_export = false;
  std::vector<std::string> warnings;
};

// Prints each warning as "warning: ..." on its own line.
void PrintNotes(const ImportNotes& notes, std::ostream& out);
// Adds "inference_export" and "warnings" to an object being written (for --onnx only).
void WriteNotes(const ImportNotes& notes, JsonWriter& w);
// Returns `json` (one object, as ProtoJson prints it) with WriteNotes' keys first.
std::string WithNotes(const std::string& json, const ImportNotes& notes);

// A model as a command loads it: its description and, for --onnx, its weights.
struct LoadedModel {
  proto::GraphDef graph;
  // The ONNX initializers' values by tensor name (empty for --model and --graph, or when
  // not asked for).
  std::vector<proto::TensorValue> values;
  ImportNotes notes;
};

// A model as the service takes it, with what its import found.
struct SourcedModel {
  proto::ModelSource source;
  ImportNotes notes;
};

void AddModelFlags(CLI::App& command, ModelFlags& flags);
// Returns the model's description (with an ONNX model's weights when `with_values`).
// InvalidArgument unless exactly one of --model, --graph and --onnx is given, or for a
// zoo option the model does not have; the error of reading or importing a file.
absl::StatusOr<LoadedModel> LoadModel(const ModelFlags& flags, bool with_values);
// Returns the model as the service takes it: the zoo model's name, batch and options, or
// the --graph file's description, or the --onnx file imported here (its description only).
absl::StatusOr<SourcedModel> ModelSourceOf(const ModelFlags& flags);
// Returns the model of --onnx as UploadJob sends it: the import options (--batch, --loss,
// --classes) alone, the file's bytes travelling in chunks beside it. The errors of
// ModelSourceOf's checks. REQUIRES: --onnx is given.
absl::StatusOr<proto::ModelSource> OnnxUploadSourceOf(const ModelFlags& flags);

// How to plan and train: --budget, --device, --device-file, --no-offload, --host-memory,
// --optimizer-state, --parameters, --precision, --optimizer, and --lr (commands that train) or
// --alignment (`plan`).
struct PlanFlags {
  std::string budget;
  std::string device;
  std::string device_file;
  bool no_offload = false;
  bool no_reversible = false;
  // --max-rebuild-error (train): PlanOptions.max_rebuild_error; 0 never.
  double max_rebuild_error = 0;
  std::string host_memory;
  // --optimizer-state: "device", "host" or "auto".
  std::string optimizer_state = "device";
  // --parameters: "device", "host" or "auto".
  std::string parameters = "device";
  // --precision: "fp32", "bf16" or "auto".
  std::string precision = "fp32";
  std::string optimizer = "sgd";
  double learning_rate = 0;
  int64_t alignment = 0;
  // `headroom plan` only (train has its own --ranks): data-parallel ranks, 1: none.
  int64_t ranks = 1;
  std::string interconnect;
  int64_t bucket_kib = 0;
  // With ranks: batch norm over the global batch (its allreduces in the step).
  bool sync_batchnorm = false;
};

// `trains`: the command trains (then --lr; else --alignment, which only plans honour).
void AddPlanFlags(CLI::App& command, PlanFlags& flags, bool trains);
// Returns the plan options of the flags. InvalidArgument naming the flag for a bad value.
absl::StatusOr<proto::PlanOptions> PlanOptionsOf(const PlanFlags& flags);

// What a training run is: --steps, --seed, --backend, and for a run here
// --nondeterministic.
struct RunFlags {
  int64_t steps = 0;
  int64_t seed = 1;
  // "" where the daemon's backend applies (remote commands); else cpu or cuda.
  std::string backend;
  // Admits nondeterministic GPU kernels (faster; runs no longer repeat bitwise).
  bool nondeterministic = false;
};

// `default_steps`: the command's; `backend_default`: "cpu" for commands that run here, ""
// (headroomd's) for those that ask the daemon.
void AddRunFlags(CLI::App& command, RunFlags& flags, int64_t default_steps,
                 const std::string& backend_default);

// --check-rebuild N (train and profile): every N steps compare each tensor rebuilt for a
// reversible block with the forward's copy and report max_rebuild_error; 0 never.
void AddCheckRebuildFlag(CLI::App& command, int64_t& every_steps);

// Returns the trainer options of a run here: plan options, seed and backend (the learning
// rate and device defaults of runner::TrainerOptionsOf).
absl::StatusOr<executor::TrainerOptions> TrainerOptionsOf(const PlanFlags& plan,
                                                          const RunFlags& run);

// Returns the options of the backend a run here makes (--nondeterministic).
executor::BackendOptions BackendOptionsOf(const RunFlags& run);

// Training on a dataset instead of the synthetic task, the flags `headroom train` and
// `headroom submit` share (docs/training.md): --dataset, --epochs, --eval-every,
// --validation-fraction, --lr-schedule, --warmup-steps, --crop-padding, --flip, --prefetch,
// --checkpoint-every-epochs, --keep-last and the --early-stop-* flags. Each command keeps its
// own defaults by setting a field before AddDatasetFlags (which shows it as the default).
struct DatasetFlags {
  std::string dataset;  // "fashion-mnist" or a dataset directory (docs/data.md)
  int64_t epochs = 1;
  int64_t eval_every = 1;
  double validation_fraction = 0;
  std::string lr_schedule = "constant";
  int64_t warmup_steps = 0;
  int64_t crop_padding = 0;
  bool flip = false;
  int64_t prefetch = 2;
  int64_t checkpoint_every_epochs = 1;
  int64_t keep_last = 3;
  int64_t early_stop_patience = 0;
  std::string early_stop_metric = "eval_loss";
  double early_stop_min_delta = 0;
};

// The help that differs between a run here and a job on the daemon.
struct DatasetFlagsHelp {
  std::string group;
  std::string dataset;
  std::string checkpoint_every_epochs;
  std::string keep_last;
};

// The flags of DatasetFlags that apply only with --dataset (all but --dataset itself).
extern const char* const kDatasetOnlyFlags[13];

void AddDatasetFlags(CLI::App& command, DatasetFlags& flags, const DatasetFlagsHelp& help);

// What a local run plans with beyond the plan options: --sections N (N sections of equal
// length instead of a search) and --profile FILE (measured node costs).
struct LocalPlanFlags {
  int64_t sections = 0;
  std::string profile_path;
};

void AddLocalPlanFlags(CLI::App& command, LocalPlanFlags& flags);

// Sets `trainer`'s cuts from --sections and its cost model from --profile, which need the
// graph. InvalidArgument for --sections with --budget or more sections than nodes; the error
// of reading the profile, naming the file.
absl::Status ResolveLocalPlan(const graph::Graph& forward, const LocalPlanFlags& flags,
                              executor::TrainerOptions& trainer);

}  // namespace headroom::clients

#endif  // HEADROOM_CLIENTS_COMMAND_FLAGS_H_
