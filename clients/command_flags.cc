#include "clients/command_flags.h"

#include <algorithm>
#include <functional>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "graph/graph_io.h"
#include "graph/mixed_precision.h"
#include "graph/onnx_import.h"
#include "graph/zoo.h"
#include "planner/collective_cost.h"
#include "planner/cost_model.h"
#include "planner/sections.h"
#include "profiler/measured_cost_model.h"
#include "runner/trainer_options.h"
#include "util/byte_size.h"
#include "util/status_macros.h"

namespace headroom::clients {
namespace {

bool Given(const CLI::App* app, const std::string& flag) {
  return app != nullptr && app->count(flag) > 0;
}

// Returns an error unless exactly one of --model, --graph and --onnx is given, --batch not
// with --graph, and --loss and --classes only with --onnx.
absl::Status CheckModelFlags(const ModelFlags& f) {
  const int sources = !f.model.empty() + !f.graph.empty() + !f.onnx.empty();
  if (sources != 1) {
    return absl::InvalidArgumentError(
        "give exactly one of --model NAME (see 'headroom zoo'), --graph FILE or --onnx FILE");
  }
  if (!f.graph.empty() && Given(f.app, "--batch")) {
    return absl::InvalidArgumentError(
        "--batch applies to --model and --onnx; a --graph description carries its own shapes");
  }
  if (Given(f.app, "--loss") && f.onnx.empty()) {
    return absl::InvalidArgumentError("--loss applies to --onnx");
  }
  if (Given(f.app, "--classes") && !f.graph.empty()) {
    return absl::InvalidArgumentError("--classes applies to --onnx and zoo models with classes");
  }
  if (f.strict_training && f.onnx.empty()) {
    return absl::InvalidArgumentError("--strict-training applies to --onnx");
  }
  return absl::OkStatus();
}

// Returns the --onnx model imported with --batch, --loss and --classes.
absl::StatusOr<graph::ImportedModel> ImportOnnx(const ModelFlags& f, bool with_values) {
  graph::OnnxImportOptions options;
  options.batch = static_cast<uint64_t>(f.batch);
  options.loss = f.loss;
  options.classes = static_cast<uint64_t>(f.classes);
  options.keep_values = with_values;
  options.strict_training = f.strict_training;
  return graph::ImportOnnxFile(f.onnx, options);
}

ImportNotes NotesOf(const graph::ImportedModel& imported) {
  return ImportNotes{
      .onnx = true, .inference_export = imported.inference_export, .warnings = imported.warnings};
}

// Returns the zoo model --model names with --batch and the options given for it.
absl::StatusOr<proto::ZooModel> ZooModelOf(const ModelFlags& f) {
  proto::ZooModel spec;
  spec.set_name(f.model);
  spec.set_batch(static_cast<uint64_t>(f.batch));
  const graph::ZooModelInfo* info = nullptr;
  for (const graph::ZooModelInfo& m : graph::ZooModels()) {
    if (m.name == f.model) info = &m;
  }
  std::map<std::string, int64_t> given = f.zoo_options;
  given["classes"] = f.classes;  // --classes is the ONNX check and a zoo option both
  for (const auto& [name, value] : given) {
    if (!Given(f.app, "--" + name)) continue;
    const graph::ZooOption* option = nullptr;
    if (info != nullptr) {
      for (const graph::ZooOption& o : info->options) {
        if (o.name == name) option = &o;
      }
    }
    if (option == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--", name, " is not an option of the zoo model '", f.model, "' (see 'headroom zoo')"));
    }
    if (value < option->min_value) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " must be at least ", option->min_value, ", not ", value));
    }
    (*spec.mutable_options())[name] = value;
  }
  return spec;
}

}  // namespace

namespace {

// Returns a check that a flag's value reads as a T for which `ok` holds; else the message
// "must be REQUIREMENT, not 'VALUE'".
template <typename T>
CLI::Validator NumberCheck(std::function<bool(T)> ok, const std::string& requirement,
                           const std::string& description) {
  return CLI::Validator(
      [ok, requirement](std::string& text) -> std::string {
        T value{};
        if (CLI::detail::lexical_cast(text, value) && ok(value)) return "";
        return absl::StrCat("must be ", requirement, ", not '", text, "'");
      },
      description);
}

}  // namespace

CLI::Validator AtLeast(int64_t min) {
  return NumberCheck<int64_t>([min](int64_t v) { return v >= min; },
                              absl::StrCat("an integer of at least ", min),
                              absl::StrCat(">=", min));
}

const char* const kDatasetOnlyFlags[13] = {"--epochs",
                                           "--eval-every",
                                           "--validation-fraction",
                                           "--lr-schedule",
                                           "--warmup-steps",
                                           "--crop-padding",
                                           "--flip",
                                           "--prefetch",
                                           "--checkpoint-every-epochs",
                                           "--keep-last",
                                           "--early-stop-patience",
                                           "--early-stop-metric",
                                           "--early-stop-min-delta"};

void AddDatasetFlags(CLI::App& app, DatasetFlags& f, const DatasetFlagsHelp& help) {
  const std::string& group = help.group;
  app.add_option("--dataset", f.dataset, help.dataset)->type_name("NAME|DIR")->group(group);
  app.add_option("--epochs", f.epochs, "epochs over the training items")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 10000))
      ->group(group);
  app.add_option("--eval-every", f.eval_every,
                 "evaluate loss and top-1 accuracy on the held-out items every K epochs and "
                 "after the last (0: never)")
      ->type_name("K")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000))
      ->group(group);
  app.add_option("--validation-fraction", f.validation_fraction,
                 "hold this fraction of the training set out for evaluation (default: "
                 "fashion-mnist evaluates on its test part)")
      ->type_name("F")
      ->check(CLI::Range(0.0, 0.99))
      ->group(group);
  app.add_option("--lr-schedule", f.lr_schedule,
                 "constant; step (a tenth every third of the run); cosine (to 0 over the run)")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"constant", "step", "cosine"}))
      ->group(group);
  app.add_option("--warmup-steps", f.warmup_steps,
                 "linear warm-up from a tenth of the rate over the first N steps")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(0))
      ->group(group);
  app.add_option("--crop-padding", f.crop_padding,
                 "augment: random crops of the image padded by N pixels")
      ->type_name("N")
      ->check(CLI::Range(0, 64))
      ->group(group);
  app.add_flag("--flip", f.flip, "augment: mirror half the images left to right")->group(group);
  app.add_option("--prefetch", f.prefetch, "batches the loader decodes ahead")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(1, 64))
      ->group(group);
  app.add_option("--checkpoint-every-epochs", f.checkpoint_every_epochs,
                 help.checkpoint_every_epochs)
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000))
      ->group(group);
  app.add_option("--keep-last", f.keep_last, help.keep_last)
      ->type_name("K")
      ->capture_default_str()
      ->check(CLI::Range(1, 100))
      ->group(group);
  app.add_option("--early-stop-patience", f.early_stop_patience,
                 "stop after N evaluations without improvement (0: never)")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(0, 10000))
      ->group(group);
  app.add_option("--early-stop-metric", f.early_stop_metric, "the metric early stopping watches")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"eval_loss", "eval_accuracy", "train_loss"}))
      ->group(group);
  app.add_option("--early-stop-min-delta", f.early_stop_min_delta,
                 "an improvement must be larger than this")
      ->type_name("D")
      ->capture_default_str()
      ->check(CLI::NonNegativeNumber)
      ->group(group);
}

void AddModelFlags(CLI::App& command, ModelFlags& f) {
  f.app = &command;
  command.add_option("--model", f.model, "a zoo model (see 'headroom zoo'); its options as flags")
      ->type_name("NAME")
      ->group("Model");
  command.add_option("--graph", f.graph, "a graph description: binary (.pb) or text (.pbtxt)")
      ->type_name("FILE")
      ->group("Model");
  command.add_option("--onnx", f.onnx, "an ONNX model (tools/export_onnx.py writes torchvision's)")
      ->type_name("FILE")
      ->group("Model");
  command.add_option("--batch", f.batch, "samples per step for --model and --onnx")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(1))
      ->group("Model");
  command
      .add_option("--loss", f.loss,
                  "the loss attached to an ONNX model's first output: softmax_cross_entropy (over "
                  "the last axis; per pixel over axis 1, label 255 ignored, for [N, C, H, W] "
                  "logits) or pixel_cross_entropy (per position over axis 1 at any rank)")
      ->type_name("NAME")
      ->capture_default_str()
      ->group("Model");
  command
      .add_flag("--strict-training", f.strict_training,
                "refuse an ONNX model exported for inference (batch norms in inference mode "
                "or folded away) instead of warning")
      ->group("Model");
  command
      .add_option("--classes", f.classes,
                  "output classes: of a zoo model that has them, or checked against an ONNX "
                  "model's output (default: the model's)")
      ->type_name("N")
      ->check(AtLeast(0))
      ->group("Model");
  // Every zoo model's own options; ZooModelOf checks each given one belongs to the model.
  std::map<std::string, std::set<std::string>> models_of;
  for (const graph::ZooModelInfo& m : graph::ZooModels()) {
    for (const graph::ZooOption& o : m.options) models_of[o.name].insert(m.name);
  }
  for (const auto& [name, models] : models_of) {
    if (command.get_option_no_throw("--" + name) != nullptr) continue;  // --classes
    std::string doc;
    for (const graph::ZooModelInfo& m : graph::ZooModels()) {
      for (const graph::ZooOption& o : m.options) {
        if (o.name == name && doc.empty()) doc = o.doc;
      }
    }
    std::string owners;
    for (const std::string& model : models)
      absl::StrAppend(&owners, owners.empty() ? "" : ", ", model);
    command.add_option("--" + name, f.zoo_options[name], absl::StrCat(doc, " (", owners, ")"))
        ->group("Zoo model options (defaults: 'headroom zoo')");
  }
}

absl::StatusOr<LoadedModel> LoadModel(const ModelFlags& f, bool with_values) {
  RETURN_IF_ERROR(CheckModelFlags(f));
  LoadedModel model;
  if (!f.graph.empty()) {
    ASSIGN_OR_RETURN(model.graph, graph::ReadGraphFile(f.graph));
  } else if (!f.onnx.empty()) {
    ASSIGN_OR_RETURN(graph::ImportedModel imported, ImportOnnx(f, with_values));
    model.notes = NotesOf(imported);
    model.graph = std::move(imported.graph);
    model.values = std::move(imported.values);
  } else {
    ASSIGN_OR_RETURN(proto::ZooModel spec, ZooModelOf(f));
    ASSIGN_OR_RETURN(model.graph, graph::BuildZooModel(spec));
  }
  return model;
}

absl::StatusOr<SourcedModel> ModelSourceOf(const ModelFlags& f) {
  RETURN_IF_ERROR(CheckModelFlags(f));
  SourcedModel model;
  proto::ModelSource& source = model.source;
  if (!f.graph.empty()) {
    ASSIGN_OR_RETURN(*source.mutable_graph(), graph::ReadGraphFile(f.graph));
  } else if (!f.onnx.empty()) {
    ASSIGN_OR_RETURN(graph::ImportedModel imported, ImportOnnx(f, /*with_values=*/false));
    model.notes = NotesOf(imported);
    *source.mutable_graph() = std::move(imported.graph);
  } else {
    ASSIGN_OR_RETURN(*source.mutable_zoo(), ZooModelOf(f));
  }
  return model;
}

void PrintNotes(const ImportNotes& notes, std::ostream& out) {
  for (const std::string& warning : notes.warnings) out << "warning: " << warning << "\n";
}

void WriteNotes(const ImportNotes& notes, JsonWriter& w) {
  if (!notes.onnx) return;
  w.Key("inference_export").Bool(notes.inference_export).Key("warnings").BeginArray();
  for (const std::string& warning : notes.warnings) w.String(warning);
  w.EndArray();
}

std::string WithNotes(const std::string& json, const ImportNotes& notes) {
  if (!notes.onnx || json.size() < 2 || json.front() != '{') return json;
  JsonWriter w;
  w.BeginObject();
  WriteNotes(notes, w);
  w.EndObject();
  std::string fields = w.str();  // {"inference_export":...,"warnings":[...]}
  fields.pop_back();
  const bool empty = json.find_first_not_of(" \n", 1) == json.rfind('}');
  return fields + (empty ? "" : ",") + json.substr(1);
}

absl::StatusOr<proto::ModelSource> OnnxUploadSourceOf(const ModelFlags& f) {
  RETURN_IF_ERROR(CheckModelFlags(f));
  if (f.strict_training) {
    return absl::InvalidArgumentError(
        "--strict-training: headroomd imports an uploaded model itself; check it here first "
        "with `headroom graph --onnx FILE --strict-training`");
  }
  proto::ModelSource source;
  proto::OnnxImport& onnx = *source.mutable_onnx();
  onnx.set_batch(static_cast<uint64_t>(f.batch));
  onnx.set_loss(f.loss);
  onnx.set_classes(static_cast<uint64_t>(f.classes));
  return source;
}

void AddPlanFlags(CLI::App& command, PlanFlags& f, bool trains) {
  command
      .add_option("--budget", f.budget,
                  "device memory to fit (6GiB, 400MiB, 1.5GB, bytes) with sections and host "
                  "offload, at the least predicted time; default: no limit")
      ->type_name("SIZE")
      ->group("Plan");
  command
      .add_option(
          "--device", f.device,
          "cost-model preset: cpu, h100, h200 or gh200 (default cpu; h100 with --backend cuda)")
      ->type_name("NAME")
      ->check(CLI::IsMember(planner::DevicePresetNames()))
      ->group("Plan");
  command
      .add_option("--device-file", f.device_file,
                  "a text-format DeviceModel overriding a preset's rates")
      ->type_name("FILE")
      ->group("Plan");
  command.add_flag("--no-offload", f.no_offload, "keep every cached section input on the device")
      ->group("Plan");
  command
      .add_option("--host-memory", f.host_memory,
                  "whether offloaded tensors' host memory counts against --budget: shared "
                  "(it does; the CPU backend's default, whose host memory is its device "
                  "memory) or separate (it does not; a GPU's default)")
      ->type_name("KIND")
      ->check(CLI::IsMember({"shared", "separate"}))
      ->group("Plan");
  command
      .add_option("--optimizer-state", f.optimizer_state,
                  "where the optimizer state lives and its update runs: device, host (state and "
                  "update on the host, gradients copied out as they finish) or auto (the "
                  "search chooses)")
      ->type_name("WHERE")
      ->capture_default_str()
      ->check(CLI::IsMember({"device", "host", "auto"}))
      ->group("Plan");
  command
      .add_option("--parameters", f.parameters,
                  "where the parameters live between uses: device, host (master copies in the "
                  "host pool; each section's forward, re-forward and backward prefetches a "
                  "device copy; needs --optimizer-state host or auto) or auto (the search "
                  "chooses)")
      ->type_name("WHERE")
      ->capture_default_str()
      ->check(CLI::IsMember({"device", "host", "auto"}))
      ->group("Plan");
  command
      .add_option("--precision", f.precision,
                  "fp32, bf16 (mixed precision: activations and their gradients bfloat16; "
                  "parameters, the gradients the update reads and optimizer state float32) or "
                  "auto (the search plans both and takes bf16 where it is faster or fp32 does "
                  "not fit)")
      ->type_name("KIND")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "auto"}))
      ->group("Plan");
  command.add_option("--optimizer", f.optimizer, "sgd (with momentum) or adam")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"sgd", "adam"}))
      ->group("Plan");
  if (!trains) {
    command.add_option("--alignment", f.alignment, "offset alignment in the arena (default 256)")
        ->type_name("BYTES")
        ->check(AtLeast(0))
        ->group("Plan");
    command
        .add_option("--ranks", f.ranks,
                    "data-parallel ranks (one per device): the step then holds the gradient "
                    "allreduces, the memory their buckets (default 1)")
        ->type_name("N")
        ->group("Plan");
    command
        .add_option("--interconnect", f.interconnect,
                    "with --ranks: nvlink, ib, pcie, nvlink+ib or cpu (default nvlink+ib on a "
                    "GPU device, cpu on cpu)")
        ->type_name("NAME")
        ->group("Plan");
    command
        .add_option("--bucket-kib", f.bucket_kib,
                    "with --ranks: close a gradient bucket at this many KiB (default 0: one per "
                    "gradient, as `headroom train --bucket-kib`)")
        ->type_name("KIB")
        ->check(AtLeast(0))
        ->group("Plan");
    command
        .add_flag("--sync-batchnorm", f.sync_batchnorm,
                  "with --ranks: batch norm over the global batch, as `headroom train "
                  "--sync-batchnorm`: 3 allreduces per batch norm and step on the critical path")
        ->group("Plan");
  } else {
    command
        .add_option("--lr", f.learning_rate, "learning rate (default 0.01 for sgd, 0.001 for adam)")
        ->type_name("RATE")
        ->check(
            NumberCheck<double>([](double rate) { return rate > 0; }, "a positive number", "> 0"))
        ->group("Plan");
    command
        .add_flag("--no-reversible", f.no_reversible,
                  "keep the activations of the graph's reversible blocks (the baseline) "
                  "instead of rebuilding them in the backward pass (the default without "
                  "--budget)")
        ->group("Plan");
  }
}

absl::StatusOr<proto::PlanOptions> PlanOptionsOf(const PlanFlags& f) {
  proto::PlanOptions options;
  if (!f.budget.empty()) {
    absl::StatusOr<uint64_t> bytes = ParseByteSize(f.budget);
    if (!bytes.ok())
      return absl::InvalidArgumentError(absl::StrCat("--budget: ", bytes.status().message()));
    if (*bytes == 0) return absl::InvalidArgumentError("--budget must be more than 0 bytes");
    options.set_budget_bytes(*bytes);
  }
  if (!f.device_file.empty()) {
    absl::StatusOr<proto::DeviceModel> model = planner::ReadDeviceModelFile(f.device_file);
    if (!model.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("--device-file: ", model.status().message()));
    }
    *options.mutable_device() = *std::move(model);
  }
  if (!f.device.empty()) options.mutable_device()->set_preset(f.device);
  options.set_disable_offload(f.no_offload);
  options.set_disable_reversible(f.no_reversible);
  options.set_max_rebuild_error(f.max_rebuild_error);
  options.set_host_memory(f.host_memory == "shared"     ? proto::HOST_MEMORY_SHARED
                          : f.host_memory == "separate" ? proto::HOST_MEMORY_SEPARATE
                                                        : proto::HOST_MEMORY_BACKEND);
  options.set_optimizer_state(f.optimizer_state == "host"   ? proto::OPTIMIZER_STATE_HOST
                              : f.optimizer_state == "auto" ? proto::OPTIMIZER_STATE_AUTO
                                                            : proto::OPTIMIZER_STATE_DEVICE);
  options.set_parameters(f.parameters == "host"   ? proto::PARAMETERS_HOST
                         : f.parameters == "auto" ? proto::PARAMETERS_AUTO
                                                  : proto::PARAMETERS_DEVICE);
  if (f.parameters == "host" && f.optimizer_state == "device") {
    return absl::InvalidArgumentError(
        "--parameters host needs --optimizer-state host or auto (the host update's master "
        "copies are what each use prefetches)");
  }
  ASSIGN_OR_RETURN(const proto::Precision precision, graph::ParsePrecision(f.precision));
  options.set_precision(precision);
  options.mutable_optimizer()->set_kind(
      f.optimizer == "adam" ? proto::Optimizer::KIND_ADAM : proto::Optimizer::KIND_SGD_MOMENTUM);
  options.mutable_optimizer()->set_learning_rate(f.learning_rate);
  if ((f.alignment & (f.alignment - 1)) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--alignment must be a power of two, not ", f.alignment));
  }
  options.set_alignment_bytes(static_cast<uint64_t>(f.alignment));
  if (f.ranks < 1 || f.ranks > planner::kMaxRanks) {
    return absl::InvalidArgumentError(
        absl::StrCat("--ranks ", f.ranks, ": needs 1 to ", planner::kMaxRanks, " ranks"));
  }
  if (!f.interconnect.empty()) {
    const absl::Status known = planner::InterconnectPreset(f.interconnect).status();
    if (!known.ok()) return absl::InvalidArgumentError(absl::StrCat("--", known.message()));
    if (f.ranks == 1) return absl::InvalidArgumentError("--interconnect needs --ranks above 1");
  }
  if (f.bucket_kib > 0 && f.ranks == 1) {
    return absl::InvalidArgumentError("--bucket-kib needs --ranks above 1");
  }
  if (f.sync_batchnorm && f.ranks == 1) {
    return absl::InvalidArgumentError("--sync-batchnorm needs --ranks above 1");
  }
  if (f.ranks > 1) {
    proto::DataParallelOptions& dp = *options.mutable_data_parallel();
    dp.set_ranks(static_cast<uint32_t>(f.ranks));
    dp.mutable_interconnect()->set_preset(f.interconnect);
    dp.set_bucket_bytes(static_cast<uint64_t>(f.bucket_kib) * 1024);
    dp.set_sync_batch_norm(f.sync_batchnorm);
  }
  return options;
}

void AddCheckRebuildFlag(CLI::App& command, int64_t& every_steps) {
  command
      .add_option("--check-rebuild", every_steps,
                  "every N steps compare each tensor rebuilt for a reversible block with the "
                  "forward's copy and report max_rebuild_error (a debug mode: host copies "
                  "outside the plan); 0 never")
      ->type_name("N")
      ->capture_default_str()
      ->check(CLI::Range(int64_t{0}, int64_t{UINT32_MAX}));
}

void AddRunFlags(CLI::App& command, RunFlags& f, int64_t default_steps,
                 const std::string& backend_default) {
  f.steps = default_steps;
  f.backend = backend_default;
  command.add_option("--steps", f.steps, "training steps")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(1))
      ->group("Run");
  command.add_option("--seed", f.seed, "seed of the weights, the synthetic batches and dropout")
      ->type_name("N")
      ->capture_default_str()
      ->check(AtLeast(0))
      ->group("Run");
  command
      .add_option(
          "--backend", f.backend,
          backend_default.empty() ? "cpu or cuda (default: headroomd's)" : "cpu (oneDNN) or cuda")
      ->type_name("NAME")
      ->capture_default_str()
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->group("Run");
  // Only where the backend runs here: the daemon's backend is made by its own flags.
  if (!backend_default.empty()) {
    command
        .add_flag("--nondeterministic", f.nondeterministic,
                  "on cuda, admit nondeterministic kernels (cuDNN convolution algorithms that "
                  "accumulate with atomics): faster, but runs no longer repeat bitwise")
        ->group("Run");
  }
}

absl::StatusOr<executor::TrainerOptions> TrainerOptionsOf(const PlanFlags& plan,
                                                          const RunFlags& run) {
  ASSIGN_OR_RETURN(proto::PlanOptions options, PlanOptionsOf(plan));
  absl::StatusOr<executor::TrainerOptions> trainer =
      runner::TrainerOptionsOf(options, static_cast<uint64_t>(run.seed), run.backend);
  if (!trainer.ok()) return absl::InvalidArgumentError(trainer.status().message());
  return trainer;
}

executor::BackendOptions BackendOptionsOf(const RunFlags& run) {
  executor::BackendOptions options;
  options.deterministic = !run.nondeterministic;
  return options;
}

void AddLocalPlanFlags(CLI::App& command, LocalPlanFlags& f) {
  command
      .add_option("--sections", f.sections,
                  "instead of a budget: N sections of equal length, recompute only (for "
                  "experiments)")
      ->type_name("N")
      ->check(AtLeast(0))
      ->group("Plan");
  command
      .add_option("--profile", f.profile_path,
                  "choose the plan with the node times and copy rates measured by `headroom "
                  "profile --out FILE` (same model and batch)")
      ->type_name("FILE")
      ->group("Plan");
}

absl::Status ResolveLocalPlan(const graph::Graph& forward, const LocalPlanFlags& f,
                              executor::TrainerOptions& trainer) {
  if (f.sections > 0) {
    if (trainer.budget_bytes > 0) {
      return absl::InvalidArgumentError(
          "--sections and --budget choose the plan two ways; give one");
    }
    const int64_t nodes = static_cast<int64_t>(forward.nodes().size());
    if (f.sections > nodes) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sections ", f.sections, ": the model has ", nodes, " forward nodes"));
    }
    planner::SectionCuts cuts;
    cuts.cuts = planner::EvenCuts(static_cast<int32_t>(nodes), static_cast<int32_t>(f.sections));
    trainer.cuts = cuts;
  }
  if (f.profile_path.empty()) return absl::OkStatus();
  ASSIGN_OR_RETURN(proto::ProfileResponse profile, profiler::ReadProfileFile(f.profile_path));
  absl::StatusOr<std::unique_ptr<profiler::MeasuredCostModel>> model =
      profiler::MeasuredCostModel::Create(forward, profile, trainer.device);
  if (!model.ok()) {
    return absl::Status(model.status().code(),
                        absl::StrCat("--profile ", f.profile_path, ": ", model.status().message()));
  }
  trainer.cost = *std::move(model);
  return absl::OkStatus();
}

}  // namespace headroom::clients
